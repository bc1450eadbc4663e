//! Encoding and decoding of wire messages for the shell: inputs out of requests, events out
//! of agent replies, tasks and status updates for callers. Pure functions, unit-tested.

use messages::a2a::{AgentReply, Message, Part, Role, Task, TaskState, TaskStatus};
use messages::jsonrpc::{ErrorObject, RequestId, Response};
use messages::payload::{object_ref, part_value};
use messages::reply::{decode_reply, final_task, read_task, ReplyError, TaskReading};
use serde_json::{json, Value};

use crate::core::{Event, Failure, FailureClass, TaskKey};

/// Where a request's input is.
#[derive(Debug, Clone, PartialEq)]
pub enum InputSource {
    /// Inline JSON.
    Inline(Value),
    /// An object-store reference: (bucket, object name).
    Object(String, String),
}

/// The input of a workflow request: the first DataPart that is not a protocol DataPart,
/// else the first FilePart (an object-store artifact), else the text, else `{}`.
pub fn request_input(message: &Message, default_bucket: &str) -> Result<InputSource, String> {
    for part in &message.parts {
        if let Part::Data { data, .. } = part {
            let protocol = data.get("type").and_then(Value::as_str).is_some_and(|t| {
                t.starts_with("workflow_") || t.starts_with("structured_invocation")
            });
            if !protocol {
                return Ok(InputSource::Inline(part_value(part).unwrap_or(Value::Null)));
            }
        }
    }
    for part in &message.parts {
        if let Part::File { file, .. } = part {
            if let Some(uri) = &file.uri {
                return object_ref(uri, default_bucket)
                    .map(|(b, n)| InputSource::Object(b.to_owned(), n.to_owned()))
                    .ok_or_else(|| {
                        format!("file part uri '{uri}' is not a nats-object:// artifact")
                    });
            }
            if let Some(bytes) = &file.bytes {
                return Err(format!(
                    "inline file bytes are not supported ({} base64 characters): store the input in the object store",
                    bytes.len()
                ));
            }
        }
    }
    let text = message.text();
    if text.is_empty() {
        Ok(InputSource::Inline(json!({})))
    } else {
        Ok(InputSource::Inline(json!({ "text": text })))
    }
}

/// What an agent's reply means for the run, or `None` for status updates.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyMeaning {
    /// The call succeeded with inline output.
    Output(Value),
    /// The call succeeded; the output is the named artifact.
    Artifact(String),
    /// The call failed.
    Failed(Failure),
}

/// Interprets a reply published to a response subject (see [`messages::reply`]).
pub fn interpret_reply(bytes: &[u8]) -> Option<ReplyMeaning> {
    let failed = |message: String, kind: Option<String>| {
        Some(ReplyMeaning::Failed(Failure {
            class: FailureClass::Failed,
            message,
            kind,
        }))
    };
    let reply = match decode_reply(bytes) {
        Ok(reply) => reply,
        Err(ReplyError::NotJsonRpc(e)) => {
            let preview: String = String::from_utf8_lossy(bytes).chars().take(120).collect();
            return failed(
                format!(
                    "the agent sent a reply that is not a JSON-RPC response ({}): {preview}",
                    messages::jsonrpc::json_error_text(&e)
                ),
                None,
            );
        }
        Err(ReplyError::Rpc(e)) => {
            return failed(
                format!("the agent answered with error {}: {}", e.code, e.message),
                None,
            )
        }
    };
    let reading = match read_task(&final_task(reply)?) {
        Ok(reading) => reading?,
        Err(e) => {
            return failed(
                format!("the agent's workflow_node_result is malformed: {e}"),
                None,
            )
        }
    };
    match reading {
        TaskReading::Output(output) => match crate::limits::check_depth("the output", &output) {
            Ok(()) => Some(ReplyMeaning::Output(output)),
            Err(e) => failed(format!("the agent's reply was refused: {e}"), None),
        },
        // A URI names its bucket; the worker reads either through `object_ref`.
        TaskReading::Artifact(name) | TaskReading::Object(name) => {
            Some(ReplyMeaning::Artifact(name))
        }
        TaskReading::Failed(f) => {
            let mut message = f.message.unwrap_or_else(|| match f.reported {
                true => "the agent reported a failure".into(),
                false => format!("the agent ended the task as {:?}", f.state),
            });
            if !f.validation_errors.is_empty() {
                message = format!(
                    "{message} (validation errors: {})",
                    f.validation_errors.join("; ")
                );
            }
            failed(message, f.kind)
        }
    }
}

/// The core event for an agent's reply to `key`/`attempt`.
pub fn reply_event(key: TaskKey, attempt: u32, meaning: ReplyMeaning) -> Event {
    match meaning {
        ReplyMeaning::Output(output) => Event::CallSucceeded {
            task: key,
            attempt,
            output,
        },
        ReplyMeaning::Failed(failure) => Event::CallFailed {
            task: key,
            attempt,
            failure,
        },
        ReplyMeaning::Artifact(name) => Event::CallFailed {
            task: key,
            attempt,
            failure: Failure {
                class: FailureClass::Failed,
                message: format!("artifact '{name}' could not be loaded"),
                kind: None,
            },
        },
    }
}

/// A final or status reply: a JSON-RPC response carrying `reply`.
pub fn response(id: &Value, reply: AgentReply) -> Vec<u8> {
    let id: RequestId =
        serde_json::from_value(id.clone()).unwrap_or(RequestId::String(String::new()));
    encode(&Response::result(id, reply))
}

/// A JSON-RPC error response (`id` null when the request's could not be read).
pub fn error_response(id: Option<RequestId>, error: ErrorObject) -> Vec<u8> {
    encode(&Response::error(id, error))
}

/// The bytes of a response.
pub fn encode(response: &Response) -> Vec<u8> {
    serde_json::to_vec(response)
        .expect("a JSON-RPC response encodes: its maps have string keys, its values are JSON")
}

/// A Task in `state` with these parts in its status message.
pub fn task(id: &str, context_id: &str, state: TaskState, parts: Vec<Part>) -> AgentReply {
    let mut message = Message::new(format!("{id}-{}", state_name(state)), Role::Agent, parts);
    message.task_id = Some(id.to_string());
    message.context_id = Some(context_id.to_string());
    AgentReply::Task(Task {
        id: id.to_string(),
        context_id: context_id.to_string(),
        status: TaskStatus {
            state,
            message: Some(message),
            timestamp: None,
        },
        artifacts: None,
        metadata: None,
    })
}

fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        _ => "status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use messages::jsonrpc::ErrorObject;
    use messages::payload::wrap;
    use messages::workflow::WorkflowNodeResult;

    fn reply_bytes(task: AgentReply) -> Vec<u8> {
        response(&json!("x"), task)
    }

    #[test]
    fn replies_become_events() {
        let ok = WorkflowNodeResult::success(json!({"n": 1}));
        let bytes = reply_bytes(task(
            "t",
            "c",
            TaskState::Completed,
            vec![Part::data_part(&ok)],
        ));
        assert_eq!(
            interpret_reply(&bytes),
            Some(ReplyMeaning::Output(json!({"n": 1})))
        );

        let mut bad = WorkflowNodeResult::failure("nope");
        bad.error_kind = Some("fatal".into());
        bad.validation_errors = Some(vec!["/a: missing".into()]);
        let bytes = reply_bytes(task(
            "t",
            "c",
            TaskState::Failed,
            vec![Part::data_part(&bad)],
        ));
        match interpret_reply(&bytes) {
            Some(ReplyMeaning::Failed(f)) => {
                assert_eq!(f.kind.as_deref(), Some("fatal"));
                assert!(f.message.contains("nope") && f.message.contains("/a: missing"));
            }
            other => panic!("{other:?}"),
        }
        // A plain agent's completed task: the first DataPart is the output.
        let bytes = reply_bytes(task("t", "c", TaskState::Completed, vec![wrap(json!(5))]));
        assert_eq!(
            interpret_reply(&bytes),
            Some(ReplyMeaning::Output(json!(5)))
        );
    }

    #[test]
    fn garbage_and_errors_are_failures_naming_the_problem() {
        match interpret_reply(b"not json") {
            Some(ReplyMeaning::Failed(f)) => assert!(f.message.contains("not a JSON-RPC response")),
            other => panic!("{other:?}"),
        }
        let err = serde_json::to_vec(&Response::error(
            None,
            ErrorObject::new(-32602, "bad params"),
        ))
        .unwrap();
        match interpret_reply(&err) {
            Some(ReplyMeaning::Failed(f)) => {
                assert!(f.message.contains("-32602") && f.message.contains("bad params"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn request_input_prefers_data_then_files_then_text() {
        let m = Message::new(
            "m",
            Role::User,
            vec![Part::text("hello"), wrap(json!({"a": 1}))],
        );
        assert_eq!(
            request_input(&m, "b"),
            Ok(InputSource::Inline(json!({"a": 1})))
        );
        let m = Message::new(
            "m",
            Role::User,
            vec![Part::file_uri("nats-object://b/x", None, None)],
        );
        assert_eq!(
            request_input(&m, "d"),
            Ok(InputSource::Object("b".into(), "x".into()))
        );
        let m = Message::new("m", Role::User, vec![Part::text("hello")]);
        assert_eq!(
            request_input(&m, "d"),
            Ok(InputSource::Inline(json!({"text": "hello"})))
        );
    }
}
