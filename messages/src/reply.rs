//! Reading an agent's final reply: the JSON-RPC response, the task it stands for, and what
//! that task says (an output, a stored output, or a failure). The workflow node (reading
//! its calls' replies), the SDK's client and the CLI all read replies through here; each
//! keeps only its own wording of errors and its own way of fetching stored outputs.
//!
//! Rules, in order: a task that is not terminal says nothing yet; a `workflow_node_result`
//! DataPart, when there is one, decides (its status, not the task's state); otherwise a
//! completed task's output is [`output_part`] of its status message (or `{"text": ...}`),
//! and any other terminal state is a failure described by the message's first DataPart
//! (`error_message`, `error_kind`, `validation_errors`) or its text.

use serde_json::{json, Value};

use crate::a2a::{joined_text, AgentReply, JsonObject, Part, Task, TaskState, TaskStatus};
use crate::jsonrpc::{ErrorObject, Outcome, Response};
use crate::payload::part_value;
use crate::workflow::{ResultStatus, WorkflowNodeResult};

/// Why reply bytes carry no agent reply.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// The bytes are not a JSON-RPC response carrying a task, message or status update.
    #[error("not a JSON-RPC response: {}", crate::jsonrpc::json_error_text(.0))]
    NotJsonRpc(#[source] serde_json::Error),
    /// The agent answered with a JSON-RPC error (it refused or could not parse the request).
    #[error("JSON-RPC error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
}

/// The agent reply in a JSON-RPC response's bytes.
pub fn decode_reply(bytes: &[u8]) -> Result<AgentReply, ReplyError> {
    let response: Response = serde_json::from_slice(bytes).map_err(ReplyError::NotJsonRpc)?;
    match response.outcome {
        Outcome::Error(e) => Err(ReplyError::Rpc(e)),
        Outcome::Result(reply) => Ok(*reply),
    }
}

/// The task a reply stands for: a Task as it is; a bare Message (agents may answer with
/// one) as the status message of a completed task, which takes the message's task and
/// context ids (empty when absent); `None` for a status update, which is never final.
pub fn final_task(reply: AgentReply) -> Option<Task> {
    match reply {
        AgentReply::StatusUpdate(_) => None,
        AgentReply::Task(task) => Some(task),
        AgentReply::Message(m) => Some(Task {
            id: m.task_id.clone().unwrap_or_default(),
            context_id: m.context_id.clone().unwrap_or_default(),
            status: TaskStatus {
                state: TaskState::Completed,
                message: Some(m),
                timestamp: None,
            },
            artifacts: None,
            metadata: None,
        }),
    }
}

/// Where parts put an output.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Inline, already unwrapped.
    Inline(Value),
    /// In the object store: the FilePart's URI (normally `nats-object://`, unchecked here).
    Object(String),
}

/// Whether a DataPart is one of the workflow protocol's (`type` starting `workflow_`, or
/// the reference's `structured_invocation_`), which never carries a payload.
pub fn is_protocol_data(data: &JsonObject) -> bool {
    data.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.starts_with("workflow_") || t.starts_with("structured_invocation_"))
}

/// The output carried by `parts`: the first DataPart that is not a protocol DataPart
/// (unwrapped), else the URI of the first FilePart that has one; `None` when neither.
pub fn output_part(parts: &[Part]) -> Option<Output> {
    parts
        .iter()
        .find(|p| p.as_data().is_some_and(|d| !is_protocol_data(d)))
        .and_then(part_value)
        .map(Output::Inline)
        .or_else(|| {
            parts.iter().find_map(|p| match p {
                Part::File { file, .. } => file.uri.clone().map(Output::Object),
                _ => None,
            })
        })
}

/// What a final task says.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskReading {
    /// Success with this output (`null` when a result reports success with none).
    Output(Value),
    /// Success; the output is the artifact a `workflow_node_result` names in its
    /// `artifact_name`: a bare object name in the caller's artifact bucket or a
    /// `nats-object://` URI (see [`crate::payload::object_ref`]); or, from its
    /// `output_artifact_ref`, the versioned object's key ([`crate::workflow::ArtifactRef::object_key`]).
    Artifact(String),
    /// Success; the output is stored where this FilePart URI says.
    Object(String),
    /// The call failed.
    Failed(TaskFailure),
}

/// A failure as a final task reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFailure {
    /// The task's state (may be `Completed` when a result reports the failure).
    pub state: TaskState,
    /// Whether a `workflow_node_result` reported it; otherwise the task's state did.
    pub reported: bool,
    /// The agent's message; `None` when it gave none, and callers word their own default.
    pub message: Option<String>,
    /// The machine-readable kind (matched against `non_retryable_errors`).
    pub kind: Option<String>,
    /// Schema violations, when the agent listed them.
    pub validation_errors: Vec<String>,
}

/// Reads a task by the rules at the top of this module: `Ok(None)` while it is not
/// terminal, `Err` when its `workflow_node_result` does not parse.
pub fn read_task(task: &Task) -> Result<Option<TaskReading>, serde_json::Error> {
    let state = task.status.state;
    if !state.is_terminal() {
        return Ok(None);
    }
    if let Some(result) = task.find_data::<WorkflowNodeResult>() {
        return result.map(|r| Some(reported(state, r)));
    }
    let parts = task
        .status
        .message
        .as_ref()
        .map(|m| m.parts.as_slice())
        .unwrap_or_default();
    if state == TaskState::Completed {
        return Ok(Some(match output_part(parts) {
            Some(Output::Inline(value)) => TaskReading::Output(value),
            Some(Output::Object(uri)) => TaskReading::Object(uri),
            None => TaskReading::Output(json!({ "text": joined_text(parts) })),
        }));
    }
    let data = parts.iter().find_map(Part::as_data);
    let field = |k: &str| data?.get(k)?.as_str().map(str::to_owned);
    let text = Some(joined_text(parts)).filter(|t| !t.is_empty());
    Ok(Some(TaskReading::Failed(TaskFailure {
        state,
        reported: false,
        message: field("error_message").or(text),
        kind: field("error_kind"),
        validation_errors: data
            .and_then(|d| d.get("validation_errors"))
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default(),
    })))
}

fn reported(state: TaskState, r: WorkflowNodeResult) -> TaskReading {
    if r.status != ResultStatus::Success {
        return TaskReading::Failed(TaskFailure {
            state,
            reported: true,
            message: r.error_message,
            kind: r.error_kind,
            validation_errors: r.validation_errors.unwrap_or_default(),
        });
    }
    match (r.output, r.artifact_name, r.output_artifact_ref) {
        (Some(output), _, _) => TaskReading::Output(output),
        (None, Some(name), _) => TaskReading::Artifact(name),
        // The reference's field: the versioned object's key.
        (None, None, Some(reference)) => TaskReading::Artifact(reference.object_key()),
        (None, None, None) => TaskReading::Output(Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::{Message, Role};
    use crate::jsonrpc::RequestId;
    use crate::payload::{artifact_part, wrap};

    fn task(state: TaskState, parts: Vec<Part>) -> Task {
        Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state,
                message: Some(Message::new("m", Role::Agent, parts)),
                timestamp: None,
            },
            artifacts: None,
            metadata: None,
        }
    }

    fn read(state: TaskState, parts: Vec<Part>) -> TaskReading {
        read_task(&task(state, parts)).unwrap().unwrap()
    }

    #[test]
    fn replies_decode_or_say_why_not() {
        let reply = AgentReply::Task(task(TaskState::Completed, vec![]));
        let ok = serde_json::to_vec(&Response::result(RequestId::Number(1), reply.clone()));
        assert_eq!(decode_reply(&ok.unwrap()).unwrap(), reply);
        assert!(matches!(
            decode_reply(b"not json"),
            Err(ReplyError::NotJsonRpc(_))
        ));
        let err = Response::error(None, ErrorObject::new(-32602, "bad params"));
        match decode_reply(&serde_json::to_vec(&err).unwrap()) {
            Err(ReplyError::Rpc(e)) => {
                assert_eq!((e.code, e.message.as_str()), (-32602, "bad params"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bare_message_is_a_completed_task_and_updates_are_not_final() {
        let mut m = Message::new("m", Role::Agent, vec![wrap(json!(5))]);
        m.task_id = Some("t1".into());
        let task = final_task(AgentReply::Message(m)).unwrap();
        assert_eq!((task.id.as_str(), task.context_id.as_str()), ("t1", ""));
        assert_eq!(
            read_task(&task).unwrap(),
            Some(TaskReading::Output(json!(5)))
        );
        let update = serde_json::from_value(json!({
            "kind": "status-update", "taskId": "t", "contextId": "c",
            "status": {"state": "working"}, "final": false
        }))
        .unwrap();
        assert_eq!(final_task(AgentReply::StatusUpdate(update)), None);
    }

    #[test]
    fn a_result_decides_over_the_state() {
        let ok = Part::data_part(&WorkflowNodeResult::success(json!({"n": 1})));
        assert_eq!(
            read(TaskState::Completed, vec![ok]),
            TaskReading::Output(json!({"n": 1}))
        );
        let mut stored = WorkflowNodeResult::success(Value::Null);
        stored.output = None;
        stored.artifact_name = Some("t.output.json".into());
        assert_eq!(
            read(TaskState::Completed, vec![Part::data_part(&stored)]),
            TaskReading::Artifact("t.output.json".into())
        );
        let mut bad = WorkflowNodeResult::failure("nope");
        bad.error_kind = Some("fatal".into());
        bad.validation_errors = Some(vec!["/a: missing".into()]);
        assert_eq!(
            read(
                TaskState::Failed,
                vec![Part::text("x"), Part::data_part(&bad)]
            ),
            TaskReading::Failed(TaskFailure {
                state: TaskState::Failed,
                reported: true,
                message: Some("nope".into()),
                kind: Some("fatal".into()),
                validation_errors: vec!["/a: missing".into()],
            })
        );
        let malformed = json!({"type": "workflow_node_result", "status": 7});
        let malformed = Part::data(malformed.as_object().cloned().unwrap());
        assert!(read_task(&task(TaskState::Completed, vec![malformed])).is_err());
    }

    #[test]
    fn without_a_result_the_parts_say_it() {
        let protocol = Part::data(json!({"type": "workflow_x"}).as_object().cloned().unwrap());
        assert_eq!(
            read(
                TaskState::Completed,
                vec![protocol.clone(), wrap(json!([1]))]
            ),
            TaskReading::Output(json!([1]))
        );
        assert_eq!(
            read(
                TaskState::Completed,
                vec![Part::text("hi"), artifact_part("b", "o.json")]
            ),
            TaskReading::Object("nats-object://b/o.json".into())
        );
        assert_eq!(
            read(TaskState::Completed, vec![Part::text("a"), Part::text("b")]),
            TaskReading::Output(json!({"text": "a\nb"}))
        );
        assert_eq!(output_part(&[protocol, Part::text("t")]), None);
    }

    #[test]
    fn failures_without_a_result_take_the_first_data_part_or_the_text() {
        let data = json!({"error_message": "boom", "error_kind": "k", "validation_errors": ["v"]});
        let data = Part::data(data.as_object().cloned().unwrap());
        assert_eq!(
            read(TaskState::Rejected, vec![Part::text("t"), data]),
            TaskReading::Failed(TaskFailure {
                state: TaskState::Rejected,
                reported: false,
                message: Some("boom".into()),
                kind: Some("k".into()),
                validation_errors: vec!["v".into()],
            })
        );
        let TaskReading::Failed(f) = read(TaskState::Canceled, vec![Part::text("stopped")]) else {
            panic!("a failure")
        };
        assert_eq!(f.message.as_deref(), Some("stopped"));
        let TaskReading::Failed(f) = read(TaskState::Failed, vec![]) else {
            panic!("a failure")
        };
        assert_eq!((f.message, f.reported), (None, false));
    }

    #[test]
    fn unfinished_tasks_say_nothing_yet() {
        for state in [
            TaskState::Working,
            TaskState::Submitted,
            TaskState::InputRequired,
        ] {
            assert_eq!(read_task(&task(state, vec![wrap(json!(1))])).unwrap(), None);
        }
    }
}
