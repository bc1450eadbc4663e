//! What a run tells its callers, built without I/O: progress DataParts, status updates, the
//! final reply (the same bytes whether the run's end sends it or a resent request is
//! answered from the ended run's record), and the run's state for `tasks/get`.

use messages::a2a::{
    AgentReply, Message, Part, Role, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use messages::control::{RunControl, WorkflowRunSteered};
use messages::payload::{wrap, JSON_MIME};
use messages::workflow::{
    ArtifactRef, MapStatus, NodeOutcome, NodePhase, ResultStatus, RunOutcome, RunPhase,
    SwitchCaseInfo, WorkflowExecutionResult, WorkflowExecutionStart, WorkflowMapProgress,
    WorkflowNodeExecutionResult, WorkflowNodeExecutionStart, WorkflowNodeResult, WorkflowRunState,
};
use serde_json::Value;

use crate::core::{Detail, Execution, ExecutionId, NodeStatus, Progress, RunError, RunStatus};
use crate::definition::{JoinStrategy, NodeKind, Workflow};
use crate::shell::run::envelope::Caller;
use crate::shell::run::wire;

/// How a run ended, as its callers are told.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::shell) struct Ending {
    /// Success, failure or cancelled.
    pub(in crate::shell) status: RunStatus,
    /// The output when it travels inline.
    pub(in crate::shell) output: Option<Value>,
    /// The output's artifact `(name, uri)` when it is too large to travel inline.
    pub(in crate::shell) artifact: Option<(String, String)>,
    /// Why it failed, if it did.
    pub(in crate::shell) error: Option<RunError>,
}

/// Values larger than this (serialised) are left out of progress updates, which must fit
/// in one message: the update says how large the value was instead.
pub(in crate::shell) const PROGRESS_VALUE_MAX: usize = 64 * 1024;

/// `value`, or `None` and its size when it is too large for a progress update.
fn small(value: &Value) -> (Option<Value>, Option<usize>) {
    let size = serde_json::to_vec(value).map_or(usize::MAX, |b| b.len());
    if size > PROGRESS_VALUE_MAX {
        (None, Some(size))
    } else {
        (Some(value.clone()), None)
    }
}

/// Metadata saying a value of `size` bytes was left out.
fn omitted(size: Option<usize>) -> Option<messages::a2a::JsonObject> {
    let size = size?;
    let mut meta = messages::a2a::JsonObject::new();
    meta.insert("omitted_bytes".into(), Value::from(size));
    Some(meta)
}

/// The DataPart that reports `progress` of run `execution`.
pub(in crate::shell) fn progress_part(
    workflow: &Workflow,
    execution: &ExecutionId,
    progress: &Progress,
) -> Part {
    match progress {
        Progress::RunStarted { input } => Part::data_part(&WorkflowExecutionStart {
            workflow_name: workflow.name.clone(),
            execution_id: execution.0.clone(),
            input_artifact_ref: None,
            workflow_input: small(input).0,
        }),
        Progress::NodeStarted {
            node_id,
            node_type,
            agent,
            sub_task_id,
            iteration_index,
            parent_node_id,
            attempt,
        } => {
            let mut start = WorkflowNodeExecutionStart {
                node_id: node_id.clone(),
                node_type: node_type.clone(),
                agent_name: agent.clone(),
                sub_task_id: sub_task_id.clone(),
                iteration_index: iteration_index.map(u64::from),
                parent_node_id: parent_node_id.clone(),
                attempt: *attempt,
                ..Default::default()
            };
            describe_node(workflow, &mut start);
            Part::data_part(&start)
        }
        Progress::NodeFinished {
            node_id,
            status,
            output,
            error,
            condition_result,
            selected_branch,
        } => {
            let (output, size) = output.as_ref().map_or((None, None), small);
            Part::data_part(&WorkflowNodeExecutionResult {
                node_id: node_id.clone(),
                status: node_outcome(*status),
                output_artifact_ref: None,
                output,
                error_message: error.clone(),
                condition_result: *condition_result,
                selected_branch: selected_branch.clone(),
                iteration_index: None,
                metadata: omitted(size),
            })
        }
        Progress::RunPaused { reason } => Part::data_part(&WorkflowRunSteered {
            execution_id: execution.0.clone(),
            action: RunControl::Pause,
            reason: reason.clone(),
        }),
        Progress::RunResumed => Part::data_part(&WorkflowRunSteered {
            execution_id: execution.0.clone(),
            action: RunControl::Resume,
            reason: None,
        }),
        Progress::RunQueued { key } => Part::data_part(&messages::workflow::WorkflowRunQueued {
            execution_id: execution.0.clone(),
            concurrency_key: (!key.is_empty()).then(|| key.clone()),
            admitted: false,
        }),
        Progress::RunAdmitted => Part::data_part(&messages::workflow::WorkflowRunQueued {
            execution_id: execution.0.clone(),
            concurrency_key: None,
            admitted: true,
        }),
        Progress::MapProgress {
            node_id,
            total_items,
            completed_items,
        } => Part::data_part(&WorkflowMapProgress {
            node_id: node_id.clone(),
            total_items: u64::from(*total_items),
            completed_items: u64::from(*completed_items),
            status: if completed_items == total_items {
                MapStatus::Completed
            } else {
                MapStatus::InProgress
            },
        }),
    }
}

fn node_outcome(status: NodeStatus) -> NodeOutcome {
    match status {
        NodeStatus::Success => NodeOutcome::Success,
        NodeStatus::Skipped => NodeOutcome::Skipped,
        NodeStatus::Cancelled => NodeOutcome::Cancelled,
        NodeStatus::TimedOut => NodeOutcome::TimedOut,
        _ => NodeOutcome::Failure,
    }
}

/// Fills the kind-specific fields of a node start from the definition.
fn describe_node(workflow: &Workflow, start: &mut WorkflowNodeExecutionStart) {
    let Some(node) = workflow.node(&start.node_id) else {
        return;
    };
    match &node.kind {
        NodeKind::Conditional {
            condition,
            true_branch,
            false_branch,
        } => {
            start.condition = Some(condition.source().to_string());
            start.true_branch = Some(true_branch.clone());
            start.false_branch = false_branch.clone();
        }
        NodeKind::Switch { cases, default } => {
            start.cases = Some(
                cases
                    .iter()
                    .map(|c| SwitchCaseInfo {
                        condition: c.condition.source().to_string(),
                        node: c.target.clone(),
                    })
                    .collect(),
            );
            start.default_branch = default.clone();
        }
        NodeKind::Join { wait_for, strategy } => {
            start.wait_for = Some(wait_for.clone());
            let (name, n) = match strategy {
                JoinStrategy::All => ("all", None),
                JoinStrategy::Any => ("any", None),
                JoinStrategy::NOfM(n) => ("n_of_m", Some(*n as u64)),
            };
            start.join_strategy = Some(name.into());
            start.join_n = n;
        }
        NodeKind::Loop(l) => {
            start.max_iterations = Some(u64::from(l.max_iterations));
            start.loop_delay = l.delay.map(|d| format!("{}s", d.as_secs_f64()));
        }
        _ => {}
    }
}

/// The status update carrying `part` to `caller`, with `state` (`Working` for progress).
pub(in crate::shell) fn status_update(
    caller: &Caller,
    execution: &ExecutionId,
    state: TaskState,
    parts: Vec<Part>,
) -> Vec<u8> {
    let context = caller
        .context_id
        .clone()
        .unwrap_or_else(|| execution.0.clone());
    let mut message = Message::new(format!("{execution}-status"), Role::Agent, parts);
    message.task_id = Some(execution.0.clone());
    message.context_id = Some(context.clone());
    let update = TaskStatusUpdateEvent {
        task_id: execution.0.clone(),
        context_id: context,
        status: TaskStatus {
            state,
            message: Some(message),
            timestamp: None,
        },
        is_final: false,
        metadata: None,
    };
    wire::response(&caller.request_id, AgentReply::StatusUpdate(update))
}

/// The last progress DataPart of a run: its outcome.
pub(in crate::shell) fn execution_result_part(
    workflow: &Workflow,
    execution: &ExecutionId,
    ending: &Ending,
) -> Part {
    Part::data_part(&WorkflowExecutionResult {
        workflow_name: workflow.name.clone(),
        execution_id: execution.0.clone(),
        status: match ending.status {
            RunStatus::Success => RunOutcome::Success,
            RunStatus::Cancelled => RunOutcome::Cancelled,
            RunStatus::TimedOut => RunOutcome::TimedOut,
            _ => RunOutcome::Failure,
        },
        output_artifact_ref: artifact_ref(Some(ending)),
        workflow_output: ending.output.clone(),
        error_message: ending.error.as_ref().map(|e| e.message.clone()),
        error_node_id: ending.error.as_ref().and_then(|e| e.node_id.clone()),
    })
}

/// The reference to a run's stored output: its name and the version the URI names.
fn artifact_ref(ending: Option<&Ending>) -> Option<ArtifactRef> {
    let (name, uri) = ending?.artifact.as_ref()?;
    let version = messages::payload::parse_object_uri(uri)
        .and_then(|(_, key)| messages::payload::split_version_key(key))
        .map(|(_, v)| v);
    Some(ArtifactRef {
        name: name.clone(),
        version,
    })
}

/// The final reply to `caller`: the A2A task (completed, failed or canceled) whose parts
/// carry the output (inline or as an artifact), a `workflow_node_result` for callers that
/// are workflows (a `structured_invocation_result`, status `error` on failure, in the
/// reference's `dialect`), and a one-line summary. Returns the bytes and the task id that
/// names the reply for de-duplication.
pub(in crate::shell) fn final_reply(
    workflow: &Workflow,
    execution: &ExecutionId,
    caller: &Caller,
    ending: &Ending,
    dialect: messages::workflow::Dialect,
) -> (Vec<u8>, String) {
    let error_message = ending.error.as_ref().map(|e| e.message.clone());
    let mut parts = Vec::new();
    if caller.workflow_caller {
        parts.push(Part::data_part(&WorkflowNodeResult {
            status: if ending.status == RunStatus::Success {
                ResultStatus::Success
            } else {
                ResultStatus::Failure
            },
            output: ending.output.clone(),
            artifact_name: ending.artifact.as_ref().map(|(n, _)| n.clone()),
            artifact_version: None,
            output_artifact_ref: artifact_ref(Some(ending)),
            error_message: error_message.clone(),
            error_kind: match ending.status {
                RunStatus::Cancelled => Some("cancelled".to_string()),
                _ => ending.error.as_ref().and_then(|e| e.kind.clone()),
            },
            validation_errors: None,
            retry_count: 0,
        }));
    }
    parts.extend(output_part(Some(ending)));
    let (state, mut summary) = ended(&workflow.name, ending.status, error_message.as_deref())
        .expect("a run's final reply is sent when it has ended");
    if let Some(r) = artifact_ref(Some(ending)) {
        summary.push_str(&format!(". Output artifact: {}", r.object_key()));
    }
    let mut parts: Vec<Part> = parts.into_iter().map(|p| dialect.rewrite_part(p)).collect();
    parts.push(Part::text(summary));
    let task_id = caller
        .sub_task_id
        .clone()
        .unwrap_or_else(|| execution.0.clone());
    let context = caller
        .context_id
        .clone()
        .unwrap_or_else(|| execution.0.clone());
    let reply = wire::task(&task_id, &context, state, parts);
    (wire::response(&caller.request_id, reply), task_id)
}

/// The answer to `tasks/get` of run `execution` (asked for by `task_id`): a Task in the
/// run's A2A state (`working`; `input-required` while an approval waits; then `completed`,
/// `failed` or `canceled`) whose status message carries a `workflow_run_state` DataPart,
/// then the output (inline or as a FilePart) once it ended, then a one-line summary.
/// `ending` is how it ended, for an ended run.
pub(in crate::shell) fn run_state(
    workflow: &Workflow,
    execution: &ExecutionId,
    task_id: &str,
    context_id: &str,
    state: &Execution,
    ending: Option<&Ending>,
) -> AgentReply {
    let nodes: std::collections::BTreeMap<String, NodePhase> = workflow
        .nodes
        .iter()
        .map(|n| (n.id.clone(), node_phase(state.node_status(&n.id))))
        .collect();
    let waiting: Vec<String> = nodes
        .iter()
        .filter(|(_, p)| **p == NodePhase::Waiting)
        .map(|(id, _)| id.clone())
        .collect();
    let error = ending
        .and_then(|e| e.error.as_ref())
        .or(state.error.as_ref());
    let run = WorkflowRunState {
        workflow_name: workflow.name.clone(),
        execution_id: execution.0.clone(),
        status: if state.is_paused() {
            RunPhase::Paused
        } else {
            run_phase(state.status)
        },
        nodes,
        output: ending.and_then(|e| e.output.clone()),
        output_artifact_ref: artifact_ref(ending),
        error_message: ending.and(error).map(|e| e.message.clone()),
        error_node_id: ending.and(error).and_then(|e| e.node_id.clone()),
    };
    let mut parts = vec![Part::data_part(&run)];
    parts.extend(output_part(ending));
    let name = &workflow.name;
    let (a2a, summary) = match ended(name, state.status, run.error_message.as_deref()) {
        Some(end) => end,
        None if !waiting.is_empty() => {
            (TaskState::InputRequired, waits_text(name, state, &waiting))
        }
        None if state.is_paused() => (TaskState::Working, format!("Workflow {name} is paused")),
        None => (TaskState::Working, format!("Workflow {name} is running")),
    };
    parts.push(Part::text(summary));
    wire::task(task_id, context_id, a2a, parts)
}

/// What a run waits for, in words: decisions on approval nodes, signals for wait nodes
/// (with the key a signal sent by key names and the deadline).
fn waits_text(name: &str, state: &Execution, waiting: &[String]) -> String {
    let mut decisions = Vec::new();
    let mut signals = Vec::new();
    for id in waiting {
        match state.nodes.get(id).and_then(|n| n.detail.as_ref()) {
            Some(Detail::Wait(w)) => {
                let key = w.key.as_deref().map(|k| format!(", key '{k}'"));
                let until = w.deadline.map(|d| format!(", until {}", d.rfc3339()));
                signals.push(format!(
                    "signal '{}' (node {id}{}{})",
                    w.signal,
                    key.unwrap_or_default(),
                    until.unwrap_or_default()
                ));
            }
            _ => decisions.push(id.clone()),
        }
    }
    let mut what = Vec::new();
    if !decisions.is_empty() {
        what.push(format!("a decision on {}", decisions.join(", ")));
    }
    what.extend(signals);
    format!("Workflow {name} waits for {}", what.join("; "))
}

/// The part carrying an ended run's output: inline, or its artifact as a FilePart.
fn output_part(ending: Option<&Ending>) -> Option<Part> {
    let ending = ending?;
    match (&ending.output, &ending.artifact) {
        (Some(out), _) => Some(wrap(out.clone())),
        (None, Some((name, uri))) => Some(Part::file_uri(
            uri.clone(),
            Some(name.clone()),
            Some(JSON_MIME.into()),
        )),
        _ => None,
    }
}

/// The A2A state and one-line summary of a run that ended with `status`; `None` while it
/// goes on.
fn ended(workflow: &str, status: RunStatus, error: Option<&str>) -> Option<(TaskState, String)> {
    Some(match status {
        RunStatus::Success => (
            TaskState::Completed,
            format!("Workflow {workflow} completed"),
        ),
        RunStatus::Cancelled => (
            TaskState::Canceled,
            format!("Workflow {workflow} was cancelled"),
        ),
        RunStatus::Failure => (
            TaskState::Failed,
            format!(
                "Workflow {workflow} failed: {}",
                error.unwrap_or("no reason given")
            ),
        ),
        // A2A has no state of its own for it: `failed`, with the reason said.
        RunStatus::TimedOut => (
            TaskState::Failed,
            format!(
                "Workflow {workflow} timed out: {}",
                error.unwrap_or("no reason given")
            ),
        ),
        RunStatus::Queued | RunStatus::Running | RunStatus::Finishing => return None,
    })
}

fn run_phase(status: RunStatus) -> RunPhase {
    match status {
        RunStatus::Queued => RunPhase::Queued,
        RunStatus::Running => RunPhase::Running,
        RunStatus::Finishing => RunPhase::Finishing,
        RunStatus::Success => RunPhase::Success,
        RunStatus::Failure => RunPhase::Failure,
        RunStatus::Cancelled => RunPhase::Cancelled,
        RunStatus::TimedOut => RunPhase::TimedOut,
    }
}

fn node_phase(status: NodeStatus) -> NodePhase {
    match status {
        NodeStatus::Pending => NodePhase::Pending,
        NodeStatus::Running => NodePhase::Running,
        NodeStatus::Waiting => NodePhase::Waiting,
        NodeStatus::Success => NodePhase::Success,
        NodeStatus::Failure => NodePhase::Failure,
        NodeStatus::Skipped => NodePhase::Skipped,
        NodeStatus::Cancelled => NodePhase::Cancelled,
        NodeStatus::TimedOut => NodePhase::TimedOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use messages::reply::{decode_reply, final_task};
    use serde_json::json;

    fn workflow() -> Workflow {
        let yaml = r#"
name: W
workflow:
  description: one agent
  nodes: [{id: a, type: agent, agent_name: A}]
  output_mapping: {x: "{{a.output.x}}"}
"#;
        crate::definition::parse_str(yaml, "w.yaml").expect("valid")
    }

    fn task_of(bytes: &[u8]) -> messages::a2a::Task {
        let reply = decode_reply(bytes).expect("a JSON-RPC result");
        final_task(reply).expect("a task")
    }

    #[test]
    fn a_success_carries_the_output_and_is_named_by_the_callers_task() {
        let caller = Caller {
            request_id: json!("r1"),
            sub_task_id: Some("parent_x_1".into()),
            workflow_caller: true,
            ..Caller::default()
        };
        let ending = Ending {
            status: RunStatus::Success,
            output: Some(json!({"x": 1})),
            artifact: None,
            error: None,
        };
        let exec = ExecutionId("e".into());
        let (bytes, task_id) =
            final_reply(&workflow(), &exec, &caller, &ending, Default::default());
        assert_eq!(task_id, "parent_x_1");
        let task = task_of(&bytes);
        assert_eq!(task.status.state, TaskState::Completed);
        let parts = task.status.message.expect("a message").parts;
        assert!(parts.iter().any(|p| p
            .as_data()
            .is_some_and(|d| d["type"] == "workflow_node_result")));
        assert!(parts
            .iter()
            .any(|p| p.as_data() == Some(&json!({"x": 1}).as_object().unwrap().clone())));
    }

    #[test]
    fn a_failure_says_why_and_the_same_ending_gives_the_same_bytes() {
        let ending = Ending {
            status: RunStatus::Failure,
            output: None,
            artifact: None,
            error: Some(RunError {
                message: "node a failed".into(),
                node_id: Some("a".into()),
                kind: None,
            }),
        };
        let exec = ExecutionId("e".into());
        let caller = Caller::default();
        let (bytes, task_id) =
            final_reply(&workflow(), &exec, &caller, &ending, Default::default());
        assert_eq!(task_id, "e");
        assert_eq!(
            bytes,
            final_reply(&workflow(), &exec, &caller, &ending, Default::default()).0
        );
        let task = task_of(&bytes);
        assert_eq!(task.status.state, TaskState::Failed);
        let text: String = task.status.message.expect("message").text();
        assert!(text.contains("node a failed"), "{text}");
    }

    #[test]
    fn run_state_follows_the_run_and_carries_the_output_once_it_ended() {
        use crate::core::{Execution, NodeState};
        let exec = ExecutionId("e".into());
        let mut state = Execution::new(exec.clone(), "W");
        let read = |state: &Execution, ending: Option<&Ending>| {
            let AgentReply::Task(task) = run_state(&workflow(), &exec, "t1", "c1", state, ending)
            else {
                panic!("not a task");
            };
            let parts = task.status.message.clone().expect("a message").parts;
            let run: WorkflowRunState = Message::new("m", Role::Agent, parts.clone())
                .find_data()
                .expect("a run state")
                .expect("well formed");
            (task, run, parts)
        };
        let (task, run, _) = read(&state, None);
        assert_eq!((task.id.as_str(), task.context_id.as_str()), ("t1", "c1"));
        assert_eq!(task.status.state, TaskState::Working);
        assert_eq!(run.nodes["a"], NodePhase::Pending);
        state
            .nodes
            .insert("a".into(), NodeState::new(NodeStatus::Waiting));
        let (task, run, _) = read(&state, None);
        assert_eq!(task.status.state, TaskState::InputRequired);
        assert_eq!(
            (run.status, run.nodes["a"]),
            (RunPhase::Running, NodePhase::Waiting)
        );
        state
            .nodes
            .insert("a".into(), NodeState::new(NodeStatus::Success));
        state.status = RunStatus::Success;
        let ending = Ending {
            status: RunStatus::Success,
            output: Some(json!({"x": 1})),
            artifact: None,
            error: None,
        };
        let (task, run, parts) = read(&state, Some(&ending));
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(run.output, Some(json!({"x": 1})));
        assert_eq!(
            messages::reply::output_part(&parts),
            Some(messages::reply::Output::Inline(json!({"x": 1})))
        );
    }
}
