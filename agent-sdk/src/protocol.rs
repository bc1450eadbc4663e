//! The sans-IO half of serving: decoding a request message into a [`Decoded`] value and
//! building the reply (see `docs/protocol.md`). Nothing here touches the network, so every
//! malformed input is a value, never a panic.

use async_nats::HeaderMap;
use messages::call_proof;
use messages::headers::{MSG_ID, REPLY_TO, STATUS_TO, TRACEPARENT, TRACESTATE};
use messages::jsonrpc::{codes, Method};
use messages::payload::{artifact_part, is_wrapped, unwrap_data, wrap};
use messages::{
    AgentReply, DataPartType, ErrorObject, JsonObject, Message, Part, Request, RequestId, Response,
    Role, Task, TaskState, TaskStatus, TaskStatusUpdateEvent, WorkflowNodeRequest,
    WorkflowNodeResult,
};
use serde_json::{json, Map, Value};

use crate::handler::WorkflowCallInfo;

/// The error kind of results for input that violates the input schema.
pub const KIND_INPUT_VALIDATION: &str = "input_validation";
/// The error kind of results for output that violates the output schema.
pub const KIND_OUTPUT_VALIDATION: &str = "output_validation";
/// The error kind of results of cancelled calls.
pub const KIND_CANCELED: &str = "canceled";

/// Where the input of a call is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum InputSource {
    /// Inline (already unwrapped).
    Inline(Value),
    /// In the object store; `wrapped` when the stored JSON is `{"value": ...}`.
    Artifact { uri: String, wrapped: bool },
    /// The request's input part cannot be used; the message says why.
    Unsupported(String),
}

/// A decoded `message/send`.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) id: RequestId,
    pub(crate) reply_to: Option<String>,
    pub(crate) status_to: Option<String>,
    pub(crate) headers: HeaderMap,
    /// The request's `Mesh-Call-Token`: the call's replies and status updates are proven
    /// with it (see [`messages::call_proof`]).
    pub(crate) token: Option<String>,
    pub(crate) task_id: String,
    pub(crate) context_id: String,
    pub(crate) message_id: String,
    /// The `workflow_node_request`, when a workflow is calling.
    pub(crate) node_request: Option<WorkflowNodeRequest>,
    pub(crate) workflow: Option<WorkflowCallInfo>,
    pub(crate) instruction: Option<String>,
    pub(crate) input: InputSource,
    /// The words the caller used for the node request (`structured_invocation_request`
    /// is the reference's): the result is sent in the same words.
    pub(crate) dialect: messages::workflow::Dialect,
}

/// What a request message turned out to be.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// A `message/send` to run.
    Send(Box<Call>),
    /// A `tasks/cancel` of `task_id`.
    Cancel {
        id: RequestId,
        task_id: String,
        reply_to: Option<String>,
    },
    /// A `tasks/get` of `task_id`.
    Get {
        id: RequestId,
        task_id: String,
        reply_to: Option<String>,
    },
    /// Unusable: answer `response` (when there is somewhere to answer).
    Reject {
        reply_to: Option<String>,
        response: Box<Response>,
    },
}

/// The reply subject: the `Mesh-Reply-To` header when present, else the NATS reply.
pub(crate) fn reply_subject(headers: Option<&HeaderMap>, reply: Option<&str>) -> Option<String> {
    headers
        .and_then(|h| h.get(REPLY_TO))
        .map(|v| v.as_str().trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| reply.map(str::to_owned))
}

/// Checks where a request asks to be answered and the mesh headers it carries before
/// anything is decoded (see [`messages::subjects::AnswerTo::screen`] and
/// [`messages::inbound::check_headers`]): on a refusal, its text and where it may be
/// answered (the NATS reply, when that passes), nothing else being published.
pub(crate) fn screen<'a>(
    ns: &str,
    headers: Option<&'a HeaderMap>,
    reply: Option<&'a str>,
) -> Result<(), (String, Option<&'a str>)> {
    let get = |name: &'static str| Some(headers?.get(name)?.as_str());
    let asked = messages::subjects::AnswerTo {
        nats_reply: reply,
        reply_to: get(REPLY_TO),
        status_to: get(STATUS_TO),
    };
    asked
        .screen(ns)
        .map_err(|(refusal, to)| (refusal.to_string(), to))?;
    messages::inbound::check_headers(get).map_err(|e| (e.to_string(), reply))
}

/// Decodes one message from the request or cancel subject.
pub(crate) fn decode(payload: &[u8], headers: Option<&HeaderMap>, reply: Option<&str>) -> Decoded {
    let reply_to = reply_subject(headers, reply);
    let request = match Request::from_slice(payload) {
        Ok(r) => r,
        Err(response) => return Decoded::Reject { reply_to, response },
    };
    let params = match request.method {
        Method::TasksCancel(p) => {
            return Decoded::Cancel {
                id: request.id,
                task_id: p.id,
                reply_to,
            }
        }
        Method::TasksGet(p) => {
            return Decoded::Get {
                id: request.id,
                task_id: p.id,
                reply_to,
            }
        }
        Method::MessageSend(p) => p,
    };
    let token = match headers.and_then(|h| h.get(call_proof::CALL_TOKEN)) {
        None => None,
        Some(t) => match call_proof::check_token(t.as_str()) {
            Ok(()) => Some(t.as_str().to_owned()),
            Err(e) => {
                return Decoded::Reject {
                    reply_to,
                    response: Box::new(Response::error(
                        Some(request.id),
                        ErrorObject::new(codes::INVALID_PARAMS, e.to_string()),
                    )),
                }
            }
        },
    };
    let message = params.message;
    let node_request = match message.find_data::<WorkflowNodeRequest>() {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            return Decoded::Reject {
                reply_to,
                response: Box::new(Response::error(
                    Some(request.id),
                    ErrorObject::new(
                        codes::INVALID_PARAMS,
                        format!("malformed {}: {e}", WorkflowNodeRequest::TYPE),
                    ),
                )),
            }
        }
    };
    let meta = params.metadata.unwrap_or_default();
    let meta_str = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_owned);
    let id_text = request.id.to_string();
    let task_id = match &node_request {
        Some(r) => r
            .sub_task_id
            .clone()
            .or_else(|| meta_str("sub_task_id"))
            .or_else(|| message.task_id.clone())
            .unwrap_or_else(|| id_text.clone()),
        None => message.task_id.clone().unwrap_or_else(|| id_text.clone()),
    };
    let workflow = node_request.as_ref().map(|r| WorkflowCallInfo {
        workflow_name: r.workflow_name.clone(),
        node_id: r.node_id.clone(),
        execution_id: r
            .execution_id
            .clone()
            .or_else(|| meta_str("execution_id"))
            .or_else(|| message.context_id.clone())
            .unwrap_or_default(),
        attempt: r.attempt.or_else(|| {
            task_id
                .rsplit_once('_')
                .and_then(|(_, last)| last.split('-').next()?.parse().ok())
        }),
        sub_task_id: task_id.clone(),
        map_index: r.map_index,
        loop_iteration: r.loop_iteration,
    });
    let context_id = message
        .context_id
        .clone()
        .or_else(|| workflow.as_ref().map(|w| w.execution_id.clone()))
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| task_id.clone());
    let dialect = message
        .parts
        .iter()
        .filter_map(Part::as_data)
        .filter_map(|d| d.get("type").and_then(Value::as_str))
        .find(|t| WorkflowNodeRequest::is_type(t))
        .map_or(Default::default(), messages::workflow::Dialect::of_type);
    let text = message.text();
    let input = find_input(&message.parts);
    let (input, instruction) = match input {
        Some(source) => (source, Some(text).filter(|t| !t.is_empty())),
        None if node_request.is_some() => (
            InputSource::Inline(Value::Object(Map::new())),
            Some(text).filter(|t| !t.is_empty()),
        ),
        None => (InputSource::Inline(json!({ "text": text })), None),
    };
    Decoded::Send(Box::new(Call {
        id: request.id,
        reply_to,
        status_to: headers
            .and_then(|h| h.get(STATUS_TO))
            .map(|v| v.as_str().to_owned())
            .filter(|s| !s.is_empty()),
        headers: headers.cloned().unwrap_or_default(),
        token,
        task_id,
        context_id,
        message_id: message.message_id.clone(),
        node_request,
        workflow,
        instruction,
        input,
        dialect,
    }))
}

/// The first DataPart that is not the `workflow_node_request`, else the first FilePart.
fn find_input(parts: &[Part]) -> Option<InputSource> {
    let data = parts.iter().find_map(|p| match p {
        Part::Data { data, metadata }
            if !data
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(WorkflowNodeRequest::is_type) =>
        {
            Some(InputSource::Inline(unwrap_data(data, metadata.as_ref())))
        }
        _ => None,
    });
    data.or_else(|| {
        parts.iter().find_map(|p| match p {
            Part::File { file, metadata } => Some(match &file.uri {
                Some(uri) => InputSource::Artifact {
                    uri: uri.clone(),
                    wrapped: is_wrapped(metadata.as_ref()),
                },
                None => InputSource::Unsupported(
                    "inline file bytes are not supported; send a DataPart or a \
                     nats-object:// reference"
                        .into(),
                ),
            }),
            _ => None,
        })
    })
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The output: inline, or stored in the object store.
    Success(Output),
    /// The handler failed, or the input could not be read or checked: answered as a
    /// failed task; `kind` becomes the result's `error_kind`.
    Failure {
        message: String,
        kind: Option<String>,
        validation_errors: Vec<String>,
    },
    /// Cancelled by a `tasks/cancel`.
    Canceled,
}

/// An output as it travels back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Output {
    Inline(Value),
    /// Stored as `name` in `bucket`.
    Artifact {
        bucket: String,
        name: String,
    },
}

impl Outcome {
    /// A failure without validation errors.
    pub(crate) fn failure(message: impl Into<String>, kind: Option<String>) -> Self {
        Outcome::Failure {
            message: message.into(),
            kind,
            validation_errors: Vec::new(),
        }
    }
}

/// The JSON-RPC response answering `call` with `outcome`.
pub(crate) fn reply(call: &Call, outcome: &Outcome) -> Response {
    let (state, parts) = match &call.workflow {
        Some(w) => {
            let (state, parts) = workflow_parts(w, outcome);
            let parts = parts
                .into_iter()
                .map(|p| call.dialect.rewrite_part(p))
                .collect();
            (state, parts)
        }
        None => plain_parts(outcome),
    };
    let mut message = Message::new(format!("{}-reply", call.task_id), Role::Agent, parts);
    message.task_id = Some(call.task_id.clone());
    message.context_id = Some(call.context_id.clone());
    let mut status = TaskStatus::new(state);
    status.message = Some(message);
    let task = Task {
        id: call.task_id.clone(),
        context_id: call.context_id.clone(),
        status,
        artifacts: None,
        metadata: None,
    };
    Response::result(call.id.clone(), AgentReply::Task(task))
}

fn workflow_parts(w: &WorkflowCallInfo, outcome: &Outcome) -> (TaskState, Vec<Part>) {
    let retry_count = w.attempt.unwrap_or(1).saturating_sub(1);
    let (state, mut result, text) = match outcome {
        Outcome::Success(Output::Inline(v)) => (
            TaskState::Completed,
            WorkflowNodeResult::success(v.clone()),
            None,
        ),
        Outcome::Success(Output::Artifact { name, .. }) => {
            let mut r = WorkflowNodeResult::success(Value::Null);
            r.output = None;
            r.artifact_name = Some(name.clone());
            (TaskState::Completed, r, None)
        }
        Outcome::Failure {
            message,
            kind,
            validation_errors,
        } => {
            let mut r = WorkflowNodeResult::failure(message.clone());
            r.error_kind = kind.clone();
            r.validation_errors = Some(validation_errors.clone()).filter(|v| !v.is_empty());
            (TaskState::Failed, r, Some(message.clone()))
        }
        Outcome::Canceled => {
            let mut r = WorkflowNodeResult::failure("canceled");
            r.error_kind = Some(KIND_CANCELED.into());
            (TaskState::Canceled, r, Some("canceled".to_owned()))
        }
    };
    result.retry_count = retry_count;
    let mut parts = vec![Part::data_part(&result)];
    parts.extend(text.map(Part::text));
    (state, parts)
}

fn plain_parts(outcome: &Outcome) -> (TaskState, Vec<Part>) {
    match outcome {
        Outcome::Success(Output::Inline(v)) => (TaskState::Completed, vec![wrap(v.clone())]),
        Outcome::Success(Output::Artifact { bucket, name }) => {
            (TaskState::Completed, vec![artifact_part(bucket, name)])
        }
        Outcome::Failure {
            message,
            kind,
            validation_errors,
        } => {
            let mut data = JsonObject::new();
            data.insert("error_message".into(), Value::String(message.clone()));
            if let Some(kind) = kind {
                data.insert("error_kind".into(), Value::String(kind.clone()));
            }
            if !validation_errors.is_empty() {
                data.insert("validation_errors".into(), json!(validation_errors));
            }
            (
                TaskState::Failed,
                vec![Part::text(message.clone()), Part::data(data)],
            )
        }
        Outcome::Canceled => (TaskState::Canceled, vec![Part::text("canceled")]),
    }
}

/// The answer to a `tasks/get` of `task_id`: the task as this agent knows it (`submitted`
/// or `working` while it runs, its final state and parts once it ended), or "task not
/// found" when it knows nothing of it.
pub(crate) fn get_answer(id: RequestId, task_id: &str, known: Option<&Known>) -> Response {
    let (state, parts) = match known {
        None => {
            return Response::error(
                Some(id),
                ErrorObject::new(
                    codes::TASK_NOT_FOUND,
                    format!("task {task_id} is neither running here nor recently ended"),
                ),
            )
        }
        Some(Known::Running { started: false }) => (TaskState::Submitted, Vec::new()),
        Some(Known::Running { started: true }) => (TaskState::Working, Vec::new()),
        Some(Known::Ended(outcome)) => plain_parts(outcome),
    };
    let mut status = TaskStatus::new(state);
    if !parts.is_empty() {
        let mut message = Message::new(format!("{task_id}-state"), Role::Agent, parts);
        message.task_id = Some(task_id.to_owned());
        status.message = Some(message);
    }
    let task = Task {
        id: task_id.to_owned(),
        context_id: task_id.to_owned(),
        status,
        artifacts: None,
        metadata: None,
    };
    Response::result(id, AgentReply::Task(task))
}

/// What an agent knows of a task, for `tasks/get`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Known {
    /// It runs here; `started` once its handler has a permit.
    Running { started: bool },
    /// It ended here recently, with this outcome.
    Ended(Outcome),
}

/// A status update for `Mesh-Status-To`: `working` when a call starts, and `submitted` or
/// `working` to a copy of a running call.
pub(crate) fn status_update(call: &Call, state: TaskState) -> Response {
    let update = TaskStatusUpdateEvent {
        task_id: call.task_id.clone(),
        context_id: call.context_id.clone(),
        status: TaskStatus::new(state),
        is_final: false,
        metadata: None,
    };
    Response::result(call.id.clone(), AgentReply::StatusUpdate(update))
}

impl Call {
    /// What tells copies of this call apart from other calls (see `dedup`): the task id,
    /// and the call token when it has one, so that a request with the same task id but
    /// not the token (a forger that learned the id) is another call, never a copy.
    pub(crate) fn dedup_key(&self) -> String {
        dedup_key(&self.task_id, self.token.as_deref())
    }

    /// Headers of the final reply: `Nats-Msg-Id` (derived from the call token when there is
    /// one, else the task id, so an event stream stores one reply per call) and the
    /// request's trace context. The `Mesh-Call-Mac` is added when the bytes are known.
    pub(crate) fn reply_headers(&self) -> HeaderMap {
        let msg_id = match &self.token {
            Some(token) => call_proof::reply_msg_id(token),
            None => self.task_id.clone(),
        };
        reply_headers(&msg_id, Some(&self.headers))
    }
}

/// The de-duplication key of a call with `task_id` and `token` (see [`Call::dedup_key`]).
pub(crate) fn dedup_key(task_id: &str, token: Option<&str>) -> String {
    match token {
        Some(token) => format!("{task_id}{KEY_SEPARATOR}{token}"),
        None => task_id.to_owned(),
    }
}

/// The task id and token of a [`dedup_key`].
pub(crate) fn split_dedup_key(key: &str) -> (&str, Option<&str>) {
    match key.split_once(KEY_SEPARATOR) {
        Some((task_id, token)) => (task_id, Some(token)),
        None => (key, None),
    }
}

/// Between a task id and a token in a [`dedup_key`]: a control character, which neither
/// a token (hex) nor a task id on the mesh (a subject token) holds.
const KEY_SEPARATOR: char = '\u{1f}';

/// Headers of a reply: `Nats-Msg-Id` (when not empty) and the request's trace context.
pub(crate) fn reply_headers(msg_id: &str, request: Option<&HeaderMap>) -> HeaderMap {
    let mut out = HeaderMap::new();
    if !msg_id.is_empty() {
        out.insert(MSG_ID, msg_id);
    }
    if let Some(request) = request {
        pass_trace_context(request, &mut out);
    }
    out
}

/// Copies the W3C trace context of `from` into `to`, each header only if it follows its
/// grammar (see [`messages::inbound::traceparent`]): a malformed one is dropped, never
/// passed on.
pub(crate) fn pass_trace_context(from: &HeaderMap, to: &mut HeaderMap) {
    let valid = [
        (
            TRACEPARENT,
            messages::inbound::traceparent as fn(&str) -> Option<&str>,
        ),
        (TRACESTATE, messages::inbound::tracestate),
    ];
    for (name, valid) in valid {
        if let Some(v) = from.get(name).and_then(|v| valid(v.as_str())) {
            to.insert(name, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(parts: Value, extra: Value) -> Vec<u8> {
        let mut body = json!({"jsonrpc": "2.0", "id": "e1_n_0_2", "method": "message/send",
            "params": {"message": {"kind": "message", "messageId": "e1_n_0_2", "role": "user",
                "taskId": "e1_n_0_2", "contextId": "e1", "parts": parts}}});
        if let Value::Object(extra) = extra {
            body["params"].as_object_mut().unwrap().extend(extra);
        }
        serde_json::to_vec(&body).unwrap()
    }

    fn call(d: Decoded) -> Call {
        match d {
            Decoded::Send(c) => *c,
            other => panic!("not a send: {other:?}"),
        }
    }

    #[test]
    fn a_workflow_call_is_decoded() {
        let bytes = send(
            json!([
                {"kind": "data", "data": {"type": "workflow_node_request", "workflow_name": "Wf",
                    "node_id": "n", "input_schema": null, "output_schema": null,
                    "suggested_output_filename": null}},
                {"kind": "text", "text": "do it"},
                {"kind": "data", "data": {"value": 7}, "metadata": {"mesh_wrapped": true}}
            ]),
            json!({}),
        );
        let c = call(decode(&bytes, None, Some("_INBOX.x")));
        assert_eq!(c.reply_to.as_deref(), Some("_INBOX.x"));
        assert_eq!(c.input, InputSource::Inline(json!(7)));
        assert_eq!(c.instruction.as_deref(), Some("do it"));
        let w = c.workflow.unwrap();
        assert_eq!(
            (
                w.workflow_name.as_str(),
                w.node_id.as_str(),
                w.execution_id.as_str()
            ),
            ("Wf", "n", "e1")
        );
        assert_eq!((w.sub_task_id.as_str(), w.attempt), ("e1_n_0_2", Some(2)));
        assert_eq!(w.slot_key(), "e1_n_0");
    }

    #[test]
    fn plain_calls_fall_back_to_files_then_text() {
        let c = call(decode(
            &send(
                json!([{"kind": "file", "file": {"uri": "nats-object://b/x"}}]),
                json!({}),
            ),
            None,
            None,
        ));
        assert!(c.workflow.is_none());
        assert_eq!(
            c.input,
            InputSource::Artifact {
                uri: "nats-object://b/x".into(),
                wrapped: false
            }
        );
        let c = call(decode(
            &send(json!([{"kind": "text", "text": "hi"}]), json!({})),
            None,
            None,
        ));
        assert_eq!(c.input, InputSource::Inline(json!({"text": "hi"})));
        assert_eq!(c.instruction, None);
    }

    #[test]
    fn mesh_reply_to_wins_over_the_nats_reply() {
        let mut h = HeaderMap::new();
        h.insert(REPLY_TO, "mesh.a2a.v1.agent.response.Wf.t");
        let c = call(decode(
            &send(json!([]), json!({})),
            Some(&h),
            Some("_INBOX.y"),
        ));
        assert_eq!(
            c.reply_to.as_deref(),
            Some("mesh.a2a.v1.agent.response.Wf.t")
        );
    }

    #[test]
    fn garbage_and_bad_workflow_parts_are_rejected() {
        for bytes in [
            b"not json".to_vec(),
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"nope\"}".to_vec(),
            send(
                json!([{"kind": "data", "data": {"type": "workflow_node_request"}}]),
                json!({}),
            ),
        ] {
            assert!(matches!(
                decode(&bytes, None, Some("r")),
                Decoded::Reject { .. }
            ));
        }
    }

    #[test]
    fn cancels_are_recognised() {
        let bytes = br#"{"jsonrpc":"2.0","id":"c","method":"tasks/cancel","params":{"id":"t1"}}"#;
        assert!(matches!(
            decode(bytes, None, None),
            Decoded::Cancel { task_id, .. } if task_id == "t1"
        ));
    }

    #[test]
    fn gets_are_recognised_and_answered_from_what_is_known() {
        let bytes = br#"{"jsonrpc":"2.0","id":"g","method":"tasks/get","params":{"id":"t1"}}"#;
        let Decoded::Get { id, task_id, .. } = decode(bytes, None, None) else {
            panic!("not a get");
        };
        assert_eq!(task_id, "t1");
        let v = |known: Option<&Known>| {
            serde_json::to_value(get_answer(id.clone(), "t1", known)).unwrap()
        };
        assert_eq!(v(None)["error"]["code"], codes::TASK_NOT_FOUND);
        let running = v(Some(&Known::Running { started: true }));
        assert_eq!(running["result"]["id"], "t1");
        assert_eq!(running["result"]["status"]["state"], "working");
        let ended = v(Some(&Known::Ended(Outcome::Success(Output::Inline(
            json!(
                {"a": 1}
            ),
        )))));
        assert_eq!(ended["result"]["status"]["state"], "completed");
        let failed = v(Some(&Known::Ended(Outcome::failure("bad", None))));
        assert_eq!(failed["result"]["status"]["state"], "failed");
        assert!(failed.to_string().contains("bad"), "{failed}");
    }

    #[test]
    fn workflow_replies_carry_the_result_first() {
        let bytes = send(
            json!([{"kind": "data", "data": {"type": "workflow_node_request",
                "workflow_name": "Wf", "node_id": "n"}}, {"kind": "data", "data": {"a": 1}}]),
            json!({}),
        );
        let c = call(decode(&bytes, None, Some("r")));
        let r = reply(
            &c,
            &Outcome::Failure {
                message: "bad".into(),
                kind: Some("transient".into()),
                validation_errors: vec![],
            },
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["result"]["status"]["state"], "failed");
        let result = &v["result"]["status"]["message"]["parts"][0]["data"];
        assert_eq!(result["type"], "workflow_node_result");
        assert_eq!(result["status"], "failure");
        assert_eq!(result["error_kind"], "transient");
        assert_eq!(result["retry_count"], 1);
    }
}
