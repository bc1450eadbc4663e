//! The workflow DataParts: each struct serialises as a JSON object with `"type": "<name>"`
//! and travels as the `data` of an A2A DataPart.
//!
//! - Node calls: [`WorkflowNodeRequest`] (workflow → agent, first part of the request) and
//!   [`WorkflowNodeResult`] (agent → workflow, in the final Task).
//! - Progress (status updates to the caller): [`WorkflowExecutionStart`],
//!   [`WorkflowNodeExecutionStart`], [`WorkflowNodeExecutionResult`], [`WorkflowMapProgress`],
//!   [`WorkflowExecutionResult`].
//! - Approvals (ours): [`WorkflowApprovalRequest`], [`WorkflowApprovalDecision`].
//! - State (ours): [`WorkflowRunState`], the answer to `tasks/get` of a run.
//! - Agents' status (ours): [`WorkflowAgentStatus`], an agent's status update on one of a
//!   run's calls, forwarded to the run's callers.
//!
//! [`WorkflowDataPart`] reads any of them by `type`. Status words follow the seed spec
//! (`failure`); the reference implementation's `error` is accepted as an alias on input.
//!
//! The reference implementation's dialect ([`Dialect::Reference`]): its node-call DataParts
//! are named `structured_invocation_request` / `structured_invocation_result`
//! ([`REFERENCE_NODE_REQUEST`], [`REFERENCE_NODE_RESULT`]) and its failure status word is
//! `error`. Both names are always read; [`Dialect::rewrite`] turns a DataPart we send into
//! the reference's words when a node or agent is configured to speak them.

/// The key, in a start request's message `metadata`, of the workflow version a caller pins
/// for the new run (the file's `version`, as stored by a replica that served it); without
/// it, the run uses the version of the replica that takes the request.
pub const PIN_VERSION: &str = "workflow_version";

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::a2a::{DataPartType, JsonObject};

/// A reference to a stored artifact: `{name, version?}`. Version `v` of artifact `name`
/// is the object `{name}@v{v}` of the namespace's artifact bucket, and the object `name`
/// is the latest version (a link to it) or an unversioned artifact (see
/// [`crate::payload::version_key`] and `docs/protocol.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// The artifact's name.
    pub name: String,
    /// The version (from 1); `None` means the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

impl ArtifactRef {
    /// The object-store key this reference reads: `{name}@v{version}`, or `name` for the
    /// latest.
    pub fn object_key(&self) -> String {
        match self.version {
            Some(v) => crate::payload::version_key(&self.name, v),
            None => self.name.clone(),
        }
    }
}

/// The reference implementation's name of [`WorkflowNodeRequest`].
pub const REFERENCE_NODE_REQUEST: &str = "structured_invocation_request";
/// The reference implementation's name of [`WorkflowNodeResult`].
pub const REFERENCE_NODE_RESULT: &str = "structured_invocation_result";

/// Which words a node or agent sends: ours, or the reference implementation's. Both are
/// always understood on input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// `workflow_node_request` / `workflow_node_result`, status `failure`.
    #[default]
    Mesh,
    /// `structured_invocation_request` / `structured_invocation_result`, status `error`.
    Reference,
}

impl Dialect {
    /// The dialect's name, as `--dialect` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Mesh => "mesh",
            Dialect::Reference => "reference",
        }
    }

    /// The dialect of a received node-call DataPart's `type`: `Reference` for the
    /// reference's names, else `Mesh`.
    pub fn of_type(t: &str) -> Dialect {
        if t == REFERENCE_NODE_REQUEST || t == REFERENCE_NODE_RESULT {
            Dialect::Reference
        } else {
            Dialect::Mesh
        }
    }

    /// Rewrites a workflow DataPart's `data` we are about to send into this dialect's
    /// words: for `Reference`, the node-call names become the reference's and a `status`
    /// of `failure` or `timed_out` (which the reference does not know) becomes `error`.
    /// Other data, and everything in `Mesh`, is left as is.
    pub fn rewrite(self, data: &mut JsonObject) {
        if self == Dialect::Mesh {
            return;
        }
        let Some(t) = data.get("type").and_then(Value::as_str) else {
            return;
        };
        let renamed = match t {
            WorkflowNodeRequest::TYPE => Some(REFERENCE_NODE_REQUEST),
            WorkflowNodeResult::TYPE => Some(REFERENCE_NODE_RESULT),
            _ => None,
        };
        if !t.starts_with("workflow_") && renamed.is_none() {
            return;
        }
        if let Some(name) = renamed {
            data.insert("type".into(), Value::from(name));
        }
        if matches!(
            data.get("status").and_then(Value::as_str),
            Some("failure" | "timed_out")
        ) {
            data.insert("status".into(), Value::from("error"));
        }
    }

    /// [`rewrite`](Self::rewrite) of a part, when it is a DataPart.
    pub fn rewrite_part(self, mut part: crate::a2a::Part) -> crate::a2a::Part {
        if let crate::a2a::Part::Data { data, .. } = &mut part {
            self.rewrite(data);
        }
        part
    }
}

impl std::str::FromStr for Dialect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mesh" => Ok(Dialect::Mesh),
            "reference" => Ok(Dialect::Reference),
            other => Err(format!(
                "unknown dialect '{other}' (expected 'mesh' or 'reference')"
            )),
        }
    }
}

macro_rules! data_part_type {
    ($ty:ident, $name:literal) => {
        impl DataPartType for $ty {
            const TYPE: &'static str = $name;
        }
    };
    ($ty:ident, $name:literal, $alias:expr) => {
        impl DataPartType for $ty {
            const TYPE: &'static str = $name;
            const ALIASES: &'static [&'static str] = &[$alias];
        }
    };
}

/// `workflow_node_request`: the first part of a request from a workflow to an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_node_request")]
pub struct WorkflowNodeRequest {
    /// The calling workflow.
    pub workflow_name: String,
    /// The node being run.
    pub node_id: String,
    /// Schema the input satisfies (a node override, else the agent's card).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// Schema the output must satisfy.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Name to store a large output under.
    #[serde(default)]
    pub suggested_output_filename: Option<String>,
    /// Ours: the run's execution id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// Ours: the deterministic sub-task id of this call (also the reply subject's last token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_task_id: Option<String>,
    /// Ours: the map item index, inside a map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_index: Option<u64>,
    /// Ours: the loop iteration (0-based), inside a loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_iteration: Option<u64>,
    /// Ours: the attempt number (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}
data_part_type!(
    WorkflowNodeRequest,
    "workflow_node_request",
    REFERENCE_NODE_REQUEST
);

/// Outcome of a node call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultStatus {
    /// The agent produced an output.
    Success,
    /// The agent failed (`error` accepted on input).
    #[serde(alias = "error")]
    Failure,
}

/// `workflow_node_result`: an agent's answer to a [`WorkflowNodeRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_node_result")]
pub struct WorkflowNodeResult {
    /// Success or failure.
    pub status: ResultStatus,
    /// The output, inline; `None` on failure or when it went to `artifact_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The output's artifact, when stored instead of inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_name: Option<String>,
    /// The version of `artifact_name`'s object, when the agent pinned one; not read by
    /// the workflow node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_version: Option<u64>,
    /// The output's artifact with its version, when stored (the reference's field; read
    /// when neither `output` nor `artifact_name` is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_artifact_ref: Option<ArtifactRef>,
    /// What went wrong, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Ours: a machine-readable error kind, matched against `non_retryable_errors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Schema violations of the input or output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_errors: Option<Vec<String>>,
    /// Retries the agent made itself.
    #[serde(default)]
    pub retry_count: u32,
}
data_part_type!(
    WorkflowNodeResult,
    "workflow_node_result",
    REFERENCE_NODE_RESULT
);

impl WorkflowNodeResult {
    /// A success with an inline output.
    pub fn success(output: Value) -> Self {
        WorkflowNodeResult {
            status: ResultStatus::Success,
            output: Some(output),
            artifact_name: None,
            artifact_version: None,
            output_artifact_ref: None,
            error_message: None,
            error_kind: None,
            validation_errors: None,
            retry_count: 0,
        }
    }

    /// A failure with a message.
    pub fn failure(message: impl Into<String>) -> Self {
        WorkflowNodeResult {
            status: ResultStatus::Failure,
            output: None,
            artifact_name: None,
            artifact_version: None,
            output_artifact_ref: None,
            error_message: Some(message.into()),
            error_kind: None,
            validation_errors: None,
            retry_count: 0,
        }
    }
}

/// `workflow_execution_start`: a run began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_execution_start")]
pub struct WorkflowExecutionStart {
    /// The workflow's name, which is also its agent name on the mesh.
    pub workflow_name: String,
    /// The run's execution id: what a `tasks/cancel` of the run or an approval decision
    /// names.
    pub execution_id: String,
    /// The input's artifact, when it came by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_artifact_ref: Option<ArtifactRef>,
    /// The input, inline; `None` when it is larger than a progress update may carry
    /// (64 KiB serialised, from the workflow node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_input: Option<Value>,
}
data_part_type!(WorkflowExecutionStart, "workflow_execution_start");

/// One case of a switch, as reported in [`WorkflowNodeExecutionStart::cases`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchCaseInfo {
    /// The case's condition, as written.
    pub condition: String,
    /// The node it selects.
    pub node: String,
}

/// `workflow_node_execution_start`: a node (or one map item / loop iteration) began.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_node_execution_start")]
pub struct WorkflowNodeExecutionStart {
    /// The node's id in the definition; the same for every map item and loop iteration
    /// (told apart by the other fields).
    pub node_id: String,
    /// Its type: agent, workflow, conditional, switch, map, fork, join, loop, approval.
    pub node_type: String,
    /// The agent called, for agent and workflow nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The input's artifact, when passed by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_artifact_ref: Option<ArtifactRef>,
    /// The map index or loop iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration_index: Option<u64>,
    /// The sub-task id of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_task_id: Option<String>,
    /// The owning map or loop node, for inner nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_node_id: Option<String>,
    /// Nodes started in the same scheduling step share this id (for UIs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_id: Option<String>,
    /// Conditional/loop: the condition, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Conditional: the true branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub true_branch: Option<String>,
    /// Conditional: the false branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub false_branch: Option<String>,
    /// Switch: the cases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cases: Option<Vec<SwitchCaseInfo>>,
    /// Switch: the default branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_branch: Option<String>,
    /// Join: the nodes waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for: Option<Vec<String>>,
    /// Join: `all`, `any` or `n_of_m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_strategy: Option<String>,
    /// Join: n of `n_of_m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_n: Option<u64>,
    /// Loop: the iteration limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u64>,
    /// Loop: the delay between iterations, as written (`"5s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_delay: Option<String>,
    /// Ours: the attempt number (1-based) of an agent call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}
data_part_type!(WorkflowNodeExecutionStart, "workflow_node_execution_start");

/// Final status of a node, as reported in progress events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeOutcome {
    /// The node succeeded.
    Success,
    /// The node failed (`error` accepted on input).
    #[serde(alias = "error")]
    Failure,
    /// The node never ran.
    Skipped,
    /// The node was stopped while running.
    Cancelled,
    /// The node hit its timeout (its call's, or an approval's): a failure of its own kind.
    /// Added after the first release: a reader that does not know it should take it as
    /// `failure`.
    #[serde(rename = "timed_out")]
    TimedOut,
}

/// `workflow_node_execution_result`: a node ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_node_execution_result")]
pub struct WorkflowNodeExecutionResult {
    /// The node's id in the definition; the same for every map item and loop iteration
    /// (told apart by the other fields).
    pub node_id: String,
    /// How it ended.
    pub status: NodeOutcome,
    /// The output's artifact, when stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_artifact_ref: Option<ArtifactRef>,
    /// Ours: the output, inline; `None` unless it succeeded, and when larger than a
    /// progress update may carry (then `metadata.omitted_bytes` gives its size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Conditional: the condition's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_result: Option<bool>,
    /// Conditional/switch: the branch taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_branch: Option<String>,
    /// The map index or loop iteration, for inner nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration_index: Option<u64>,
    /// Anything else (the reference puts the condition result here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}
data_part_type!(
    WorkflowNodeExecutionResult,
    "workflow_node_execution_result"
);

/// Status of a map in [`WorkflowMapProgress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MapStatus {
    /// Items are still running.
    InProgress,
    /// Every item finished.
    Completed,
    /// An item failed.
    Failed,
}

/// `workflow_map_progress`: how far a map is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_map_progress")]
pub struct WorkflowMapProgress {
    /// The map node's id; its items are calls of its inner node.
    pub node_id: String,
    /// Number of items the map's `items` resolved to when it started; fixed for its life.
    pub total_items: u64,
    /// Items that succeeded so far; sent again after each one, up to `total_items`.
    pub completed_items: u64,
    /// `completed` once `completed_items` reaches `total_items`, else `in-progress`; the
    /// workflow node never sends `failed` (a failed item fails the map node instead).
    pub status: MapStatus,
}
data_part_type!(WorkflowMapProgress, "workflow_map_progress");

/// Final status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcome {
    /// The run succeeded.
    Success,
    /// The run failed (`error` accepted on input).
    #[serde(alias = "error")]
    Failure,
    /// The run was cancelled.
    Cancelled,
    /// The run hit its deadline (`max_workflow_execution_time_seconds`). Added after the
    /// first release: a reader that does not know it should take it as `failure` (the
    /// A2A task state of such a run is `failed`).
    #[serde(rename = "timed_out")]
    TimedOut,
}

/// `workflow_execution_result`: a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_execution_result")]
pub struct WorkflowExecutionResult {
    /// The workflow's name, which is also its agent name on the mesh.
    pub workflow_name: String,
    /// The run's execution id: what a `tasks/cancel` of the run or an approval decision
    /// names.
    pub execution_id: String,
    /// How it ended.
    pub status: RunOutcome,
    /// The output's artifact, when stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_artifact_ref: Option<ArtifactRef>,
    /// The output, inline, on success only; `None` when it went to `output_artifact_ref`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_output: Option<Value>,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Ours: the node whose failure failed the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_node_id: Option<String>,
}
data_part_type!(WorkflowExecutionResult, "workflow_execution_result");

/// `workflow_approval_request` (ours): an approval gate is waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_approval_request")]
pub struct WorkflowApprovalRequest {
    /// The workflow's name, which is also its agent name on the mesh.
    pub workflow_name: String,
    /// The run's execution id: what a `tasks/cancel` of the run or an approval decision
    /// names.
    pub execution_id: String,
    /// The approval node.
    pub node_id: String,
    /// Who may decide (empty: anyone).
    #[serde(default)]
    pub approvers: Vec<String>,
    /// The message for the approvers, templates resolved.
    #[serde(default)]
    pub message: String,
}
data_part_type!(WorkflowApprovalRequest, "workflow_approval_request");

/// An approver's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Go on.
    Approve,
    /// Stop: the approval node fails.
    Reject,
}

/// `workflow_approval_decision` (ours): approve or reject a waiting approval node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_approval_decision")]
pub struct WorkflowApprovalDecision {
    /// The run's execution id: what a `tasks/cancel` of the run or an approval decision
    /// names.
    pub execution_id: String,
    /// The approval node.
    pub node_id: String,
    /// `approve` lets the run go on past the gate; `reject` fails the approval node.
    pub decision: Decision,
    /// The approver's name, checked against the node's `approvers` when it lists any (a
    /// decision without one is then refused); it appears in the node's output or error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The approver's reason: free text, kept for people, never interpreted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}
data_part_type!(WorkflowApprovalDecision, "workflow_approval_decision");

/// `workflow_agent_status` (ours): a status update an agent sent while working on one of
/// a run's calls, forwarded by the workflow node to the run's callers as progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_agent_status")]
pub struct WorkflowAgentStatus {
    /// The workflow's name, which is also its agent name on the mesh.
    pub workflow_name: String,
    /// The run's execution id.
    pub execution_id: String,
    /// The node whose call the agent works on (the inner node for a map item or a loop
    /// iteration, the fork for a fork branch).
    pub node_id: String,
    /// The call's sub-task id (the attempt is its last token).
    pub sub_task_id: String,
    /// The agent's A2A task state (`working`, `input-required`, ...).
    pub state: String,
    /// The text parts of the agent's status message, joined by newlines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The data of the first DataPart of the agent's status message (a called workflow's
    /// own progress, for instance); left out when larger than a progress update may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}
data_part_type!(WorkflowAgentStatus, "workflow_agent_status");

/// `workflow_run_queued` (ours): a progress update telling a run's callers that it waits
/// for a slot under its workflow's flow control (`admitted: false`), and then that it got
/// one and starts (`admitted: true`). Sent as a `working` status update; the final reply
/// comes when the run ends, as for any run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_run_queued")]
pub struct WorkflowRunQueued {
    /// The run.
    pub execution_id: String,
    /// Its concurrency key, when the workflow has `concurrency_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// False while it waits; true once it got its slot.
    pub admitted: bool,
}
data_part_type!(WorkflowRunQueued, "workflow_run_queued");

/// Where a run is, in [`WorkflowRunState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunPhase {
    /// It waits for a slot under its workflow's `max_concurrent_runs` or
    /// `concurrency_key`: nothing of it runs yet.
    Queued,
    /// Its nodes run (an approval may be waiting).
    Running,
    /// Its main DAG ended; exit handlers run.
    Finishing,
    /// It is paused: it dispatches no new call until it is resumed.
    Paused,
    /// It succeeded.
    Success,
    /// It failed.
    Failure,
    /// It was cancelled.
    Cancelled,
    /// It hit its deadline.
    #[serde(rename = "timed_out")]
    TimedOut,
}

/// Where a node is, in [`WorkflowRunState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodePhase {
    /// Not started (yet, or ever).
    Pending,
    /// Started, not ended.
    Running,
    /// An approval waiting for a decision.
    Waiting,
    /// Ended with an output.
    Success,
    /// Ended with an error.
    Failure,
    /// Never ran.
    Skipped,
    /// Stopped while running.
    Cancelled,
    /// Hit its timeout.
    #[serde(rename = "timed_out")]
    TimedOut,
}

/// `workflow_run_state` (ours): where a run is, as `tasks/get` of it answers (in the
/// status message of the returned Task).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_run_state")]
pub struct WorkflowRunState {
    /// The workflow's name, which is also its agent name on the mesh.
    pub workflow_name: String,
    /// The run's execution id: what a `tasks/cancel` of the run or an approval decision
    /// names.
    pub execution_id: String,
    /// Where the run is.
    pub status: RunPhase,
    /// Every node of the definition, by id.
    #[serde(default)]
    pub nodes: std::collections::BTreeMap<String, NodePhase>,
    /// The output, once the run succeeded (absent when it went to an artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The output's artifact, when it was too large to travel inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_artifact_ref: Option<ArtifactRef>,
    /// What went wrong, once the run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The node whose failure failed the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_node_id: Option<String>,
}
data_part_type!(WorkflowRunState, "workflow_run_state");

/// Any workflow DataPart, read by its `type`.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkflowDataPart {
    /// `workflow_node_request`: a workflow calling an agent.
    NodeRequest(WorkflowNodeRequest),
    /// `workflow_node_result`: an agent answering a workflow.
    NodeResult(WorkflowNodeResult),
    /// `workflow_execution_start`: progress, a run began.
    ExecutionStart(WorkflowExecutionStart),
    /// `workflow_node_execution_start`: progress, a node began.
    NodeExecutionStart(WorkflowNodeExecutionStart),
    /// `workflow_node_execution_result`: progress, a node ended.
    NodeExecutionResult(WorkflowNodeExecutionResult),
    /// `workflow_map_progress`: progress, an item of a map succeeded.
    MapProgress(WorkflowMapProgress),
    /// `workflow_execution_result`: progress, a run ended.
    ExecutionResult(WorkflowExecutionResult),
    /// `workflow_approval_request`: an approval node waits, published to its approvers.
    ApprovalRequest(WorkflowApprovalRequest),
    /// `workflow_approval_decision`: an approver's answer, sent to the workflow.
    ApprovalDecision(WorkflowApprovalDecision),
    /// `workflow_run_state`: a run as `tasks/get` of it answers.
    RunState(WorkflowRunState),
    /// `workflow_agent_status`: progress, an agent's status update on one of the run's
    /// calls.
    AgentStatus(WorkflowAgentStatus),
    /// `workflow_run_steered`: progress, the run was paused or resumed.
    RunSteered(crate::control::WorkflowRunSteered),
    /// `workflow_run_queued`: progress, the run waits for a slot, or got one.
    RunQueued(WorkflowRunQueued),
}

/// Every `type` [`WorkflowDataPart`] understands.
pub const WORKFLOW_DATA_PART_TYPES: &[&str] = &[
    "workflow_node_request",
    "workflow_node_result",
    "workflow_execution_start",
    "workflow_node_execution_start",
    "workflow_node_execution_result",
    "workflow_map_progress",
    "workflow_execution_result",
    "workflow_approval_request",
    "workflow_approval_decision",
    "workflow_run_state",
    "workflow_agent_status",
    "workflow_run_steered",
    "workflow_run_queued",
    REFERENCE_NODE_REQUEST,
    REFERENCE_NODE_RESULT,
];

impl WorkflowDataPart {
    /// Reads a DataPart's `data`: `Ok(None)` when its `type` is not a workflow DataPart,
    /// an error when it is one but malformed.
    pub fn from_data(data: &JsonObject) -> Result<Option<Self>, serde_json::Error> {
        match data.get("type").and_then(Value::as_str) {
            Some(t) if WORKFLOW_DATA_PART_TYPES.contains(&t) => {
                serde_json::from_value(Value::Object(data.clone())).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The `type` of this DataPart.
    pub fn type_name(&self) -> &'static str {
        match self {
            WorkflowDataPart::NodeRequest(_) => WorkflowNodeRequest::TYPE,
            WorkflowDataPart::NodeResult(_) => WorkflowNodeResult::TYPE,
            WorkflowDataPart::ExecutionStart(_) => WorkflowExecutionStart::TYPE,
            WorkflowDataPart::NodeExecutionStart(_) => WorkflowNodeExecutionStart::TYPE,
            WorkflowDataPart::NodeExecutionResult(_) => WorkflowNodeExecutionResult::TYPE,
            WorkflowDataPart::MapProgress(_) => WorkflowMapProgress::TYPE,
            WorkflowDataPart::ExecutionResult(_) => WorkflowExecutionResult::TYPE,
            WorkflowDataPart::ApprovalRequest(_) => WorkflowApprovalRequest::TYPE,
            WorkflowDataPart::ApprovalDecision(_) => WorkflowApprovalDecision::TYPE,
            WorkflowDataPart::RunState(_) => WorkflowRunState::TYPE,
            WorkflowDataPart::AgentStatus(_) => WorkflowAgentStatus::TYPE,
            WorkflowDataPart::RunSteered(_) => crate::control::WorkflowRunSteered::TYPE,
            WorkflowDataPart::RunQueued(_) => WorkflowRunQueued::TYPE,
        }
    }
}

impl Serialize for WorkflowDataPart {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Each struct writes its own `type`.
        match self {
            WorkflowDataPart::NodeRequest(p) => p.serialize(s),
            WorkflowDataPart::NodeResult(p) => p.serialize(s),
            WorkflowDataPart::ExecutionStart(p) => p.serialize(s),
            WorkflowDataPart::NodeExecutionStart(p) => p.serialize(s),
            WorkflowDataPart::NodeExecutionResult(p) => p.serialize(s),
            WorkflowDataPart::MapProgress(p) => p.serialize(s),
            WorkflowDataPart::ExecutionResult(p) => p.serialize(s),
            WorkflowDataPart::ApprovalRequest(p) => p.serialize(s),
            WorkflowDataPart::ApprovalDecision(p) => p.serialize(s),
            WorkflowDataPart::RunState(p) => p.serialize(s),
            WorkflowDataPart::AgentStatus(p) => p.serialize(s),
            WorkflowDataPart::RunSteered(p) => p.serialize(s),
            WorkflowDataPart::RunQueued(p) => p.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for WorkflowDataPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // serde does not check a struct's own `tag`, so dispatch on `type` here.
        let value = Value::deserialize(d)?;
        let t = value
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| D::Error::missing_field("type"))?
            .to_owned();
        fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, serde_json::Error> {
            serde_json::from_value(v)
        }
        let parsed = match t.as_str() {
            "workflow_node_request" | REFERENCE_NODE_REQUEST => {
                parse(value).map(WorkflowDataPart::NodeRequest)
            }
            "workflow_node_result" | REFERENCE_NODE_RESULT => {
                parse(value).map(WorkflowDataPart::NodeResult)
            }
            "workflow_execution_start" => parse(value).map(WorkflowDataPart::ExecutionStart),
            "workflow_node_execution_start" => {
                parse(value).map(WorkflowDataPart::NodeExecutionStart)
            }
            "workflow_node_execution_result" => {
                parse(value).map(WorkflowDataPart::NodeExecutionResult)
            }
            "workflow_map_progress" => parse(value).map(WorkflowDataPart::MapProgress),
            "workflow_execution_result" => parse(value).map(WorkflowDataPart::ExecutionResult),
            "workflow_approval_request" => parse(value).map(WorkflowDataPart::ApprovalRequest),
            "workflow_approval_decision" => parse(value).map(WorkflowDataPart::ApprovalDecision),
            "workflow_run_state" => parse(value).map(WorkflowDataPart::RunState),
            "workflow_agent_status" => parse(value).map(WorkflowDataPart::AgentStatus),
            "workflow_run_steered" => parse(value).map(WorkflowDataPart::RunSteered),
            "workflow_run_queued" => parse(value).map(WorkflowDataPart::RunQueued),
            other => return Err(D::Error::unknown_variant(other, WORKFLOW_DATA_PART_TYPES)),
        };
        parsed.map_err(D::Error::custom)
    }
}
