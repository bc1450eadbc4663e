//! Calling agents and workflows (a workflow is called exactly like an agent): a plain
//! `message/send` request/reply that returns the output or a [`CallError`].

use std::time::Duration;

use async_nats::{Client, HeaderMap, RequestErrorKind};
use bytes::Bytes;
use messages::subjects;
use messages::{
    AgentReply, Message, Outcome, Part, Request, Response, Role, Task, TaskState,
    WorkflowNodeResult,
};
use serde_json::{json, Value};

use crate::error::CallError;
use crate::payload::{unwrap_data, Artifacts, DEFAULT_ARTIFACT_THRESHOLD};

/// Options of [`call_agent_with`].
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// How long to wait for the final reply.
    pub timeout: Duration,
    /// An instruction sent as a TextPart before the input.
    pub instruction: Option<String>,
    /// Extra headers (trace context, call depth: see
    /// [`crate::NodeRequest::onward_headers`]).
    pub headers: HeaderMap,
    /// Inputs whose JSON is larger go through the object store.
    pub artifact_threshold: usize,
}

impl CallOptions {
    /// Default options with `timeout`.
    pub fn new(timeout: Duration) -> Self {
        CallOptions {
            timeout,
            instruction: None,
            headers: HeaderMap::new(),
            artifact_threshold: DEFAULT_ARTIFACT_THRESHOLD,
        }
    }
}

/// Calls `agent` (or a workflow) in namespace `ns` with `input` and waits up to `timeout`
/// for its output.
pub async fn call_agent(
    client: &Client,
    ns: &str,
    agent: &str,
    input: Value,
    timeout: Duration,
) -> Result<Value, CallError> {
    call_agent_with(client, ns, agent, input, CallOptions::new(timeout)).await
}

/// [`call_agent`] with options.
pub async fn call_agent_with(
    client: &Client,
    ns: &str,
    agent: &str,
    input: Value,
    options: CallOptions,
) -> Result<Value, CallError> {
    subjects::validate_namespace(ns).map_err(CallError::InvalidSubject)?;
    subjects::validate_token(agent).map_err(CallError::InvalidSubject)?;
    let artifacts = Artifacts::new(client.clone(), ns);
    let id = uuid::Uuid::new_v4().simple().to_string();
    let mut parts = Vec::new();
    if let Some(text) = options.instruction {
        parts.push(Part::text(text));
    }
    parts.push(
        artifacts
            .encode(
                input,
                &format!("input/{id}.json"),
                options.artifact_threshold,
            )
            .await?,
    );
    let mut message = Message::new(id.clone(), Role::User, parts);
    message.task_id = Some(id.clone());
    message.context_id = Some(id.clone());
    let body = serde_json::to_vec(&Request::message_send(id.clone(), message)).map_err(|e| {
        CallError::Request {
            agent: agent.to_owned(),
            reason: e.to_string(),
        }
    })?;
    let request = async_nats::Request::new()
        .payload(Bytes::from(body))
        .headers(options.headers)
        .timeout(Some(options.timeout));
    let reply = client
        .send_request(subjects::agent_request(ns, agent), request)
        .await
        .map_err(|e| match e.kind() {
            RequestErrorKind::NoResponders => CallError::NoResponders(agent.to_owned()),
            RequestErrorKind::TimedOut => CallError::TimedOut(agent.to_owned()),
            _ => CallError::Request {
                agent: agent.to_owned(),
                reason: e.to_string(),
            },
        })?;
    let response: Response =
        serde_json::from_slice(&reply.payload).map_err(|e| CallError::InvalidReply {
            agent: agent.to_owned(),
            reason: e.to_string(),
        })?;
    match response.outcome {
        Outcome::Error(e) => Err(CallError::Rpc {
            agent: agent.to_owned(),
            code: e.code,
            message: e.message,
        }),
        Outcome::Result(reply) => match *reply {
            AgentReply::Task(task) => task_output(&artifacts, agent, task).await,
            AgentReply::Message(m) => parts_output(&artifacts, &m.parts).await,
            AgentReply::StatusUpdate(_) => Err(CallError::InvalidReply {
                agent: agent.to_owned(),
                reason: "a status update instead of a final reply".into(),
            }),
        },
    }
}

/// The output of a final task, or the failure it reports.
async fn task_output(artifacts: &Artifacts, agent: &str, task: Task) -> Result<Value, CallError> {
    let result = match task.find_data::<WorkflowNodeResult>() {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            return Err(CallError::InvalidReply {
                agent: agent.to_owned(),
                reason: format!("malformed workflow_node_result: {e}"),
            })
        }
        None => None,
    };
    let parts = task
        .status
        .message
        .as_ref()
        .map(|m| m.parts.as_slice())
        .unwrap_or_default();
    match task.status.state {
        TaskState::Completed => match result {
            Some(r) if r.status == messages::ResultStatus::Success => match r.artifact_name {
                Some(name) => Ok(artifacts.get_json(artifacts.bucket(), &name).await?),
                None => Ok(r.output.unwrap_or(Value::Null)),
            },
            Some(r) => Err(failed(
                agent,
                r.error_message,
                r.error_kind,
                r.validation_errors,
            )),
            None => parts_output(artifacts, parts).await,
        },
        TaskState::Failed | TaskState::Canceled | TaskState::Rejected => match result {
            Some(r) => Err(failed(
                agent,
                r.error_message,
                r.error_kind,
                r.validation_errors,
            )),
            None => {
                let data = parts.iter().find_map(Part::as_data);
                let field = |k: &str| {
                    data.and_then(|d| d.get(k))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                let text = parts
                    .iter()
                    .filter_map(Part::as_text)
                    .collect::<Vec<_>>()
                    .join("\n");
                let message = field("error_message")
                    .or(Some(text).filter(|t| !t.is_empty()))
                    .unwrap_or_else(|| format!("task {:?}", task.status.state));
                let validation = data
                    .and_then(|d| d.get("validation_errors"))
                    .and_then(|v| serde_json::from_value(v.clone()).ok());
                Err(failed(
                    agent,
                    Some(message),
                    field("error_kind"),
                    validation,
                ))
            }
        },
        other => Err(CallError::InvalidReply {
            agent: agent.to_owned(),
            reason: format!("the final task is in state {other:?}"),
        }),
    }
}

fn failed(
    agent: &str,
    message: Option<String>,
    kind: Option<String>,
    validation_errors: Option<Vec<String>>,
) -> CallError {
    CallError::Failed {
        agent: agent.to_owned(),
        message: message.unwrap_or_else(|| "failed".into()),
        kind,
        validation_errors: validation_errors.unwrap_or_default(),
    }
}

/// The output carried by parts: the first DataPart (unwrapped), else the first object-store
/// FilePart, else `{"text": ...}`.
async fn parts_output(artifacts: &Artifacts, parts: &[Part]) -> Result<Value, CallError> {
    if let Some(v) = parts.iter().find_map(|p| match p {
        Part::Data { data, metadata } => Some(unwrap_data(data, metadata.as_ref())),
        _ => None,
    }) {
        return Ok(v);
    }
    if let Some(uri) = parts.iter().find_map(|p| match p {
        Part::File { file, .. } => file.uri.clone(),
        _ => None,
    }) {
        return Ok(artifacts.get_uri(&uri).await?);
    }
    let text = parts
        .iter()
        .filter_map(Part::as_text)
        .collect::<Vec<_>>()
        .join("\n");
    Ok(json!({ "text": text }))
}
