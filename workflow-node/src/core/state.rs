//! The state of one run: everything a replica needs to carry it on. Serialised whole into
//! one KV entry; a serde round trip between any two events changes nothing.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::pause::Paused;
use super::signals::Signals;
use super::types::{ExecutionId, Millis, NodeStatus, RunError, RunStatus, TaskKey};
use crate::definition::NodeId;

/// Everything one run keeps between events: what the shell loads, hands to
/// [`super::apply`], and commits back with compare-and-swap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// The run's id; also its A2A task id, and the last token of its KV key and of its
    /// event subject.
    pub id: ExecutionId,
    /// Name of the workflow it runs. The definition itself is not kept: [`super::apply`]
    /// takes it beside the state.
    pub workflow: String,
    /// `Running`, then `Finishing` while exit handlers run, then terminal; a terminal run
    /// absorbs every later event.
    pub status: RunStatus,
    /// Whether [`super::Event::Started`] was applied.
    pub started: bool,
    /// The workflow input (null until [`super::Event::Started`]).
    pub input: Value,
    /// When [`super::Event::Started`] was applied (0 until then).
    pub started_at: Millis,
    /// When it must have ended: `started_at` plus `max_workflow_execution_time_seconds`.
    pub deadline: Millis,
    /// Per-node state; a node absent here is pending.
    pub nodes: BTreeMap<NodeId, NodeState>,
    /// Calls not yet ended: queued, running or backing off.
    pub calls: BTreeMap<TaskKey, CallState>,
    /// Calls waiting for a slot under the workflow's `concurrency`, oldest first.
    pub queue: VecDeque<TaskKey>,
    /// Calls in flight (running), counted against `concurrency`.
    pub in_flight: u32,
    /// Main-DAG nodes not yet ended; the main DAG is over at zero.
    pub unfinished_main: u32,
    /// Set once the run stops taking new work (a failure under fail_fast, a cancel, the
    /// deadline).
    pub stopping: bool,
    /// Set by the first cancel (later ones do nothing); it makes the run's outcome
    /// `Cancelled` rather than `Failure`.
    pub cancel_requested: bool,
    /// Whether the deadline passed (exit handlers then run on a grace timer).
    #[serde(default)]
    pub deadline_passed: bool,
    /// The first error, which the run's failure names.
    pub error: Option<RunError>,
    /// The status the run will end with, decided when the main DAG ends.
    pub outcome: Option<RunStatus>,
    /// Exit handlers chosen when the main DAG ended (the `on_*` list matching the outcome,
    /// then `always`) and not ended since; the run ends when this is empty.
    pub exit_pending: Vec<NodeId>,
    /// The run's output: set by `output_mapping` when the main DAG succeeds, cleared if
    /// the run then fails or is cancelled; `None` before that.
    pub output: Option<Value>,
    /// Set while the run is paused: it dispatches no new call until it is resumed (see
    /// `pause`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
    /// The run this one retries (`workflow-node runs retry`): it started with that run's
    /// input and definition, and with the nodes that succeeded there (see `retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<ExecutionId>,
    /// Signals kept for wait nodes that do not wait yet, and the ids of those taken (see
    /// `signals`).
    #[serde(default, skip_serializing_if = "Signals::is_empty")]
    pub signals: Signals,
    /// Its place under the workflow's flow control, from its arrival on: set when the run
    /// queued for a slot (see `flow`); `None` for a workflow without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<super::flow::FlowTicket>,
}

/// Reads a field that is there as `Some`, `null` included (an absent one is `None` by
/// `default`): serde reads `null` into an `Option` as `None`, so a node whose agent answered
/// `null` had no output any more once its state was read back (found by fuzzing).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// One node's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    /// Where the node is; a node without a `NodeState` is pending.
    pub status: NodeStatus,
    /// Its output on success (for a loop's inner node: the last iteration's output). An
    /// agent's `null` is `Some(null)`, and reads back so (see [`present`]).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<Value>,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The kind of the failure that ended it, when its call failed with one (the agent's
    /// `error_kind`, or `timeout`); None for every other end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// When it started; `None` for a node that never ran (skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    /// When it ended; `None` while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Millis>,
    /// Counts the changes of `output`: a main node's is set once, an inner node's each
    /// iteration. A shell that keeps large outputs apart rewrites one when this moves.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_rev: u32,
    /// What a map, fork, loop or approval keeps while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
}

impl NodeState {
    pub(crate) fn new(status: NodeStatus) -> NodeState {
        NodeState {
            status,
            output: None,
            output_rev: 0,
            error: None,
            error_kind: None,
            started_at: None,
            ended_at: None,
            detail: None,
        }
    }
}

/// Per-kind progress of a running node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Detail {
    /// A map's items, results and counts.
    Map(MapState),
    /// A fork's branches still out, and what the ended ones gave.
    Fork(ForkState),
    /// A loop, with the iteration its inner node is on.
    Loop {
        /// The iteration running or next to run (0-based).
        iteration: u32,
    },
    /// An approval waiting for a decision.
    Approval {
        /// When its `timeout` passes; `None` without one (it waits for the run's deadline).
        deadline: Option<Millis>,
    },
    /// A wait node waiting for a signal.
    Wait(WaitState),
}

/// What a waiting `wait` node waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitState {
    /// The signal's name.
    pub signal: String,
    /// The key a signal sent by key finds the run by (its `correlation`, resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it started waiting.
    pub since: Millis,
    /// When its `timeout` passes; `None` without one (it waits for the run's deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Millis>,
}

/// A running map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MapState {
    /// The items `items` resolved to when the map started; fixed for its life.
    pub items: Vec<Value>,
    /// Index of the next item to start: items `next..` wait for a slot under the map's
    /// `concurrency_limit`.
    pub next: u32,
    /// Items started and not ended, at most the map's `concurrency_limit`; a halted map
    /// ends as cancelled when this reaches 0.
    pub active: u32,
    /// Items ended, whatever their outcome; the map ends when this reaches the count.
    pub done: u32,
    /// Results by item index (null until the item ends).
    pub results: Vec<Value>,
}

/// A running fork.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkState {
    /// Branches not yet ended; the fork ends when this reaches 0 (or at the first failure
    /// under `fail_fast`).
    pub pending: u32,
    /// Outputs of the branches that succeeded, by their `output_key`: the fork's output
    /// once every branch succeeded.
    pub outputs: serde_json::Map<String, Value>,
    /// One `branch '{id}': {message}` per failed branch, joined with `; ` into the
    /// fork's error.
    pub failures: Vec<String>,
}

/// A call not yet ended. Its input is not kept: it is resolved again when an attempt is
/// dispatched, from values that cannot change in between (upstream outputs, the map item,
/// the iteration), so a run with many calls in flight stays small.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallState {
    /// The current attempt (1-based).
    pub attempt: u32,
    /// Queued, running or backing off.
    pub phase: CallPhase,
    /// When the attempt was last dispatched: the start of its latency. `None` until the
    /// first dispatch (and in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_at: Option<Millis>,
    /// Where the running attempt is with its agent's gate (agents with limits only).
    #[serde(default, skip_serializing_if = "AgentSlot::is_none")]
    pub agent_slot: AgentSlot,
}

/// A running attempt and its agent's gate (see `agent_slots`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentSlot {
    /// Sent (or its agent has no limits): its timeout runs.
    #[default]
    None,
    /// Not sent: it waits for a slot of its agent, and its timeout does not run.
    Waiting,
    /// Sent once a slot was granted; its timeout started then.
    Granted,
}

impl AgentSlot {
    fn is_none(&self) -> bool {
        *self == AgentSlot::None
    }
}

/// Where a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPhase {
    /// Waiting for a concurrency slot.
    Queued,
    /// Dispatched; times out at the deadline.
    Running {
        /// When the attempt times out.
        deadline: Millis,
    },
    /// Failed; the next attempt starts at `until`.
    BackingOff {
        /// When the next attempt starts.
        until: Millis,
    },
}

impl Execution {
    /// A run not yet started; [`super::apply`] with [`super::Event::Started`] starts it.
    pub fn new(id: ExecutionId, workflow: &str) -> Execution {
        Execution {
            id,
            workflow: workflow.to_string(),
            status: RunStatus::Running,
            started: false,
            input: Value::Null,
            started_at: Millis(0),
            deadline: Millis(0),
            nodes: BTreeMap::new(),
            calls: BTreeMap::new(),
            queue: VecDeque::new(),
            in_flight: 0,
            unfinished_main: 0,
            stopping: false,
            cancel_requested: false,
            deadline_passed: false,
            error: None,
            outcome: None,
            exit_pending: Vec::new(),
            output: None,
            paused: None,
            retry_of: None,
            signals: Signals::default(),
            flow: None,
        }
    }

    /// A node's status (pending when it has no state yet).
    pub fn node_status(&self, id: &str) -> NodeStatus {
        self.nodes.get(id).map_or(NodeStatus::Pending, |n| n.status)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
