//! The JSON-RPC envelope of the A2A door: a request read from hostile bytes into one of
//! the operations served, in either protocol version, or into the error to answer.
//!
//! The version is decided by the method's name (`message/send` is 0.3, `SendMessage` is
//! 1.0), not by the `A2A-Version` header: the official 1.x SDK sends `A2A-Version: 1.0`
//! on every request, its 0.3 compatibility transport included. A header naming a version
//! we do not serve is refused (-32009), as 1.0 asks.

use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};

use messages::jsonrpc::codes;

use super::v1;

/// 1.0's code for a version the server does not speak.
pub(super) const VERSION_NOT_SUPPORTED: i64 = -32009;

/// Which A2A protocol a request speaks (and its answer is written in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    /// A2A 0.3: `message/send`, `kind` discriminators, lower-case enums.
    V03,
    /// A2A 1.0: `SendMessage`, parts told apart by member, `TASK_STATE_*`.
    V10,
}

/// An operation asked for, its params already in the 0.3 shape.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Op {
    /// `message/send` / `SendMessage`: `{message, configuration?, metadata?}`;
    /// `blocking` false answers as soon as the task is accepted.
    Send {
        /// The params, 0.3 shape.
        params: Value,
        /// Whether to wait for the task's end.
        blocking: bool,
        /// A push-notification config given with the message.
        push: Option<PushConfig>,
    },
    /// `message/stream` / `SendStreamingMessage`.
    Stream {
        /// The params, 0.3 shape.
        params: Value,
        /// A push-notification config given with the message.
        push: Option<PushConfig>,
    },
    /// `tasks/get` / `GetTask`.
    Get {
        /// The task id.
        id: String,
    },
    /// `tasks/cancel` / `CancelTask`.
    Cancel {
        /// The task id.
        id: String,
        /// `metadata.reason`, when given.
        reason: Option<String>,
    },
    /// `tasks/resubscribe` / `SubscribeToTask`.
    Resubscribe {
        /// The task id.
        id: String,
    },
    /// `ListTasks` (1.0 only).
    List {
        /// `pageSize` (default 50, at most 100).
        page_size: usize,
    },
    /// A push-notification config method (`tasks/pushNotificationConfig/*`, 1.0's
    /// `*TaskPushNotificationConfig*`).
    Push(PushOp),
    /// The authenticated extended card: not configured (-32007).
    ExtendedCard,
}

impl Op {
    /// Whether it starts or stops something (an operator token's right), rather than
    /// reads.
    pub(super) fn changes(&self) -> bool {
        matches!(
            self,
            Op::Send { .. } | Op::Stream { .. } | Op::Cancel { .. }
        )
    }
}

/// A push-notification config operation, its params read.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum PushOp {
    /// Set (create) a config for a task.
    Set {
        /// The task.
        task: String,
        /// The config.
        config: PushConfig,
    },
    /// One config of a task (the first, when no id is given).
    Get {
        /// The task.
        task: String,
        /// The config's id.
        id: Option<String>,
    },
    /// Every config of a task.
    List {
        /// The task.
        task: String,
    },
    /// Delete one config of a task.
    Delete {
        /// The task.
        task: String,
        /// The config's id.
        id: String,
    },
}

/// A push-notification config as a client gives it, in either version.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct PushConfig {
    /// Its id (one is made when none is given): 1 to 64 of `A-Z a-z 0-9 _ -`.
    pub(super) id: Option<String>,
    /// The webhook (plain `http://`; see `push::guard`).
    pub(super) url: String,
    /// Sent back in `X-A2A-Notification-Token`, and the key of the notification's MAC.
    pub(super) token: Option<String>,
    /// The `Authorization` scheme to send (`Bearer`), with `credentials`.
    pub(super) scheme: Option<String>,
    /// The credentials sent with `scheme`.
    pub(super) credentials: Option<String>,
}

/// One request, read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Call {
    /// The JSON-RPC id, echoed.
    pub(super) id: Value,
    /// The version it speaks.
    pub(super) version: Version,
    /// What it asks.
    pub(super) op: Op,
}

/// An answer that is an error: JSON-RPC code, message, and the HTTP status it goes with
/// (200 for errors of the call itself, as JSON-RPC over HTTP does; 4xx for errors of the
/// HTTP request: a body too large, no token).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RpcError {
    /// The JSON-RPC id (null when it could not be read).
    pub(super) id: Value,
    /// The JSON-RPC / A2A code.
    pub(super) code: i64,
    /// What is wrong.
    pub(super) message: String,
    /// The HTTP status.
    pub(super) status: StatusCode,
}

impl RpcError {
    /// An error of a call (HTTP 200).
    pub(super) fn new(id: &Value, code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            id: id.clone(),
            code,
            message: message.into(),
            status: StatusCode::OK,
        }
    }

    /// The same error answered with HTTP `status`.
    pub(super) fn with_status(mut self, status: StatusCode) -> RpcError {
        self.status = status;
        self
    }

    /// The JSON-RPC response object.
    pub(super) fn body(&self) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id,
            "error": {"code": self.code, "message": self.message}})
    }
}

/// Reads `body` (JSON, already bounded in size) into a call; `headers` for the version.
pub(super) fn read(headers: &HeaderMap, body: &[u8]) -> Result<Call, RpcError> {
    let null = Value::Null;
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        RpcError::new(
            &null,
            codes::PARSE_ERROR,
            format!(
                "the body is not JSON: {}",
                messages::jsonrpc::json_error_text(&e)
            ),
        )
    })?;
    let Value::Object(mut envelope) = value else {
        let what = if value.is_array() {
            "a batch (an array): send one request per POST"
        } else {
            "not a JSON object"
        };
        return Err(RpcError::new(
            &null,
            codes::INVALID_REQUEST,
            format!("the request is {what}"),
        ));
    };
    let id = match envelope.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        _ => {
            return Err(RpcError::new(
                &null,
                codes::INVALID_REQUEST,
                "the request needs an id (a string or a number): notifications are not served",
            ))
        }
    };
    if envelope.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(RpcError::new(
            &id,
            codes::INVALID_REQUEST,
            "jsonrpc must be \"2.0\"",
        ));
    }
    let Some(Value::String(method)) = envelope.remove("method") else {
        return Err(RpcError::new(
            &id,
            codes::INVALID_REQUEST,
            "the request needs a method (a string)",
        ));
    };
    check_version_header(headers, &id)?;
    let params = match envelope.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(RpcError::new(
                &id,
                codes::INVALID_PARAMS,
                "params must be a JSON object",
            ))
        }
    };
    let (version, op) = op_of(&method, params).map_err(|(code, m)| RpcError::new(&id, code, m))?;
    Ok(Call { id, version, op })
}

/// Refuses an `A2A-Version` header (or none) naming a version not served: 0.3 (or none)
/// and 1.0 are.
fn check_version_header(headers: &HeaderMap, id: &Value) -> Result<(), RpcError> {
    let Some(v) = headers.get("a2a-version") else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or("(not text)").trim();
    let served = v.is_empty() || ["0.3", "0.3.0", "1.0", "1.0.0"].contains(&v);
    if served {
        return Ok(());
    }
    Err(RpcError::new(
        id,
        VERSION_NOT_SUPPORTED,
        format!("A2A-Version {v:?} is not served: this server speaks 0.3 and 1.0"),
    ))
}

type Refused = (i64, String);

/// The operation `method` names, with `params` read (1.0's brought to the 0.3 shape).
fn op_of(method: &str, params: Map<String, Value>) -> Result<(Version, Op), Refused> {
    use Version::{V03, V10};
    let op = match method {
        "message/send" => (V03, send(params, V03)?),
        "SendMessage" => (V10, send(params, V10)?),
        "message/stream" => (V03, streamed(send(params, V03)?)),
        "SendStreamingMessage" => (V10, streamed(send(params, V10)?)),
        "tasks/get" => (
            V03,
            Op::Get {
                id: task_id(&params)?,
            },
        ),
        "GetTask" => (
            V10,
            Op::Get {
                id: task_id(&params)?,
            },
        ),
        "tasks/cancel" | "CancelTask" => {
            let version = if method == "CancelTask" { V10 } else { V03 };
            let reason = params
                .get("metadata")
                .and_then(|m| m.get("reason"))
                .and_then(Value::as_str)
                .map(|r| r.chars().take(300).collect());
            (
                version,
                Op::Cancel {
                    id: task_id(&params)?,
                    reason,
                },
            )
        }
        "tasks/resubscribe" => (
            V03,
            Op::Resubscribe {
                id: task_id(&params)?,
            },
        ),
        "SubscribeToTask" => (
            V10,
            Op::Resubscribe {
                id: task_id(&params)?,
            },
        ),
        "ListTasks" => (
            V10,
            Op::List {
                page_size: page_size(&params)?,
            },
        ),
        "tasks/pushNotificationConfig/set" => {
            let task = text(&params, "taskId")?.unwrap_or_default();
            let config = params
                .get("pushNotificationConfig")
                .cloned()
                .unwrap_or_default();
            let config = push_config(&config, V03)?;
            (
                V03,
                Op::Push(PushOp::Set {
                    task: checked_id(task)?,
                    config,
                }),
            )
        }
        "CreateTaskPushNotificationConfig" => {
            let task = text(&params, "taskId")?.unwrap_or_default();
            let config = push_config(&Value::Object(params.clone()), V10)?;
            (
                V10,
                Op::Push(PushOp::Set {
                    task: checked_id(task)?,
                    config,
                }),
            )
        }
        "tasks/pushNotificationConfig/get" => {
            let id = text(&params, "pushNotificationConfigId")?;
            (
                V03,
                Op::Push(PushOp::Get {
                    task: task_id(&params)?,
                    id,
                }),
            )
        }
        "GetTaskPushNotificationConfig" => {
            let task = checked_id(text(&params, "taskId")?.unwrap_or_default())?;
            (
                V10,
                Op::Push(PushOp::Get {
                    task,
                    id: text(&params, "id")?,
                }),
            )
        }
        "tasks/pushNotificationConfig/list" => (
            V03,
            Op::Push(PushOp::List {
                task: task_id(&params)?,
            }),
        ),
        "ListTaskPushNotificationConfigs" => {
            let task = checked_id(text(&params, "taskId")?.unwrap_or_default())?;
            (V10, Op::Push(PushOp::List { task }))
        }
        "tasks/pushNotificationConfig/delete" => {
            let id = text(&params, "pushNotificationConfigId")?.unwrap_or_default();
            (
                V03,
                Op::Push(PushOp::Delete {
                    task: task_id(&params)?,
                    id,
                }),
            )
        }
        "DeleteTaskPushNotificationConfig" => {
            let task = checked_id(text(&params, "taskId")?.unwrap_or_default())?;
            let id = text(&params, "id")?.unwrap_or_default();
            (V10, Op::Push(PushOp::Delete { task, id }))
        }
        "agent/getAuthenticatedExtendedCard" => (V03, Op::ExtendedCard),
        "GetExtendedAgentCard" => (V10, Op::ExtendedCard),
        other => {
            let shown: String = other.chars().take(100).collect();
            return Err((
                codes::METHOD_NOT_FOUND,
                format!("method not found: {shown:?}"),
            ));
        }
    };
    Ok(op)
}

/// A send read as a stream.
fn streamed(op: Op) -> Op {
    match op {
        Op::Send { params, push, .. } => Op::Stream { params, push },
        other => other,
    }
}

fn send(params: Map<String, Value>, version: Version) -> Result<Op, Refused> {
    let configuration = params.get("configuration");
    let blocking = match version {
        Version::V03 => configuration
            .and_then(|c| c.get("blocking"))
            .and_then(Value::as_bool)
            .unwrap_or(true),
        Version::V10 => !configuration
            .and_then(|c| c.get("returnImmediately"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    let push = match version {
        Version::V03 => "pushNotificationConfig",
        Version::V10 => "taskPushNotificationConfig",
    };
    let push = match configuration.and_then(|c| c.get(push)) {
        Some(p) if !p.is_null() => Some(push_config(p, version)?),
        _ => None,
    };
    Ok(Op::Send {
        params: message_params(params, version)?,
        blocking,
        push,
    })
}

/// `{message, metadata?}` in the 0.3 shape, the message checked.
fn message_params(mut params: Map<String, Value>, version: Version) -> Result<Value, Refused> {
    let Some(message) = params.remove("message") else {
        return Err((codes::INVALID_PARAMS, "params.message is missing".into()));
    };
    let message = match version {
        Version::V03 => message,
        Version::V10 => v1::message_to_v03(message)
            .map_err(|e| (codes::INVALID_PARAMS, format!("params.message: {e}")))?,
    };
    let message: messages::Message = serde_json::from_value(message)
        .map_err(|e| (codes::INVALID_PARAMS, format!("params.message: {e}")))?;
    if message.parts.is_empty() {
        return Err((codes::INVALID_PARAMS, "params.message has no parts".into()));
    }
    let mut out = json!({"message": message});
    if let Some(m @ Value::Object(_)) = params.remove("metadata") {
        out["metadata"] = m;
    }
    Ok(out)
}

/// `params.id`: a task id (see [`checked_id`]).
fn task_id(params: &Map<String, Value>) -> Result<String, Refused> {
    let Some(Value::String(id)) = params.get("id") else {
        return Err((
            codes::INVALID_PARAMS,
            "params.id (a task id) is missing".into(),
        ));
    };
    checked_id(id.clone())
}

/// A task id: 1 to 256 characters, no control characters.
fn checked_id(id: String) -> Result<String, Refused> {
    if id.is_empty() || id.len() > 256 || id.chars().any(|c| c.is_control()) {
        return Err((
            codes::INVALID_PARAMS,
            "a task id must be 1 to 256 characters, no control characters".into(),
        ));
    }
    Ok(id)
}

/// Field `name` of `params` as text, if present; anything but a string is refused.
fn text(params: &Map<String, Value>, name: &str) -> Result<Option<String>, Refused> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err((codes::INVALID_PARAMS, format!("{name} must be a string"))),
    }
}

/// A push config in `version`'s shape (0.3: `authentication{schemes[], credentials}`;
/// 1.0: `authentication{scheme, credentials}`), bounded.
fn push_config(v: &Value, version: Version) -> Result<PushConfig, Refused> {
    let Value::Object(m) = v else {
        return Err((
            codes::INVALID_PARAMS,
            "the push config must be an object".into(),
        ));
    };
    let bounded = |name: &str, max: usize| -> Result<Option<String>, Refused> {
        let t = text(m, name)?.filter(|t| !t.is_empty());
        if t.as_ref().is_some_and(|t| t.len() > max) {
            return Err((
                codes::INVALID_PARAMS,
                format!("{name} is longer than {max} bytes"),
            ));
        }
        Ok(t)
    };
    let id = bounded("id", 64)?;
    if let Some(id) = &id {
        if !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err((
                codes::INVALID_PARAMS,
                "a push config's id is 1 to 64 of A-Z a-z 0-9 _ -".into(),
            ));
        }
    }
    let url = bounded("url", 2048)?.ok_or((
        codes::INVALID_PARAMS,
        "the push config needs a url".to_string(),
    ))?;
    let token = bounded("token", 512)?;
    let auth = m.get("authentication").and_then(Value::as_object);
    let scheme = auth.and_then(|a| match version {
        Version::V03 => a
            .get("schemes")
            .and_then(|s| s.get(0))
            .and_then(Value::as_str),
        Version::V10 => a.get("scheme").and_then(Value::as_str),
    });
    let credentials = auth
        .and_then(|a| a.get("credentials"))
        .and_then(Value::as_str);
    let bad_scheme = scheme
        .is_some_and(|s| s.len() > 64 || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    if bad_scheme || credentials.is_some_and(|c| c.len() > 4096) {
        return Err((
            codes::INVALID_PARAMS,
            "authentication: a scheme of at most 64 letters, digits or -, credentials of at \
             most 4096 bytes"
                .into(),
        ));
    }
    Ok(PushConfig {
        id,
        url,
        token,
        scheme: scheme.map(str::to_owned),
        credentials: credentials.map(str::to_owned),
    })
}

/// `params.pageSize` of a `ListTasks` (1 to 100, default 50).
fn page_size(params: &Map<String, Value>) -> Result<usize, Refused> {
    match params.get("pageSize") {
        None | Some(Value::Null) => Ok(50),
        Some(v) => match v.as_u64() {
            Some(n @ 1..=100) => Ok(usize::try_from(n).unwrap_or(100)),
            _ => Err((
                codes::INVALID_PARAMS,
                "pageSize must be a whole number from 1 to 100".into(),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(body: &str) -> Result<Call, RpcError> {
        read(&HeaderMap::new(), body.as_bytes())
    }

    fn code(body: &str) -> i64 {
        call(body).expect_err("an error").code
    }

    #[test]
    fn malformed_envelopes_get_their_codes() {
        assert_eq!(code("{nope"), codes::PARSE_ERROR);
        assert_eq!(code("[]"), codes::INVALID_REQUEST);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","method":"tasks/get"}"#),
            codes::INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":1,"method":"tasks/get"}"#),
            codes::INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#),
            codes::METHOD_NOT_FOUND
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}"#),
            codes::INVALID_PARAMS
        );
        assert_eq!(
            code(
                r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[]}}}"#
            ),
            codes::INVALID_PARAMS
        );
    }

    #[test]
    fn the_method_decides_the_version() {
        let c =
            call(r#"{"jsonrpc":"2.0","id":"a","method":"GetTask","params":{"id":"t"}}"#).unwrap();
        assert_eq!(
            (c.version, c.op),
            (Version::V10, Op::Get { id: "t".into() })
        );
        let c =
            call(r#"{"jsonrpc":"2.0","id":"a","method":"tasks/get","params":{"id":"t"}}"#).unwrap();
        assert_eq!(c.version, Version::V03);
        let mut h = HeaderMap::new();
        h.insert("a2a-version", "2.0".parse().unwrap());
        let body = r#"{"jsonrpc":"2.0","id":"a","method":"GetTask","params":{"id":"t"}}"#;
        assert_eq!(
            read(&h, body.as_bytes()).unwrap_err().code,
            VERSION_NOT_SUPPORTED
        );
    }

    #[test]
    fn a_1_0_message_is_read_as_0_3() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]},"configuration":{"returnImmediately":true}}}"#;
        let c = call(body).unwrap();
        let Op::Send {
            params, blocking, ..
        } = c.op
        else {
            panic!("{:?}", c.op)
        };
        assert!(!blocking);
        assert_eq!(
            params["message"]["parts"][0],
            json!({"kind": "text", "text": "hi"})
        );
        assert_eq!(params["message"]["role"], "user");
    }
}
