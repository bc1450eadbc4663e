//! Calling agents and workflows (a workflow is called exactly like an agent): a
//! `message/send` with the input, resent while the callee is silent (see [`crate::exchange`]),
//! that returns the output or a [`CallError`].

use std::time::Duration;

use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use messages::reply::{final_task, read_task, TaskReading};
use messages::subjects;
use messages::{Message, Part, Request, Role, Task};
use serde_json::Value;

use crate::error::CallError;
use crate::exchange::{
    send_until_answered, ExchangeError, MalformedReply, Outgoing, Timing, DEFAULT_RESEND_INTERVAL,
};
use crate::payload::{Artifacts, DEFAULT_ARTIFACT_THRESHOLD};

/// Options of [`call_agent_with`].
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// How long to wait for the final reply, from the first send.
    pub timeout: Duration,
    /// Silence after which the request is sent again, with the same task id (default
    /// [`DEFAULT_RESEND_INTERVAL`]; see [`crate::exchange`]).
    pub resend_interval: Duration,
    /// An instruction sent as a TextPart before the input.
    pub instruction: Option<String>,
    /// Extra headers (trace context, call depth: see
    /// [`crate::NodeRequest::onward_headers`]). When traces are exported, the current
    /// span's context replaces a `traceparent` here (see [`crate::telemetry`]).
    pub headers: HeaderMap,
    /// Inputs whose JSON is larger go through the object store.
    pub artifact_threshold: usize,
    /// The calling agent's name, sent as `Mesh-Caller`: a workflow scopes task ids by it
    /// (see `messages::headers::CALLER`). Overrides a `Mesh-Caller` in `headers`.
    pub caller: Option<String>,
}

impl CallOptions {
    /// Default options with `timeout`.
    pub fn new(timeout: Duration) -> Self {
        CallOptions {
            timeout,
            resend_interval: DEFAULT_RESEND_INTERVAL,
            instruction: None,
            headers: HeaderMap::new(),
            artifact_threshold: DEFAULT_ARTIFACT_THRESHOLD,
            caller: None,
        }
    }

    /// These options, calling as agent `name` (the `Mesh-Caller` header).
    pub fn with_caller(mut self, name: impl Into<String>) -> Self {
        self.caller = Some(name.into());
        self
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
    let request = Request::message_send(id.clone(), message);
    let mut headers = options.headers;
    // The caller's current span (a handler's, a CLI's) becomes the callee's parent.
    crate::telemetry::inject_current(&mut headers);
    if let Some(caller) = options.caller.filter(|c| !c.is_empty()) {
        headers.insert(messages::headers::CALLER, caller.as_str());
    }
    let body = serde_json::to_vec(&request).expect("a message/send request serialises to JSON");
    let outgoing = Outgoing {
        subject: subjects::agent_request(ns, agent),
        id: id.into(),
        headers,
        body: Bytes::from(body),
    };
    let timing = Timing {
        timeout: options.timeout,
        resend_interval: options.resend_interval,
    };
    let reply = send_until_answered(client, outgoing, timing, |_| {})
        .await
        .map_err(|e| call_error(agent, e))?;
    let task = final_task(reply).expect("send_until_answered returns final replies only");
    task_output(&artifacts, agent, &task).await
}

/// The output of a final task (fetched from the object store when stored there), or the
/// failure it reports.
async fn task_output(artifacts: &Artifacts, agent: &str, task: &Task) -> Result<Value, CallError> {
    let invalid = |source: MalformedReply| CallError::InvalidReply {
        agent: agent.to_owned(),
        source,
    };
    let reading = read_task(task)
        .map_err(|e| invalid(MalformedReply::NodeResult(e)))?
        .ok_or_else(|| invalid(MalformedReply::NotTerminal(task.status.state)))?;
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

/// The [`CallError`] of a failed exchange with `agent`.
fn call_error(agent: &str, e: ExchangeError) -> CallError {
    let agent = agent.to_owned();
    match e {
        ExchangeError::Connection(source) => CallError::Connection { agent, source },
        ExchangeError::NoResponders => CallError::NoResponders(agent),
        ExchangeError::TimedOut { sends } => CallError::TimedOut { agent, sends },
        ExchangeError::Refused(e) => CallError::Rpc {
            agent,
            code: e.code,
            message: e.message,
        },
        ExchangeError::Malformed(source) => CallError::InvalidReply { agent, source },
    }
}
