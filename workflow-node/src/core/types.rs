//! The vocabulary of the core: time, ids, events (facts) and commands (imperatives).

use std::fmt;
use std::str::FromStr;

use messages::sub_task::SubTaskId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::definition::{CallTarget, NodeId};

/// Milliseconds since the Unix epoch. The core never reads a clock: time comes in as this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Millis(pub u64);

impl Millis {
    /// `self + d`, saturating.
    pub fn plus(self, d: std::time::Duration) -> Millis {
        Millis(
            self.0
                .saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }

    /// `2026-11-26T10:42:03.123Z`: RFC 3339 in UTC, to the millisecond.
    pub fn rfc3339(self) -> String {
        let (date, clock) = self.civil();
        format!("{date}T{clock}.{:03}Z", self.0 % 1000)
    }

    /// The date (`2026-11-26`) and the time of day (`10:42:03`), in UTC.
    pub fn civil(self) -> (String, String) {
        let secs = self.0 / 1000;
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        (
            format!("{year:04}-{month:02}-{day:02}"),
            format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60),
        )
    }
}

/// The id of one run. Made of `[A-Za-z0-9-]` (no `_`: sub-task ids use `_` as separator).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExecutionId(pub String);

impl ExecutionId {
    /// Checks the id's alphabet.
    pub fn parse(text: &str) -> Result<ExecutionId, String> {
        if !text.is_empty()
            && text.len() <= 128
            && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            Ok(ExecutionId(text.to_string()))
        } else {
            Err(format!(
                "execution id '{text}' must be 1 to 128 of [A-Za-z0-9-]"
            ))
        }
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which instance of a node's call a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// The node's only call (agent and workflow nodes, exit handlers).
    Single,
    /// Item `i` of a map (the task's node is the map's inner node).
    Item(u32),
    /// Branch `i` of a fork (the task's node is the fork).
    Branch(u32),
    /// Iteration `i` of a loop (the task's node is the loop's inner node).
    Iteration(u32),
}

/// One call made by the run: a node and a slot. Stable across attempts and replicas.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    /// The node whose call this is.
    pub node: NodeId,
    /// Which of its calls.
    pub slot: Slot,
}

impl TaskKey {
    /// The node's single call.
    pub fn single(node: &str) -> TaskKey {
        TaskKey {
            node: node.to_string(),
            slot: Slot::Single,
        }
    }

    /// The sub-task id of `attempt` (see [`messages::sub_task`]), one NATS token.
    pub fn sub_task_id(&self, execution: &ExecutionId, attempt: u32) -> String {
        SubTaskId {
            execution: &execution.0,
            node: &self.node,
            slot: &slot_code(self.slot),
            attempt,
        }
        .format()
    }

    /// Inverse of [`TaskKey::sub_task_id`].
    pub fn parse_sub_task_id(id: &str) -> Option<(ExecutionId, TaskKey, u32)> {
        let id = SubTaskId::parse(id)?;
        let slot = parse_slot(id.slot)?;
        let execution = ExecutionId::parse(id.execution).ok()?;
        Some((
            execution,
            TaskKey {
                node: id.node.to_string(),
                slot,
            },
            id.attempt,
        ))
    }
}

fn slot_code(slot: Slot) -> String {
    match slot {
        Slot::Single => "x".into(),
        Slot::Item(i) => format!("i{i}"),
        Slot::Branch(i) => format!("b{i}"),
        Slot::Iteration(i) => format!("l{i}"),
    }
}

fn parse_slot(code: &str) -> Option<Slot> {
    if code == "x" {
        return Some(Slot::Single);
    }
    let (tag, n) = code.split_at_checked(1)?;
    let n: u32 = n.parse().ok()?;
    match tag {
        "i" => Some(Slot::Item(n)),
        "b" => Some(Slot::Branch(n)),
        "l" => Some(Slot::Iteration(n)),
        _ => None,
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.node, slot_code(self.slot))
    }
}

impl FromStr for TaskKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (node, slot) = s
            .rsplit_once('#')
            .ok_or_else(|| format!("bad task key '{s}'"))?;
        let slot = parse_slot(slot).ok_or_else(|| format!("bad task slot in '{s}'"))?;
        Ok(TaskKey {
            node: node.to_string(),
            slot,
        })
    }
}

impl Serialize for TaskKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A durable timer. Firing one that no longer matters (the call ended, the approval was
/// decided) does nothing, so the shell may fire each at least once.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "timer", rename_all = "snake_case")]
pub enum TimerId {
    /// The per-node timeout of one attempt.
    CallTimeout {
        /// The call the timeout belongs to.
        task: TaskKey,
        /// The attempt it times: firing for an attempt that already ended does nothing.
        attempt: u32,
    },
    /// The end of a retry backoff: start `attempt`.
    Retry {
        /// The call to try again.
        task: TaskKey,
        /// The attempt to start.
        attempt: u32,
    },
    /// The end of a loop's delay: start `iteration`.
    LoopDelay {
        /// The loop node (not its inner node).
        node: NodeId,
        /// The iteration to start (0-based).
        iteration: u32,
    },
    /// An approval's timeout.
    ApprovalTimeout {
        /// The approval node; its `on_timeout` decides when the timer fires.
        node: NodeId,
    },
    /// A wait node's timeout.
    WaitTimeout {
        /// The wait node.
        node: NodeId,
    },
    /// The run's `max_workflow_execution_time_seconds`.
    Deadline,
    /// The end of the grace exit handlers get once the deadline passed.
    ExitGrace,
}

impl TimerId {
    /// A stable text key, usable as a KV key suffix (`[A-Za-z0-9_#-]` and `.`-free).
    pub fn key(&self) -> String {
        match self {
            TimerId::CallTimeout { task, attempt } => {
                format!("timeout-{}-{}-{attempt}", task.node, slot_code(task.slot))
            }
            TimerId::Retry { task, attempt } => {
                format!("retry-{}-{}-{attempt}", task.node, slot_code(task.slot))
            }
            TimerId::LoopDelay { node, iteration } => format!("delay-{node}-{iteration}"),
            TimerId::ApprovalTimeout { node } => format!("approval-{node}"),
            TimerId::WaitTimeout { node } => format!("wait-{node}"),
            TimerId::Deadline => "deadline".into(),
            TimerId::ExitGrace => "exit-grace".into(),
        }
    }
}

/// Why a call failed; decides which `retry_policy` retries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The agent answered with a failure (retried by `OnFailure` and `Always`).
    Failed,
    /// The agent could not be reached (retried by `OnError` and `Always`).
    Unreachable,
    /// The agent did not answer in time (retried by `OnError` and `Always`).
    TimedOut,
}

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Whether the agent answered with an error, could not be reached, or timed out: the
    /// retry policy decides by it.
    pub class: FailureClass,
    /// What the agent or the shell said.
    pub message: String,
    /// The error kind, matched against `non_retryable_errors`: the agent's `error_kind`,
    /// or [`Failure::TIMEOUT`] when the call's timeout passed. None when the agent gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl Failure {
    /// The kind of a call whose timeout passed before the agent answered, so that
    /// `non_retryable_errors: [timeout]` and callers can tell a timeout from other errors.
    pub const TIMEOUT: &'static str = "timeout";
}

/// Something that happened to a run. Every event is safe to apply twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The run was requested with this input. Must be the first event.
    Started {
        /// The workflow input.
        input: Value,
    },
    /// An agent answered a call with an output.
    CallSucceeded {
        /// The call answered, parsed from the reply's sub-task id.
        task: TaskKey,
        /// The attempt answered; an answer for any other attempt than the running one is
        /// stale and ignored.
        attempt: u32,
        /// The agent's output, already read from the reply (an artifact is loaded first).
        output: Value,
    },
    /// A call failed (the agent said so, or it could not be reached).
    CallFailed {
        /// The call that failed, parsed from the sub-task id.
        task: TaskKey,
        /// The attempt that failed; a failure of any other attempt is stale and ignored.
        attempt: u32,
        /// What failed; its class and kind decide whether the call is retried.
        failure: Failure,
    },
    /// The shell found the agent's gate full (its `max_in_flight` or `rate` reached), so
    /// the attempt was not sent: it waits for a slot, and its timeout does not run meanwhile.
    SlotWaiting {
        /// The call waiting.
        task: TaskKey,
        /// The attempt waiting; any other is stale and ignored.
        attempt: u32,
    },
    /// The agent's gate handed a slot to the attempt that waited for it: it is sent now,
    /// and its timeout starts now.
    SlotGranted {
        /// The call granted.
        task: TaskKey,
        /// The attempt granted; any other is stale and ignored.
        attempt: u32,
    },
    /// A timer the core started has come due.
    TimerFired {
        /// The timer; one that no longer matches the state (stale attempt, ended node) is
        /// ignored.
        timer: TimerId,
    },
    /// Someone asked to cancel the run.
    CancelRequested {
        /// Why, if said.
        #[serde(default)]
        reason: Option<String>,
    },
    /// The shell gave up on an event of this run (it could not be committed, even after
    /// retries): the run ends failed at once with `reason`, its calls in flight cancelled
    /// and its exit handlers not run (their events could fail the same way).
    Abandoned {
        /// What went wrong, for the run's error.
        reason: String,
    },
    /// Someone approved or rejected an approval node.
    ApprovalDecided {
        /// The approval node; a decision for a node not waiting is ignored.
        node: NodeId,
        /// Approved (true) or rejected.
        approved: bool,
        /// Who decided; must be one of the node's `approvers` when it lists any.
        #[serde(default)]
        by: Option<String>,
        /// The decider's comment, kept in the output and in a rejection's error.
        #[serde(default)]
        comment: Option<String>,
    },
    /// Someone asked to pause the run: it dispatches no new call until resumed.
    PauseRequested {
        /// Why, if said.
        #[serde(default)]
        reason: Option<String>,
    },
    /// Someone asked to resume a paused run.
    ResumeRequested,
    /// A signal for the run's wait nodes: the one waiting for it takes it, or the run keeps
    /// it (see `signals`).
    SignalReceived {
        /// The signal (its `at` is set when applied).
        signal: super::signals::Signal,
    },
    /// A queued run got its slot (see `flow`): it starts. Applied to a run not queued,
    /// it changes nothing.
    Admitted,
}

/// A node's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// Not started yet; never the status of a node once the run has ended.
    Pending,
    /// Started, not ended.
    Running,
    /// An approval waiting for a decision, or a wait node for a signal.
    Waiting,
    /// Ended with an output.
    Success,
    /// Ended with an error (its call failed, a template did not resolve, rejected).
    Failure,
    /// Never ran: branch not taken, `when` false, all dependencies skipped, or the run
    /// stopped before reaching it.
    Skipped,
    /// Stopped while running, by a cancel, the deadline, or (exit handlers) the end of
    /// the grace period.
    Cancelled,
    /// Ended with an error because it hit its timeout: its call's last attempt timed out
    /// (error kind `timeout`), or an approval got no decision in time (`on_timeout:
    /// reject`). Counts as a failure everywhere a failure counts.
    TimedOut,
}

impl NodeStatus {
    /// Whether the status is final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            NodeStatus::Success
                | NodeStatus::Failure
                | NodeStatus::Skipped
                | NodeStatus::Cancelled
                | NodeStatus::TimedOut
        )
    }

    /// Every status a node can have.
    pub const ALL: [NodeStatus; 8] = [
        NodeStatus::Pending,
        NodeStatus::Running,
        NodeStatus::Waiting,
        NodeStatus::Success,
        NodeStatus::Failure,
        NodeStatus::Skipped,
        NodeStatus::Cancelled,
        NodeStatus::TimedOut,
    ];

    /// Whether the node ended with an error: `Failure` or `TimedOut`.
    pub fn is_failed(self) -> bool {
        matches!(self, NodeStatus::Failure | NodeStatus::TimedOut)
    }

    /// The status as written in files and events.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Pending => "pending",
            NodeStatus::Running => "running",
            NodeStatus::Waiting => "waiting",
            NodeStatus::Success => "success",
            NodeStatus::Failure => "failure",
            NodeStatus::Skipped => "skipped",
            NodeStatus::Cancelled => "cancelled",
            NodeStatus::TimedOut => "timed_out",
        }
    }
}

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting for a slot under the workflow's `max_concurrent_runs` or `concurrency_key`
    /// (see `flow`): nothing runs until [`Event::Admitted`].
    Queued,
    /// The main DAG is running.
    Running,
    /// The main DAG ended; exit handlers are running.
    Finishing,
    /// The main DAG and its output mapping succeeded, and no exit handler failed.
    Success,
    /// A node, the input or output schema, the output mapping, the deadline or an exit
    /// handler failed it.
    Failure,
    /// Stopped by a cancel request (a failure ends as `Failure`, the deadline as
    /// `TimedOut`).
    Cancelled,
    /// Its deadline (`max_workflow_execution_time_seconds`) passed before it ended.
    TimedOut,
}

impl RunStatus {
    /// The statuses a run ends with.
    pub const ENDED: [RunStatus; 4] = [
        RunStatus::Success,
        RunStatus::Failure,
        RunStatus::Cancelled,
        RunStatus::TimedOut,
    ];

    /// Whether the status is final.
    pub fn is_terminal(self) -> bool {
        RunStatus::ENDED.contains(&self)
    }

    /// The status as written in results and events.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Finishing => "finishing",
            RunStatus::Success => "success",
            RunStatus::Failure => "failure",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
        }
    }
}

/// Why a run failed: the node that failed (if any) and the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// The node that failed, when a node did.
    pub node_id: Option<NodeId>,
    /// What went wrong, for people: names the node and the cause
    /// (`node 'a' failed: agent 'A' timed out after 30 s`).
    pub message: String,
    /// The error kind of the failed node's call (the agent's `error_kind`, or `timeout`),
    /// when the run failed because of one call that had a kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl RunError {
    /// The kind of a run's error when the shell gave up on one of its events.
    pub const ABANDONED: &'static str = "abandoned";
}

/// A call to carry out: send a `workflow_node_request` to an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dispatch {
    /// The call; with `attempt` it gives the sub-task id the answer comes back under.
    pub task: TaskKey,
    /// Its attempt (1-based).
    pub attempt: u32,
    /// Deterministic sub-task id: the same on every replica and every re-dispatch.
    pub sub_task_id: String,
    /// The node id sent in the request (the fork node for a fork branch).
    pub node_id: NodeId,
    /// The agent or workflow the request goes to.
    pub target: CallTarget,
    /// The node's `input` with its templates resolved (or the implicit input).
    pub input: Value,
    /// The node's `instruction` with its templates resolved; `None` when it has none.
    pub instruction: Option<String>,
    /// `input_schema_override`, when set.
    pub input_schema: Option<Value>,
    /// `output_schema_override`, when set.
    pub output_schema: Option<Value>,
    /// When the attempt times out.
    pub deadline: Millis,
}

/// A progress update for the caller's status subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "progress", rename_all = "snake_case")]
pub enum Progress {
    /// The run started.
    RunStarted {
        /// The workflow input, as validated.
        input: Value,
    },
    /// A node (or one call of a map, fork or loop) started.
    NodeStarted {
        /// The node: for a map item or loop iteration, the inner node; for a fork branch,
        /// the fork.
        node_id: NodeId,
        /// Its `type` as written in files (`agent`, `map`, ...).
        node_type: String,
        /// The agent called, for calls.
        agent: Option<String>,
        /// The sub-task id, for calls.
        sub_task_id: Option<String>,
        /// Map item or loop iteration index.
        iteration_index: Option<u32>,
        /// The owning map, loop or fork, for their calls.
        parent_node_id: Option<NodeId>,
        /// Attempt, for calls.
        attempt: Option<u32>,
    },
    /// A node ended.
    NodeFinished {
        /// The node; each node of the workflow is reported once per run.
        node_id: NodeId,
        /// How it ended: always a terminal status.
        status: NodeStatus,
        /// Its output, on success.
        output: Option<Value>,
        /// Why it failed or was skipped.
        error: Option<String>,
        /// A conditional's result.
        condition_result: Option<bool>,
        /// The branch a conditional or switch took.
        selected_branch: Option<NodeId>,
    },
    /// The run was paused (`PauseRequested`): nothing new is dispatched until a resume.
    RunPaused {
        /// Why, as the request said.
        reason: Option<String>,
    },
    /// The run was resumed (`ResumeRequested`): what waited is dispatched.
    RunResumed,
    /// The run waits for a slot (see `flow`); it starts with [`Progress::RunAdmitted`].
    RunQueued {
        /// Its concurrency key (empty under `max_concurrent_runs` alone).
        key: String,
    },
    /// A queued run got its slot and starts.
    RunAdmitted,
    /// A map item ended.
    MapProgress {
        /// The map node (not its inner node).
        node_id: NodeId,
        /// Items the map resolved, in all.
        total_items: u32,
        /// Items ended so far, whatever their outcome.
        completed_items: u32,
    },
}

/// What the shell must do, in order, after committing the new state.
// Commands live for one event; boxing the common `Dispatch` would cost an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// Send a request to an agent.
    Dispatch(Dispatch),
    /// Ask an agent to stop a call (best effort; its late answer is ignored).
    CancelCall {
        /// The call to stop.
        task: TaskKey,
        /// The attempt running at the agent.
        attempt: u32,
        /// Its sub-task id.
        sub_task_id: String,
        /// The agent running it.
        agent: String,
    },
    /// Fire [`Event::TimerFired`] at `at` (durably: the timer must outlive this replica).
    StartTimer {
        /// The timer; starting one already armed moves its deadline.
        timer: TimerId,
        /// The deadline, on the same clock as the `now` given to `apply`.
        at: Millis,
    },
    /// Disarm a timer that no longer matters (its call ended, the run ended). Optional for
    /// correctness — a stale timer's event changes nothing — but it keeps timers from
    /// piling up.
    CancelTimer {
        /// The timer; cancelling one not armed does nothing.
        timer: TimerId,
    },
    /// Publish progress to the caller.
    Progress(Progress),
    /// Tell the approvers that a decision is awaited.
    RequestApproval {
        /// The approval node, which the decision must name.
        node: NodeId,
        /// Who may decide (empty: anyone).
        approvers: Vec<String>,
        /// The node's `message` with its templates resolved; `None` when it has none.
        message: Option<String>,
        /// When it times out, if it does.
        deadline: Option<Millis>,
    },
    /// Ask for a slot for this queued run (see `flow`): the shell puts it among the
    /// slot's holders, or in its queue, and publishes [`Event::Admitted`] to every holder
    /// not yet started. Safe to carry out again.
    Admit {
        /// The run's concurrency key (empty when the workflow has none).
        key: String,
    },
    /// Give back this run's slot, or leave the queue (see `flow`), and admit the runs
    /// that waited for it. Safe to carry out again: a run not there frees nothing.
    Release {
        /// The run's concurrency key (empty when the workflow has none).
        key: String,
    },
    /// The shell's, never the core's: the call `sub_task_id` to `agent` ended (or never
    /// started), so the slot it held or waited for in the agent's gate is given back (see
    /// `shell/run/gate.rs`). Added by the shell to a commit's commands for agents with
    /// limits, so that it is carried out again from the outbox like any command.
    ReleaseSlot {
        /// The agent whose gate holds the slot.
        agent: String,
        /// The call that held or waited for it.
        sub_task_id: String,
    },
    /// The run ended: send the one final reply.
    Finish {
        /// `success`, `failure` or `cancelled`.
        status: RunStatus,
        /// The output, on success.
        output: Option<Value>,
        /// The error, on failure or cancel.
        error: Option<RunError>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_task_ids_round_trip_with_underscores_in_node_ids() {
        let exec = ExecutionId::parse("abc-123").unwrap();
        for slot in [
            Slot::Single,
            Slot::Item(7),
            Slot::Branch(0),
            Slot::Iteration(12),
        ] {
            let key = TaskKey {
                node: "my_node_x".into(),
                slot,
            };
            let id = key.sub_task_id(&exec, 3);
            assert_eq!(
                TaskKey::parse_sub_task_id(&id),
                Some((exec.clone(), key, 3))
            );
        }
        assert_eq!(TaskKey::parse_sub_task_id("garbage"), None);
        assert_eq!(TaskKey::parse_sub_task_id("a_b_q1_1"), None);
    }

    #[test]
    fn execution_ids_reject_underscores() {
        assert!(ExecutionId::parse("a_b").is_err());
        assert!(ExecutionId::parse("").is_err());
        assert!(ExecutionId::parse("A-9").is_ok());
    }

    #[test]
    fn task_keys_serialize_as_strings() {
        let k = TaskKey {
            node: "n".into(),
            slot: Slot::Item(4),
        };
        let j = serde_json::to_string(&k).unwrap();
        assert_eq!(j, "\"n#i4\"");
        assert_eq!(serde_json::from_str::<TaskKey>(&j).unwrap(), k);
    }
}
