//! DataParts that steer a run that exists, so an operator can act on it without starting
//! another: pause or resume it, or retry it once it has ended. They travel in a `message/send`
//! to the workflow's request subject, as an approval decision does, and are checked against the
//! same authority as a `tasks/cancel` of the run (signed by the key that started it, or an
//! operator's, when it was signed).

use serde::{Deserialize, Serialize};

use crate::a2a::DataPartType;

/// What a [`WorkflowRunControl`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunControl {
    /// Stop dispatching new calls: calls in flight end and are recorded, the rest waits.
    Pause,
    /// Carry on where the pause stopped.
    Resume,
}

impl RunControl {
    /// The word on the wire (`pause`, `resume`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunControl::Pause => "pause",
            RunControl::Resume => "resume",
        }
    }
}

/// `workflow_run_control` (ours): pause or resume a running run. Answered at once with a
/// completed task saying it was recorded, or a failed one saying why not (unknown run, run
/// ended, not permitted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_run_control")]
pub struct WorkflowRunControl {
    /// The run's execution id (or the task id its caller started it with, under the
    /// request's `Mesh-Caller`).
    pub execution_id: String,
    /// Pause or resume.
    pub action: RunControl,
    /// Why, for people (kept in the run's history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl DataPartType for WorkflowRunControl {
    const TYPE: &'static str = "workflow_run_control";
}

/// `workflow_retry` (ours): start a new run that retries a run that ended without success
/// from the nodes that did not succeed, with its input and its definition
/// version. The request is a start like any other: its task id names the new run, and its
/// caller gets the new run's progress and final reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_retry")]
pub struct WorkflowRetry {
    /// The execution id of the run to retry.
    pub execution_id: String,
}

impl DataPartType for WorkflowRetry {
    const TYPE: &'static str = "workflow_retry";
}

/// `workflow_run_steered` (ours): a progress update telling a run's callers that it was
/// paused or resumed (sent as a `working` status update, like the other progress parts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_run_steered")]
pub struct WorkflowRunSteered {
    /// The run.
    pub execution_id: String,
    /// What was done to it: `pause` or `resume`.
    pub action: RunControl,
    /// Why, as the pause request said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl DataPartType for WorkflowRunSteered {
    const TYPE: &'static str = "workflow_run_steered";
}

/// What a [`WorkflowScheduleControl`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleControl {
    /// Add a schedule (its fields in `spec`, as a workflow file writes them).
    Add,
    /// Stop its slots from starting runs (a trigger by hand still starts one).
    Pause,
    /// Let its slots start runs again (from the next slot on).
    Resume,
    /// Remove a schedule added with `add` (one the workflow file declares stays).
    Delete,
    /// Start one run now, whatever the pause and the overlap policy.
    Trigger,
}

impl ScheduleControl {
    /// The word on the wire (`add`, `pause`, `resume`, `delete`, `trigger`).
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleControl::Add => "add",
            ScheduleControl::Pause => "pause",
            ScheduleControl::Resume => "resume",
            ScheduleControl::Delete => "delete",
            ScheduleControl::Trigger => "trigger",
        }
    }
}

/// `workflow_schedule_control` (ours): change one schedule of the workflow the request is
/// sent to. Answered at once with a completed task saying what was done (for a trigger,
/// the execution id of the run it starts), or a failed one saying why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_schedule_control")]
pub struct WorkflowScheduleControl {
    /// The schedule's name.
    pub schedule: String,
    /// What to do.
    pub action: ScheduleControl,
    /// Why, for people (kept with the schedule by a pause or resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For `add`: the schedule's fields (`cron` or `every`, `timezone`, `input`, `overlap`,
    /// `catchup_window`, `jitter`, `paused`), as in a workflow file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<serde_json::Value>,
}

impl DataPartType for WorkflowScheduleControl {
    const TYPE: &'static str = "workflow_schedule_control";
}

/// `workflow_trigger_replay` (ours): publish a trigger's dead letter again on the subject
/// it was first published on (so the trigger takes it again), and remove it from the
/// dead letters. Answered at once with a completed task, or a failed one saying why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_trigger_replay")]
pub struct WorkflowTriggerReplay {
    /// The dead letter's sequence in the dead-letter stream.
    pub sequence: u64,
}

impl DataPartType for WorkflowTriggerReplay {
    const TYPE: &'static str = "workflow_trigger_replay";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn control_parts_have_their_documented_shape() {
        let c = WorkflowRunControl {
            execution_id: "e1".into(),
            action: RunControl::Pause,
            reason: None,
        };
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"type": "workflow_run_control", "execution_id": "e1", "action": "pause"})
        );
        let r = WorkflowRetry {
            execution_id: "e1".into(),
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"type": "workflow_retry", "execution_id": "e1"})
        );
        let steered = WorkflowRunSteered {
            execution_id: "e1".into(),
            action: RunControl::Pause,
            reason: Some("lunch".into()),
        };
        assert_eq!(
            serde_json::to_value(&steered).unwrap(),
            json!({"type": "workflow_run_steered", "execution_id": "e1", "action": "pause", "reason": "lunch"})
        );
        let sc = WorkflowScheduleControl {
            schedule: "nightly".into(),
            action: ScheduleControl::Pause,
            note: Some("holiday".into()),
            spec: None,
        };
        assert_eq!(
            serde_json::to_value(&sc).unwrap(),
            json!({"type": "workflow_schedule_control", "schedule": "nightly", "action": "pause", "note": "holiday"})
        );
        let bad = serde_json::from_value::<WorkflowRunControl>(
            json!({"type": "workflow_run_control", "execution_id": "e1", "action": "stop"}),
        );
        assert!(bad.is_err());
    }
}
