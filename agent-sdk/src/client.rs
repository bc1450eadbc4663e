//! Calling agents and workflows (a workflow is called exactly like an agent): a plain
//! `message/send` request/reply that returns the output or a [`CallError`].

use std::time::Duration;

use async_nats::{Client, HeaderMap, RequestErrorKind};
use bytes::Bytes;
use messages::reply::{decode_reply, final_task, read_task, ReplyError, TaskReading};
use messages::subjects;
use messages::{Message, Part, Request, Role, Task};
use serde_json::Value;

use crate::error::CallError;
use crate::payload::{Artifacts, DEFAULT_ARTIFACT_THRESHOLD};

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
    let reply = decode_reply(&reply.payload).map_err(|e| match e {
        ReplyError::NotJsonRpc(e) => CallError::InvalidReply {
            agent: agent.to_owned(),
            reason: e.to_string(),
        },
        ReplyError::Rpc(e) => CallError::Rpc {
            agent: agent.to_owned(),
            code: e.code,
            message: e.message,
        },
    })?;
    let task = final_task(reply).ok_or_else(|| CallError::InvalidReply {
        agent: agent.to_owned(),
        reason: "a status update instead of a final reply".into(),
    })?;
    task_output(&artifacts, agent, &task).await
}

/// The output of a final task (fetched from the object store when stored there), or the
/// failure it reports.
async fn task_output(artifacts: &Artifacts, agent: &str, task: &Task) -> Result<Value, CallError> {
    let invalid = |reason: String| CallError::InvalidReply {
        agent: agent.to_owned(),
        reason,
    };
    let reading = read_task(task)
        .map_err(|e| invalid(format!("malformed workflow_node_result: {e}")))?
        .ok_or_else(|| {
            invalid(format!(
                "the final task is in state {:?}",
                task.status.state
            ))
        })?;
    match reading {
        TaskReading::Output(value) => Ok(value),
        TaskReading::Artifact(name) => Ok(artifacts.get_json(artifacts.bucket(), &name).await?),
        TaskReading::Object(uri) => Ok(artifacts.get_uri(&uri).await?),
        TaskReading::Failed(f) => Err(CallError::Failed {
            agent: agent.to_owned(),
            message: f.message.unwrap_or_else(|| match f.reported {
                true => "failed".into(),
                false => format!("task {:?}", f.state),
            }),
            kind: f.kind,
            validation_errors: f.validation_errors,
        }),
    }
}
