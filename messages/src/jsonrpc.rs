//! The JSON-RPC 2.0 envelope of A2A calls: [`Request`] (`message/send`, `tasks/cancel`,
//! `tasks/get`),
//! [`Response`] (a result or an [`ErrorObject`]) and the A2A error [`codes`].
//!
//! [`Request::from_slice`] turns raw bytes into a typed request, or into the error response
//! to send back (parse error, invalid request, unknown method, invalid params), so a
//! server never has to inspect malformed input twice.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::a2a::{AgentReply, JsonObject, Message};

/// The only JSON-RPC version: `"2.0"`.
pub const JSONRPC_VERSION: &str = "2.0";

/// The method name of [`Method::MessageSend`].
pub const METHOD_MESSAGE_SEND: &str = "message/send";
/// `message/stream`: on NATS the same request as `message/send` (read as
/// [`Method::MessageSend`]); the stream is the status updates sent to `Mesh-Status-To`,
/// ended by the final reply on the reply subject (`docs/protocol.md`, "A2A over NATS").
pub const METHOD_MESSAGE_STREAM: &str = "message/stream";
/// `tasks/resubscribe`: not served on NATS, where a stream is rejoined by resending its
/// request; answered with [`codes::UNSUPPORTED_OPERATION`] saying so.
pub const METHOD_TASKS_RESUBSCRIBE: &str = "tasks/resubscribe";
/// The method name of [`Method::TasksCancel`].
pub const METHOD_TASKS_CANCEL: &str = "tasks/cancel";
/// The method name of [`Method::TasksGet`].
pub const METHOD_TASKS_GET: &str = "tasks/get";

/// JSON-RPC and A2A error codes (identical in A2A 0.3 and 1.0 up to -32007).
pub mod codes {
    /// The request was not valid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON was not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params do not fit the method.
    pub const INVALID_PARAMS: i64 = -32602;
    /// An internal error of the server.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No task with that id.
    pub const TASK_NOT_FOUND: i64 = -32001;
    /// The task exists but can no longer be cancelled.
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    /// Push notifications are not supported.
    pub const PUSH_NOTIFICATION_NOT_SUPPORTED: i64 = -32003;
    /// The operation is not supported.
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    /// The content type is not supported.
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    /// An agent answered with something that is not a valid A2A response.
    pub const INVALID_AGENT_RESPONSE: i64 = -32006;
    /// The authenticated extended card is not configured.
    pub const AUTHENTICATED_EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
    /// Ours: the requester may not do this (a cancel of someone else's run, unsigned or
    /// signed by a key that does not own it); the message says who may.
    pub const NOT_PERMITTED: i64 = -32010;
    /// Ours: the run is not in a state that takes this now (it ended, it is stopping, it
    /// keeps as many signals as it may); the message says which.
    pub const CONFLICT: i64 = -32011;
}

/// A request id: a string or an integer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id.
    Number(i64),
    /// A string id (ours are always strings).
    String(String),
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.to_owned())
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId::String(s)
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => f.write_str(s),
        }
    }
}

/// A JSON-RPC request: `{jsonrpc:"2.0", id, method, params}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The request id, echoed by the response.
    pub id: RequestId,
    /// The method and its params.
    pub method: Method,
}

/// The methods we serve, with their params.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    /// `message/send`.
    MessageSend(MessageSendParams),
    /// `tasks/cancel`.
    TasksCancel(TaskIdParams),
    /// `tasks/get`: a task's current state, for a caller that lost track of it.
    TasksGet(TaskQueryParams),
}

impl Method {
    /// The method name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Method::MessageSend(_) => METHOD_MESSAGE_SEND,
            Method::TasksCancel(_) => METHOD_TASKS_CANCEL,
            Method::TasksGet(_) => METHOD_TASKS_GET,
        }
    }
}

/// Params of `message/send`: `{message, metadata?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageSendParams {
    /// The A2A message: its parts carry the input (and, from a workflow node, the
    /// `workflow_node_request` first).
    pub message: Message,
    /// Free-form metadata about the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Params of `tasks/cancel`: `{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskIdParams {
    /// The task to cancel.
    pub id: String,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Params of `tasks/get`: `{id, historyLength?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskQueryParams {
    /// The task asked about.
    pub id: String,
    /// How many messages of the task's history to return; servers without a history
    /// (ours) ignore it.
    #[serde(
        default,
        rename = "historyLength",
        skip_serializing_if = "Option::is_none"
    )]
    pub history_length: Option<u32>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

impl Request {
    /// A `message/send` request.
    pub fn message_send(id: impl Into<RequestId>, message: Message) -> Self {
        Request {
            id: id.into(),
            method: Method::MessageSend(MessageSendParams {
                message,
                metadata: None,
            }),
        }
    }

    /// A `tasks/cancel` request for task `task_id`.
    pub fn tasks_cancel(id: impl Into<RequestId>, task_id: impl Into<String>) -> Self {
        Request {
            id: id.into(),
            method: Method::TasksCancel(TaskIdParams {
                id: task_id.into(),
                metadata: None,
            }),
        }
    }

    /// A `tasks/get` request for task `task_id`.
    pub fn tasks_get(id: impl Into<RequestId>, task_id: impl Into<String>) -> Self {
        Request {
            id: id.into(),
            method: Method::TasksGet(TaskQueryParams {
                id: task_id.into(),
                history_length: None,
                metadata: None,
            }),
        }
    }

    /// Parses a request from bytes; on failure, the error response to send back (its `id`
    /// is the request's when that much could be read, else null).
    pub fn from_slice(bytes: &[u8]) -> Result<Request, Box<Response>> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| error_response(None, codes::PARSE_ERROR, json_error_text(&e)))?;
        Request::from_value(value)
    }

    /// Like [`Request::from_slice`], from an already parsed JSON value.
    pub fn from_value(value: Value) -> Result<Request, Box<Response>> {
        // Keep the id when the envelope is otherwise broken, so the caller can correlate.
        let id = value
            .get("id")
            .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
        let raw: RawRequest = serde_json::from_value(value)
            .map_err(|e| error_response(id, codes::INVALID_REQUEST, e.to_string()))?;
        if raw.jsonrpc != JSONRPC_VERSION {
            return Err(error_response(
                Some(raw.id),
                codes::INVALID_REQUEST,
                format!("jsonrpc must be \"2.0\", not {:?}", raw.jsonrpc),
            ));
        }
        let method = match raw.method.as_str() {
            METHOD_MESSAGE_SEND | METHOD_MESSAGE_STREAM => {
                serde_json::from_value(raw.params).map(Method::MessageSend)
            }
            METHOD_TASKS_RESUBSCRIBE => {
                return Err(error_response(
                    Some(raw.id),
                    codes::UNSUPPORTED_OPERATION,
                    "tasks/resubscribe is not served on NATS: rejoin a task's stream by \
                     resending its request (same task id, a new Mesh-Status-To)"
                        .into(),
                ))
            }
            METHOD_TASKS_CANCEL => serde_json::from_value(raw.params).map(Method::TasksCancel),
            METHOD_TASKS_GET => serde_json::from_value(raw.params).map(Method::TasksGet),
            other => {
                return Err(error_response(
                    Some(raw.id),
                    codes::METHOD_NOT_FOUND,
                    format!("method not found: {other}"),
                ))
            }
        };
        match method {
            Ok(method) => Ok(Request { id: raw.id, method }),
            Err(e) => Err(error_response(
                Some(raw.id),
                codes::INVALID_PARAMS,
                e.to_string(),
            )),
        }
    }
}

/// A JSON error as a reader should see it: serde_json's own message, which says
/// "recursion limit exceeded" for a document nested deeper than it reads (128 levels).
pub fn json_error_text(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.starts_with("recursion limit exceeded") {
        format!("the JSON nests deeper than 128 levels ({text})")
    } else {
        text
    }
}

fn error_response(id: Option<RequestId>, code: i64, message: String) -> Box<Response> {
    Box::new(Response::error(id, ErrorObject::new(code, message)))
}

/// The envelope as read, before the method is looked at.
#[derive(Deserialize)]
struct RawRequest {
    jsonrpc: String,
    id: RequestId,
    method: String,
    #[serde(default)]
    params: Value,
}

#[derive(Serialize)]
struct RawRequestOut<'a, P: Serialize> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'static str,
    params: &'a P,
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let name = self.method.name();
        match &self.method {
            Method::MessageSend(p) => RawRequestOut {
                jsonrpc: JSONRPC_VERSION,
                id: &self.id,
                method: name,
                params: p,
            }
            .serialize(s),
            Method::TasksCancel(p) => RawRequestOut {
                jsonrpc: JSONRPC_VERSION,
                id: &self.id,
                method: name,
                params: p,
            }
            .serialize(s),
            Method::TasksGet(p) => RawRequestOut {
                jsonrpc: JSONRPC_VERSION,
                id: &self.id,
                method: name,
                params: p,
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Request {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Request::from_value(value).map_err(|r| match r.outcome {
            Outcome::Error(e) => D::Error::custom(e.message),
            Outcome::Result(_) => D::Error::custom("invalid request"),
        })
    }
}

/// A JSON-RPC error: `{code, message, data?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// One of [`codes`] (or another JSON-RPC code).
    pub code: i64,
    /// A human-readable message.
    pub message: String,
    /// Free-form detail for programs (JSON-RPC's `data`); the mesh never sets it and
    /// ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// A JSON-RPC response: `{jsonrpc:"2.0", id, result}` or `{jsonrpc:"2.0", id, error}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request's id; null when the request could not be read.
    pub id: Option<RequestId>,
    /// The result or the error.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// The `result` or `error` member of a [`Response`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// `result`: a task (the usual answer), a message, or a status update.
    Result(Box<AgentReply>),
    /// `error`: the request itself could not be served (unreadable, unknown method, no
    /// such task); a task that failed is a `result` whose state says so.
    Error(ErrorObject),
}

impl Response {
    /// A successful response.
    pub fn result(id: RequestId, result: AgentReply) -> Self {
        Response {
            jsonrpc: JSONRPC_VERSION.to_owned(),
            id: Some(id),
            outcome: Outcome::Result(Box::new(result)),
        }
    }

    /// An error response.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Response {
            jsonrpc: JSONRPC_VERSION.to_owned(),
            id,
            outcome: Outcome::Error(error),
        }
    }
}
