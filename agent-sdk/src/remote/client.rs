//! The A2A 0.3 JSON-RPC client of a remote agent, over HTTP: its card read and checked, and
//! one call (`message/send` without blocking, then `tasks/get` until the task ends, and
//! `tasks/cancel` when the call is dropped before). Every exchange is bounded: the
//! response's size, the time, no redirects; the address was checked once and is pinned
//! (see [`super::RemoteAgent::connect`]), so a name that resolves elsewhere later is not
//! followed.
//!
//! The task id is the remote agent's: A2A servers make it (the official SDK refuses a new
//! task whose id the client chose), so the mesh's task id travels as `metadata` only.

use std::time::Duration;

use messages::a2a::{AgentReply, Message, Part, Role, Task, TaskState};
use messages::jsonrpc::{Outcome, Response};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::error::AgentError;

/// The error kinds of a remote call, as the node's `retry_strategy` reads them: the same
/// words an LLM agent uses for the same faults.
pub(super) mod kinds {
    /// Worth another try: unreachable, 429, 5xx.
    pub(crate) const TRANSIENT: &str = "transient";
    /// Not worth another try: a refusal, a failed task, a 4xx, a refused TLS certificate.
    pub(crate) const PERMANENT: &str = "permanent";
    /// The call's time ran out.
    pub(crate) const TIMEOUT: &str = "timeout";
    /// The answer could not be read (not JSON, too large, not A2A).
    pub(crate) const INVALID_RESPONSE: &str = "invalid_response";
}

/// The first wait between two `tasks/get`, doubled up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two `tasks/get`.
const POLL_MAX: Duration = Duration::from_secs(2);

/// One remote agent's HTTP side.
#[derive(Debug, Clone)]
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    pub(super) url: reqwest::Url,
    pub(super) token: Option<String>,
    pub(super) max_response_bytes: usize,
}

impl Client {
    /// POSTs one JSON-RPC request (with `traceparent` when given) and reads its response.
    async fn rpc(&self, body: &Value, traceparent: Option<&str>) -> Result<Response, AgentError> {
        let mut request = self.http.post(self.url.clone()).json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(tp) = traceparent {
            request = request.header(messages::headers::TRACEPARENT, tp);
        }
        let response = request.send().await.map_err(|e| unreachable(&e))?;
        let status = response.status();
        let bytes = self.read(response).await?;
        if !status.is_success() {
            let kind = if status.as_u16() == 429 || status.is_server_error() {
                kinds::TRANSIENT
            } else {
                kinds::PERMANENT
            };
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            let why = if status.is_redirection() {
                "redirects are not followed".to_owned()
            } else {
                text
            };
            return Err(AgentError::with_kind(
                format!("the remote agent answered HTTP {status}: {why}"),
                kind,
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            AgentError::with_kind(
                format!("the remote agent's answer is not an A2A JSON-RPC response: {e}"),
                kinds::INVALID_RESPONSE,
            )
        })
    }

    /// The body of `response`, refused past the size limit.
    async fn read(&self, mut response: reqwest::Response) -> Result<Vec<u8>, AgentError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| unreachable(&e))? {
            if bytes.len() + chunk.len() > self.max_response_bytes {
                return Err(AgentError::with_kind(
                    format!(
                        "the remote agent's answer is over {} bytes",
                        self.max_response_bytes
                    ),
                    kinds::INVALID_RESPONSE,
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// GETs the card at `url`: a JSON object, bounded like any answer.
    pub(super) async fn card(&self, url: reqwest::Url) -> Result<Value, String> {
        let response = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| format!("reading the card at {url}: {}", unreachable(&e).message))?;
        if !response.status().is_success() {
            return Err(format!(
                "reading the card at {url}: HTTP {}",
                response.status()
            ));
        }
        let bytes = self.read(response).await.map_err(|e| e.message)?;
        serde_json::from_slice(&bytes).map_err(|e| format!("the card at {url} is not JSON: {e}"))
    }

    /// Calls the agent with `input` until its task ends or `deadline`; a call dropped
    /// before the end cancels the remote task.
    pub(super) async fn call(
        &self,
        input: &Value,
        mesh_task: &str,
        traceparent: Option<&str>,
        deadline: Instant,
    ) -> Result<Value, AgentError> {
        let part = match input {
            Value::Object(o) => Part::data(o.clone()),
            other => messages::payload::wrap(other.clone()),
        };
        let message = Message::new(uuid::Uuid::new_v4().to_string(), Role::User, vec![part]);
        let send = json!({
            "jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {
                "message": message,
                "configuration": {"blocking": false, "acceptedOutputModes": ["application/json", "text/plain"]},
                "metadata": {"mesh_task_id": mesh_task},
            }
        });
        // The send runs on its own: a call dropped while it is under way still learns the
        // task id it made, and cancels that task.
        let tp = traceparent.map(str::to_owned);
        let sending = tokio::spawn({
            let client = self.clone();
            let tp = tp.clone();
            async move { client.rpc(&send, tp.as_deref()).await }
        });
        let mut pending = PendingSend {
            sending: Some(sending),
            client: self.clone(),
            traceparent: tp,
        };
        let sending = pending.sending.as_mut().expect("the send was just started");
        let first = match tokio::time::timeout_at(deadline, sending).await {
            Err(_) => return TimedOut.into(),
            Ok(joined) => {
                pending.sending = None;
                joined.map_err(|e| {
                    AgentError::with_kind(format!("sending the call: {e}"), kinds::TRANSIENT)
                })??
            }
        };
        let mut task = match reply(first)? {
            AgentReply::Message(m) => return output(&m.parts),
            AgentReply::Task(t) => t,
            AgentReply::StatusUpdate(_) => {
                return Err(AgentError::with_kind(
                    "the remote agent answered message/send with a status update",
                    kinds::INVALID_RESPONSE,
                ))
            }
        };
        let mut cancel = CancelOnDrop {
            client: Some(self.clone()),
            task: task.id.clone(),
            traceparent: traceparent.map(str::to_owned),
        };
        let mut wait = POLL_FIRST;
        while !task.status.state.is_terminal() {
            if matches!(
                task.status.state,
                TaskState::InputRequired | TaskState::AuthRequired
            ) {
                return Err(AgentError::with_kind(
                    format!(
                        "the remote agent's task {} asks for more input ({:?}), which a \
                         workflow call cannot give",
                        task.id, task.status.state
                    ),
                    kinds::PERMANENT,
                ));
            }
            timed(deadline, tokio::time::sleep(wait)).await;
            wait = (wait * 2).min(POLL_MAX);
            let get = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                             "params": {"id": task.id, "historyLength": 0}});
            task = match reply(timed(deadline, self.rpc(&get, traceparent)).await?)? {
                AgentReply::Task(t) => t,
                _ => {
                    return Err(AgentError::with_kind(
                        "the remote agent answered tasks/get with something else than a task",
                        kinds::INVALID_RESPONSE,
                    ))
                }
            };
        }
        cancel.client = None;
        ended(&task)
    }
}

/// Cancels the remote task when the call is dropped before it ended (the node cancelled
/// the call, or its time ran out).
struct CancelOnDrop {
    client: Option<Client>,
    task: String,
    traceparent: Option<String>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let (Some(client), Ok(rt)) = (self.client.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let task = std::mem::take(&mut self.task);
        let tp = self.traceparent.take();
        rt.spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel",
                              "params": {"id": task}});
            if let Err(e) = client.rpc(&body, tp.as_deref()).await {
                tracing::warn!("cancelling the remote task {task}: {}", e.message);
            }
        });
    }
}

/// A `message/send` under way when the call was dropped: its task, once known, is
/// cancelled.
struct PendingSend {
    sending: Option<tokio::task::JoinHandle<Result<Response, AgentError>>>,
    client: Client,
    traceparent: Option<String>,
}

impl Drop for PendingSend {
    fn drop(&mut self) {
        let (Some(sending), Ok(rt)) = (self.sending.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let client = self.client.clone();
        let tp = self.traceparent.take();
        rt.spawn(async move {
            let Ok(Ok(response)) = sending.await else {
                return;
            };
            if let Ok(AgentReply::Task(task)) = reply(response) {
                if !task.status.state.is_terminal() {
                    drop(CancelOnDrop {
                        client: Some(client),
                        task: task.id,
                        traceparent: tp,
                    });
                }
            }
        });
    }
}

/// `future`, or a `timeout` error at `deadline`.
async fn timed<T>(deadline: Instant, future: impl std::future::Future<Output = T>) -> T
where
    T: From<TimedOut>,
{
    match tokio::time::timeout_at(deadline, future).await {
        Ok(v) => v,
        Err(_) => T::from(TimedOut),
    }
}

/// The call's time ran out.
struct TimedOut;

impl From<TimedOut> for () {
    fn from(_: TimedOut) {}
}

impl<T> From<TimedOut> for Result<T, AgentError> {
    fn from(_: TimedOut) -> Self {
        Err(AgentError::with_kind(
            "the remote agent did not finish in time",
            kinds::TIMEOUT,
        ))
    }
}

/// The result of a response, or its JSON-RPC error as a permanent failure.
fn reply(response: Response) -> Result<AgentReply, AgentError> {
    match response.outcome {
        Outcome::Result(r) => Ok(*r),
        Outcome::Error(e) => Err(AgentError::with_kind(
            format!(
                "the remote agent refused the request ({}): {}",
                e.code, e.message
            ),
            kinds::PERMANENT,
        )),
    }
}

/// The output of an ended task, or why it has none.
fn ended(task: &Task) -> Result<Value, AgentError> {
    let said = task
        .status
        .message
        .as_ref()
        .map(Message::text)
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "(no message)".to_owned());
    match task.status.state {
        TaskState::Completed => {
            let mut parts: Vec<Part> = Vec::new();
            for a in task.artifacts.iter().flatten() {
                parts.extend(a.parts.iter().cloned());
            }
            if parts.is_empty() {
                if let Some(m) = &task.status.message {
                    parts.extend(m.parts.iter().cloned());
                }
            }
            output(&parts)
        }
        TaskState::Canceled => Err(AgentError::with_kind(
            format!("the remote agent cancelled task {}: {said}", task.id),
            crate::KIND_CANCELED,
        )),
        state => Err(AgentError::with_kind(
            format!(
                "the remote agent's task {} ended {state:?}: {said}",
                task.id
            ),
            kinds::PERMANENT,
        )),
    }
}

/// The output in `parts`: the first data part (unwrapped), else the text as `{"text"}`.
fn output(parts: &[Part]) -> Result<Value, AgentError> {
    if let Some(data) = parts.iter().find_map(Part::as_data) {
        return Ok(messages::payload::unwrap_data(data, None));
    }
    let text: Vec<&str> = parts.iter().filter_map(Part::as_text).collect();
    if text.is_empty() {
        return Err(AgentError::with_kind(
            "the remote agent's task completed without a data or text part",
            kinds::INVALID_RESPONSE,
        ));
    }
    Ok(json!({"text": text.join("\n")}))
}

/// A request that reached nobody (or broke off) is worth another try; one whose TLS
/// certificate was refused is not, until the agent's certificate or `ca_file` changes.
fn unreachable(e: &reqwest::Error) -> AgentError {
    let text = crate::crypto::error_chain(e);
    if crate::crypto::refused_certificate(e) {
        return AgentError::with_kind(
            format!(
                "the remote agent's TLS certificate was refused (check remote.ca_file, or \
                 the system's roots without one): {text}"
            ),
            kinds::PERMANENT,
        );
    }
    let kind = if e.is_timeout() {
        kinds::TIMEOUT
    } else {
        kinds::TRANSIENT
    };
    AgentError::with_kind(format!("the remote agent is unreachable: {text}"), kind)
}
