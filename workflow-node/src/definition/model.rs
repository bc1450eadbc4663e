//! The typed, validated form of a workflow file. Produced only by the loader
//! ([`super::load_file`], [`super::parse_str`]), so every value here has passed validation:
//! references exist, the graph is acyclic, templates and schemas compile.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use workflow_expr::{Condition, Template};

pub use super::policy::OnFailure;

/// A node's id, unique within one workflow.
pub type NodeId = String;

/// One loaded workflow: the file's settings and its validated DAG.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// The workflow's agent name on the mesh (`name`).
    pub name: String,
    /// `display_name`, when given.
    pub display_name: Option<String>,
    /// `max_workflow_execution_time_seconds` (default 1800): the run's deadline.
    pub max_execution_time: Duration,
    /// `default_node_timeout_seconds` (default 300): timeout of a node without `timeout`.
    pub default_node_timeout: Duration,
    /// `default_max_map_items` (default 100, at most [`crate::limits::MAX_MAP_ITEMS`]):
    /// `max_items` of a map without one.
    pub default_max_map_items: usize,
    /// `workflow.description` (required): what the workflow does, advertised as the
    /// agent card's description so callers can pick it.
    pub description: String,
    /// `workflow.version` (default "1.0.0").
    pub version: String,
    /// `workflow.input_schema`, compiled.
    pub input_schema: Option<Schema>,
    /// `workflow.output_schema`, compiled.
    pub output_schema: Option<Schema>,
    /// `workflow.nodes`, in file order.
    pub nodes: Vec<Node>,
    /// `workflow.output_mapping`: resolved after the DAG ends to give the run's output.
    pub output_mapping: Template,
    /// `workflow.skills`, as written (advertised on the agent card).
    pub skills: Vec<Value>,
    /// `workflow.on_exit`: the nodes run after the main DAG ends, chosen by the run's
    /// outcome; all `None` when the file has none.
    pub on_exit: ExitHandlers,
    /// `workflow.fail_fast` (default true).
    pub fail_fast: bool,
    /// `workflow.error_policy.on_failure` (default halt): the policy of a node without
    /// its own.
    pub on_failure: OnFailure,
    /// `workflow.max_call_depth` (default 10, from 1 to [`crate::limits::MAX_CALL_DEPTH`]):
    /// a request whose `Mesh-Call-Depth` is larger is refused.
    pub max_call_depth: u32,
    /// `workflow.retry_strategy`: the default for every agent node without its own.
    pub retry_strategy: Option<RetryStrategy>,
    /// `workflow.concurrency`: most nodes (agent calls, map items included) in flight at once
    /// for one run; `None` is unlimited.
    pub concurrency: Option<usize>,
    /// `workflow.pause`: whether a paused run's deadline and approval timeouts stop.
    pub pause: super::PauseSettings,
    /// `workflow.schedules`: the runs it starts on a clock (see [`super::Schedule`]).
    pub schedules: Vec<super::Schedule>,
    /// `workflow.triggers`: the runs it starts from messages (see [`super::Trigger`]).
    pub triggers: Vec<super::Trigger>,
    /// `max_concurrent_runs`, `concurrency_key` and `priority`: how its runs wait for one
    /// another (see [`super::FlowControl`]).
    pub flow: super::FlowControl,
    /// `workflow.agents`: limits on the calls to each agent named, mesh-wide (see
    /// [`super::AgentLimits`]).
    pub agent_limits: std::collections::BTreeMap<String, super::AgentLimits>,
    /// The `workflow` block exactly as written (snake_case or camelCase), for the agent
    /// card's `workflow_config`.
    pub source: Value,
    /// The whole file as parsed: what is stored for runs to keep their definition by.
    pub document: Value,
    /// The content hash of `document` (32 hex digits): the definition a run names, so that
    /// its events are always applied with the definition it started with.
    pub hash: String,
    /// Derived graph facts, computed once at load.
    pub graph: Graph,
}

/// Facts derived from the nodes at load time, so the core never rescans the whole DAG.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    /// Position of each node in [`Workflow::nodes`].
    pub index: HashMap<NodeId, usize>,
    /// For each node (by position), the positions of the nodes that list it in `depends_on`.
    pub dependents: Vec<Vec<usize>>,
    /// For each node (by position), its role.
    pub roles: Vec<NodeRole>,
    /// Positions of the main-DAG nodes with no dependencies, in file order.
    pub roots: Vec<usize>,
    /// Positions of the main-DAG nodes in a topological order (file order among equals).
    pub topo_order: Vec<usize>,
}

/// How a node takes part in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    /// Scheduled from `depends_on` as part of the main DAG.
    Main,
    /// Run only by the map or loop node at this position, once per item or iteration.
    Inner {
        /// Position of the owning map or loop node.
        owner: usize,
    },
    /// Run only as an exit handler, after the main DAG ends.
    ExitHandler,
}

/// A JSON Schema with its source, compiled once at load.
#[derive(Clone)]
pub struct Schema {
    /// The schema as written.
    pub source: Value,
    /// The validator compiled from `source`, behind an `Arc` so that cloning a workflow
    /// does not compile it again.
    pub validator: Arc<jsonschema::Validator>,
    /// Whether `source` declares a `default` anywhere: only then does
    /// [`Schema::apply_defaults`] change a value.
    pub has_defaults: bool,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Schema {
    /// Compiles `source`; the error says why it is not a valid JSON Schema.
    pub fn compile(source: &Value) -> Result<Schema, jsonschema::ValidationError<'static>> {
        let validator = jsonschema::validator_for(source).map_err(|e| e.to_owned())?;
        Ok(Schema {
            source: source.clone(),
            validator: Arc::new(validator),
            has_defaults: agent_sdk::schema::defaults::declares_any(source),
        })
    }

    /// Fills in what `value` leaves out with the schema's `default`s (nested objects,
    /// array items, `allOf` and local `$ref`s too; see `docs/semantics.md`, "Expressions
    /// and defaults"). A value is completed before it is validated or seen by a template.
    pub fn apply_defaults(&self, value: &mut Value) {
        if self.has_defaults {
            agent_sdk::schema::defaults::apply(&self.source, value);
        }
    }

    /// The violations of `value` once its defaults are applied (see
    /// [`Schema::apply_defaults`]), one message each (`"/path: message"`, a few at most),
    /// empty when valid.
    pub fn violations(&self, value: &Value) -> Vec<String> {
        if self.has_defaults {
            let mut completed = value.clone();
            self.apply_defaults(&mut completed);
            return self.violations_as_is(&completed);
        }
        self.violations_as_is(value)
    }

    /// The violations of `value` as it is (a value already completed), quoting little of
    /// it and few of them (see [`agent_sdk::schema::describe`]).
    pub fn violations_as_is(&self, value: &Value) -> Vec<String> {
        agent_sdk::schema::describe(&self.validator, value, |at| {
            if at.is_empty() {
                "(root)".to_owned()
            } else {
                at.to_owned()
            }
        })
    }
}

/// One node of the workflow.
#[derive(Debug, Clone)]
pub struct Node {
    /// `id`: unique in the workflow; templates name the node's output by it
    /// (`{{id.output}}`) and sub-task ids and KV keys embed it.
    pub id: NodeId,
    /// `depends_on` (alias `dependencies`).
    pub depends_on: Vec<NodeId>,
    /// `when`: the node runs only when this holds; otherwise it is skipped.
    pub when: Option<Condition>,
    /// `on_failure` (or `error_policy.on_failure`): what its failure does to the run;
    /// `None` takes the workflow's default ([`Workflow::on_failure_of`]).
    pub on_failure: Option<OnFailure>,
    /// What the node does.
    pub kind: NodeKind,
}

/// What a node does, one variant per `type` (agent and workflow nodes share [`Call`]).
// Nodes are built once at load and read in place; boxing `Call` would only add an
// indirection on every access.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// `type: agent` or `type: workflow`: one call to an agent (a workflow is an agent).
    Call(Call),
    /// `type: conditional`.
    Conditional {
        /// `condition`: decides which branch runs; an error fails the node.
        condition: Condition,
        /// `true_branch`: runs when the condition holds.
        true_branch: NodeId,
        /// `false_branch`: runs when it does not.
        false_branch: Option<NodeId>,
    },
    /// `type: switch`: the first case that holds selects its target.
    Switch {
        /// `cases`, in order.
        cases: Vec<SwitchCase>,
        /// `default`: runs when no case holds.
        default: Option<NodeId>,
    },
    /// `type: map`: runs `node` once per item.
    Map(MapNode),
    /// `type: fork`: runs its branches in parallel and merges their outputs.
    Fork {
        /// `branches`: each one call, all started at once.
        branches: Vec<ForkBranch>,
        /// `fail_fast` (default true): on a branch failure, cancel the others.
        fail_fast: bool,
    },
    /// `type: join`: waits for some of `wait_for`.
    Join {
        /// `wait_for`: the nodes the strategy counts, all among `depends_on`.
        wait_for: Vec<NodeId>,
        /// `strategy` and `n`.
        strategy: JoinStrategy,
    },
    /// `type: loop`: runs `node`, then repeats while `condition` holds (do-while).
    Loop(LoopNode),
    /// `type: approval`: waits for a person to approve or reject.
    Approval(ApprovalNode),
    /// `type: wait`: waits for a named signal sent from outside the run.
    Wait(super::WaitNode),
}

impl NodeKind {
    /// The type name as written in files and progress events.
    pub fn type_name(&self) -> &'static str {
        match self {
            NodeKind::Call(c) => match c.target {
                CallTarget::Agent(_) => "agent",
                CallTarget::Workflow(_) => "workflow",
            },
            NodeKind::Conditional { .. } => "conditional",
            NodeKind::Switch { .. } => "switch",
            NodeKind::Map(_) => "map",
            NodeKind::Fork { .. } => "fork",
            NodeKind::Join { .. } => "join",
            NodeKind::Loop(_) => "loop",
            NodeKind::Approval(_) => "approval",
            NodeKind::Wait(_) => "wait",
        }
    }
}

/// Whom a call goes to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallTarget {
    /// `agent_name`: an agent on the mesh, found by its card.
    Agent(String),
    /// `workflow_name`: another workflow, called as an agent.
    Workflow(String),
}

impl CallTarget {
    /// The agent name on the mesh (a workflow's name is its agent name).
    pub fn agent_name(&self) -> &str {
        match self {
            CallTarget::Agent(n) | CallTarget::Workflow(n) => n,
        }
    }
}

/// An agent or workflow call: agent nodes, workflow nodes and fork branches.
#[derive(Debug, Clone)]
pub struct Call {
    /// The agent or workflow the request is sent to.
    pub target: CallTarget,
    /// `input`: when absent, the implicit input (workflow input, or the single dependency's
    /// output).
    pub input: Option<Template>,
    /// `instruction`: a text part sent with the request, templates interpolated.
    pub instruction: Option<Template>,
    /// `input_schema_override`: sent with the request, to replace the schema the agent's
    /// card declares for this call; `None` keeps the agent's own.
    pub input_schema_override: Option<Schema>,
    /// `output_schema_override`: sent with the request, and also checked by the node on
    /// the answer (a violation is an answered failure); `None` checks nothing.
    pub output_schema_override: Option<Schema>,
    /// `retry_strategy`; `None` falls back to the workflow's, then to one attempt.
    pub retry_strategy: Option<RetryStrategy>,
    /// `timeout`; `None` means the workflow's `default_node_timeout_seconds`.
    pub timeout: Option<Duration>,
}

/// One case of a switch.
#[derive(Debug, Clone)]
pub struct SwitchCase {
    /// `when` (alias `condition`).
    pub condition: Condition,
    /// `then` (alias `node`).
    pub target: NodeId,
}

/// A map node.
#[derive(Debug, Clone)]
pub struct MapNode {
    /// Where the items come from.
    pub items: MapItems,
    /// `node`: the inner node run once per item.
    pub node: NodeId,
    /// `concurrency_limit`: most items in flight at once; `None` is unlimited.
    pub concurrency_limit: Option<usize>,
    /// `max_items` (default: the file's `default_max_map_items`; at most
    /// [`crate::limits::MAX_MAP_ITEMS`]): more items fail the map.
    pub max_items: usize,
}

/// The source of a map's items.
#[derive(Debug, Clone)]
pub enum MapItems {
    /// `items` or `withParam`: a template that must resolve to an array (null is empty).
    Template(Template),
    /// `withItems`: a literal array.
    Literal(Vec<Value>),
}

/// One branch of a fork.
#[derive(Debug, Clone)]
pub struct ForkBranch {
    /// The branch `id`, unique within the fork.
    pub id: String,
    /// `output_key`: the branch's key in the fork's output.
    pub output_key: String,
    /// The call the branch makes (`agent_name`, `input`, ...).
    pub call: Call,
}

/// How a join decides it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinStrategy {
    /// Every node of `wait_for` finished.
    All,
    /// The first node of `wait_for` finished.
    Any,
    /// `n` nodes of `wait_for` finished.
    NOfM(usize),
}

/// A loop node.
#[derive(Debug, Clone)]
pub struct LoopNode {
    /// `node`: the inner node run once per iteration.
    pub node: NodeId,
    /// `condition`: evaluated after each iteration; the loop goes on while it holds.
    pub condition: Condition,
    /// `max_iterations` (default 100).
    pub max_iterations: u32,
    /// `delay` between iterations.
    pub delay: Option<Duration>,
    /// `on_iterations_exhausted` (default succeed).
    pub on_exhausted: OnExhausted,
}

/// What a loop does when it reaches `max_iterations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExhausted {
    /// The loop succeeds with `stopped_reason: max_iterations`.
    Succeed,
    /// The loop fails, saying it ran out of iterations.
    Fail,
}

/// An approval gate: the run waits for a person's decision, sent as an event.
#[derive(Debug, Clone)]
pub struct ApprovalNode {
    /// `approvers`: who may decide, each an [`Approver`] (checked when loaded). Empty:
    /// the node's operators.
    pub approvers: Vec<String>,
    /// `message`: shown to the approvers, templates interpolated.
    pub message: Option<Template>,
    /// `timeout`: how long to wait; `None` waits until the run's deadline.
    pub timeout: Option<Duration>,
    /// `on_timeout` (default reject).
    pub on_timeout: OnTimeout,
}

/// What an `approvers` entry names: an NKey user public key, or a name the node's config
/// binds to one (`serve --approver NAME=U…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver<'a> {
    /// A user public key (`U…`): a decision signed by it counts.
    Key(&'a str),
    /// A name: a decision signed by the key bound to it counts.
    Name(&'a str),
}

impl<'a> Approver<'a> {
    /// Reads an entry; the error says what is wrong with it. Anything shaped like an NKey
    /// (56 or 58 characters of base32) must be a user public key: a seed here would be a
    /// secret leaked into a definition, an account's key a mistake.
    pub fn parse(entry: &'a str) -> Result<Approver<'a>, String> {
        let nkey_shaped = matches!(entry.len(), 56 | 58)
            && entry
                .bytes()
                .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b));
        if nkey_shaped {
            if agent_sdk::signing::is_user_public_key(entry) {
                return Ok(Approver::Key(entry));
            }
            if entry.starts_with('S') {
                return Err(
                    "looks like an NKey seed, a secret: name the public key (U…), and \
                            treat the seed as leaked"
                        .into(),
                );
            }
            return Err(format!(
                "'{entry}' is not a valid NKey user public key (U…, checksum included)"
            ));
        }
        let valid = entry.len() <= 128
            && entry.starts_with(|c: char| c.is_ascii_alphanumeric())
            && entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.@-".contains(c));
        if valid {
            Ok(Approver::Name(entry))
        } else {
            Err(format!(
                "'{entry}' is neither an NKey user public key (U…) nor a name (letters, digits, \
                 _ . @ -, starting with a letter or digit, at most 128)"
            ))
        }
    }
}

/// What an approval does when nobody decides in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// The node fails as rejected.
    Reject,
    /// The node succeeds as approved.
    Approve,
}

/// `retry_strategy`: how many attempts a call gets, which failures retry, and how long
/// to wait in between.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryStrategy {
    /// `limit` (default 3): attempts = limit + 1.
    pub limit: u32,
    /// `retry_policy` (default Always).
    pub policy: RetryPolicy,
    /// `backoff`: the wait before each retry (default: 1 s, doubling, no cap).
    pub backoff: Backoff,
    /// `non_retryable_errors`: error kinds that never retry: an agent's `error_kind`, or
    /// `timeout` for an attempt whose timeout passed. Empty by default.
    pub non_retryable_errors: Vec<String>,
}

/// Which failures retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryPolicy {
    /// Every failure: answered failures, timeouts and unreachable agents.
    Always,
    /// The agent answered with a failure.
    OnFailure,
    /// The agent did not answer in time or could not be reached.
    OnError,
}

/// `backoff`: delay before attempt k+1 = min(duration * factor^(k-1), max_duration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// `duration` (default 1s).
    pub duration: Duration,
    /// `factor` (default 2.0).
    pub factor: f64,
    /// `max_duration`: the longest wait, however many attempts failed; `None`: no cap
    /// (the wait is still bounded at a year).
    pub max_duration: Option<Duration>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            duration: Duration::from_secs(1),
            factor: 2.0,
            max_duration: None,
        }
    }
}

impl Backoff {
    /// The delay after failed attempt `attempt` (1-based) before the next one.
    pub fn delay_after(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(64) as i32;
        let secs = self.duration.as_secs_f64() * self.factor.powi(exp);
        let capped = match self.max_duration {
            Some(max) => secs.min(max.as_secs_f64()),
            None => secs,
        };
        // Bounded: a huge factor must not overflow Duration (a year is plenty).
        Duration::from_secs_f64(capped.clamp(0.0, 365.0 * 86_400.0))
    }
}

/// `on_exit`: a node id (always), or one per outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitHandlers {
    /// `always` (or the plain string form).
    pub always: Option<NodeId>,
    /// `on_success`: run when the main DAG succeeded (and its output mapped).
    pub on_success: Option<NodeId>,
    /// `on_failure`: run when the run failed (a node, the output mapping, the deadline).
    pub on_failure: Option<NodeId>,
    /// `on_cancel`: run when a cancel was requested.
    pub on_cancel: Option<NodeId>,
}

impl Workflow {
    /// The node with `id`.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.graph.index.get(id).map(|&i| &self.nodes[i])
    }

    /// Attempts allowed for `call`: its retry strategy's limit + 1, else the workflow's,
    /// else one.
    pub fn retry_strategy_for<'a>(&'a self, call: &'a Call) -> Option<&'a RetryStrategy> {
        call.retry_strategy
            .as_ref()
            .or(self.retry_strategy.as_ref())
    }
}
