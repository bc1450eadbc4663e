//! Calling a workflow the way an operator or a test does: a `message/send` with the input
//! as a DataPart, progress from the status subject, and the final Task read as a
//! [`RunResult`] (a failed run is a result, not an error). The request goes through the
//! same exchange as [`crate::Mesh::agent`]'s calls: resent with the same message id while
//! the workflow is silent; the workflow starts one run per message id, so a resend never
//! starts a second run.
//!
//! [`start`] and [`submit`] return once the run is accepted; [`retry`] and
//! [`start_retry`] start a new run from an ended one; [`get_run`] asks a workflow where a
//! run is (`tasks/get`), for a caller that lost track of it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{ArtifactError, ConnectionError, MalformedReply};
use crate::exchange::{send_until_answered, ExchangeError, Outgoing, Timing};
use crate::signing::Signer;
use messages::a2a::{Message, Part, Role, TaskState, TaskStatusUpdateEvent};
use messages::control::WorkflowRetry;
use messages::jsonrpc::{codes, Outcome, Request, Response};
use messages::payload::wrap;
use messages::reply::{final_task, output_part, Output};
use messages::subjects;
use messages::workflow::{RunOutcome, WorkflowDataPart, WorkflowRunState};
use messages::{headers, AgentReply};
use serde_json::Value;

/// How a run ended, as its caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// `success`, `failure`, `cancelled` or `timed_out` (the run hit its deadline: its
    /// A2A state is `failed`, and its `workflow_execution_result` or summary says so).
    pub status: String,
    /// The output, on success.
    pub output: Option<Value>,
    /// The error, otherwise.
    pub error: Option<String>,
    /// The last status of each node seen in progress updates.
    pub nodes: BTreeMap<String, String>,
    /// The run's execution id (from its start update).
    pub execution_id: Option<String>,
    /// The trace the run is part of, when this process exports traces (the request
    /// carried the context of a `workflow.invoke` span of its own).
    pub trace_id: Option<String>,
}

/// Why [`invoke`] has no result to show.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// Subscribing, publishing or flushing failed.
    #[error("calling {workflow}")]
    Connection {
        /// The workflow called.
        workflow: String,
        /// The operation that failed.
        #[source]
        source: ConnectionError,
    },
    /// Nothing serves the workflow in the namespace.
    #[error("nothing serves {workflow} in namespace '{ns}' (no responders)")]
    NoResponders {
        /// The workflow called.
        workflow: String,
        /// The namespace it was looked for in.
        ns: String,
    },
    /// The workflow refused the request with a JSON-RPC error (for instance a malformed
    /// request; a run that starts and fails is a [`RunResult`] instead).
    #[error("{workflow} refused the request: {message} ({code})")]
    Refused {
        /// The workflow called.
        workflow: String,
        /// The JSON-RPC error code (see `messages::jsonrpc::codes`).
        code: i64,
        /// The error message.
        message: String,
    },
    /// The final reply could not be read.
    #[error("{workflow} sent a reply that cannot be read")]
    MalformedReply {
        /// The workflow called.
        workflow: String,
        /// What was wrong with it.
        #[source]
        source: MalformedReply,
    },
    /// No final reply within the timeout, although the request was resent.
    #[error("no result from {workflow} within {} s (request sent {sends} times)", .timeout.as_secs_f64())]
    TimedOut {
        /// The workflow called.
        workflow: String,
        /// The overall timeout.
        timeout: Duration,
        /// How often the request went out.
        sends: u32,
    },
    /// The output is in the object store and could not be read.
    #[error("reading the output artifact {uri}")]
    Artifact {
        /// Its `nats-object://` reference.
        uri: String,
        /// Why it could not be read.
        #[source]
        source: ArtifactError,
    },
}

/// Invokes `workflow` with `input`, calling `progress` with each update's DataPart; waits
/// up to the timeout and resends after the resend interval of silence (see
/// [`crate::Mesh`]'s calls). A bare `Duration` is the timeout with the default interval (3 s).
///
/// When the process exports traces, the call is a `workflow.invoke` span whose context
/// the request carries: the run's spans nest under it.
pub async fn invoke(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    input: &Value,
    timing: impl Into<Timing>,
    progress: impl FnMut(&WorkflowDataPart),
) -> Result<RunResult, InvokeError> {
    let task_id = new_task_id();
    invoke_as(client, ns, workflow, input, timing, &task_id, progress).await
}

/// Sends `request` (a `message/send` built by the caller: any parts, any task id) to the
/// workflow or agent `name`, signed by `signer` if given, through the same exchange as
/// [`invoke_as`] (resent while the callee is silent), calling `on_status` with each status
/// update; returns the final reply (a Task, or a bare Message). What the HTTP doors use to
/// carry a client's message onto the mesh unchanged.
pub async fn relay(
    client: &async_nats::Client,
    ns: &str,
    name: &str,
    request: &Request,
    signer: Option<Signer>,
    timing: Timing,
    on_status: impl FnMut(&TaskStatusUpdateEvent),
) -> Result<AgentReply, InvokeError> {
    let body = serde_json::to_vec(request).map_err(|e| InvokeError::Refused {
        workflow: name.to_owned(),
        code: codes::INVALID_PARAMS,
        message: format!("the request cannot be written as JSON: {e}"),
    })?;
    let outgoing = Outgoing {
        subject: subjects::agent_request(ns, name),
        id: request.id.clone(),
        headers: async_nats::HeaderMap::new(),
        body: body.into(),
        signer,
    };
    send_until_answered(client, outgoing, timing, on_status)
        .await
        .map_err(|e| invoke_error(name, ns, timing.timeout, e))
}

/// A fresh task id for a run (`run-` and a random UUID).
pub fn new_task_id() -> String {
    format!("run-{}", uuid::Uuid::new_v4().simple())
}

/// How a start request names its run: its task id, and the workflow version it pins for
/// the run, if any (see [`messages::workflow::PIN_VERSION`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartAs {
    /// The task id (the same on every resend).
    pub task_id: String,
    /// The stored version of the workflow the run is to use; `None`: the version of the
    /// replica that takes the request.
    pub version: Option<String>,
    /// Who signs the request (`--nkey-seed-file`): only this key, or an operator, may then
    /// cancel the run.
    pub signer: Option<Signer>,
    /// The run's priority while it waits for a slot of a workflow with flow control (1
    /// first to 5 last, sent as `metadata.priority`); `None`: the workflow's own.
    pub priority: Option<u8>,
}

impl From<&str> for StartAs {
    /// A task id, pinning no version.
    fn from(task_id: &str) -> StartAs {
        StartAs {
            task_id: task_id.to_owned(),
            version: None,
            signer: None,
            priority: None,
        }
    }
}

impl From<&String> for StartAs {
    /// A task id, pinning no version.
    fn from(task_id: &String) -> StartAs {
        StartAs::from(task_id.as_str())
    }
}

/// The `message/send` of a run of `workflow` with `input`, named as `start` says.
fn start_request(ns: &str, workflow: &str, input: &Value, start: &StartAs) -> Outgoing {
    send_request(ns, workflow, wrap(input.clone()), start)
}

/// The `message/send` that retries run `execution_id` of `workflow` as a new run, named as
/// `start` says.
fn retry_request(ns: &str, workflow: &str, execution_id: &str, start: &StartAs) -> Outgoing {
    let retried = WorkflowRetry {
        execution_id: execution_id.to_owned(),
    };
    send_request(ns, workflow, Part::data_part(&retried), start)
}

/// The metadata key of a start request's priority (`docs/protocol.md`).
const PRIORITY: &str = "priority";

/// The `message/send` to `workflow` carrying `part`, named as `start` says.
fn send_request(ns: &str, workflow: &str, part: Part, start: &StartAs) -> Outgoing {
    let task_id = start.task_id.as_str();
    let mut message = Message::new(task_id.to_owned(), Role::User, vec![part]);
    message.task_id = Some(task_id.to_owned());
    let mut metadata = serde_json::Map::new();
    if let Some(version) = &start.version {
        metadata.insert(
            messages::workflow::PIN_VERSION.into(),
            Value::String(version.clone()),
        );
    }
    if let Some(priority) = start.priority {
        metadata.insert(PRIORITY.into(), Value::from(priority));
    }
    if !metadata.is_empty() {
        message.metadata = Some(metadata);
    }
    let request = Request::message_send(task_id, message);
    Outgoing {
        subject: subjects::agent_request(ns, workflow),
        id: task_id.into(),
        headers: async_nats::HeaderMap::new(),
        body: serde_json::to_vec(&request)
            .expect("a message/send request serialises to JSON")
            .into(),
        signer: start.signer.clone(),
    }
}

/// [`invoke`] with the task id chosen by the caller (which a `tasks/cancel` of the run can
/// then name).
pub async fn invoke_as(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    input: &Value,
    timing: impl Into<Timing>,
    task: impl Into<StartAs>,
    progress: impl FnMut(&WorkflowDataPart),
) -> Result<RunResult, InvokeError> {
    use crate::telemetry;
    use tracing::Instrument;
    let (timing, task) = (timing.into(), task.into());
    if !telemetry::active() {
        return invoke_in(client, ns, workflow, input, timing, &task, progress, None).await;
    }
    let span = tracing::info_span!(
        "workflow.invoke",
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        workflow.name = workflow,
        workflow.status = tracing::field::Empty,
    );
    let mut headers = async_nats::HeaderMap::new();
    span.in_scope(|| telemetry::inject_current(&mut headers));
    let result = invoke_in(
        client,
        ns,
        workflow,
        input,
        timing,
        &task,
        progress,
        Some(headers),
    )
    .instrument(span.clone())
    .await;
    match &result {
        Ok(r) => {
            span.record("workflow.status", r.status.as_str());
            if r.status != "success" {
                span.record("otel.status_code", "ERROR");
            }
        }
        Err(_) => {
            span.record("otel.status_code", "ERROR");
        }
    }
    result
}

/// [`invoke_as`], with the trace context of its `workflow.invoke` span when traces are
/// exported.
#[allow(clippy::too_many_arguments)]
async fn invoke_in(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    input: &Value,
    timing: Timing,
    task: &StartAs,
    progress: impl FnMut(&WorkflowDataPart),
    trace: Option<async_nats::HeaderMap>,
) -> Result<RunResult, InvokeError> {
    let outgoing = start_request(ns, workflow, input, task);
    exchange(client, ns, workflow, outgoing, timing, progress, trace).await
}

/// Retries run `execution_id` of `workflow` (which ended without success) as a new run
/// named as `task` says, and waits for the new run's result as [`invoke_as`] does.
pub async fn retry(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    execution_id: &str,
    timing: Timing,
    task: impl Into<StartAs>,
    progress: impl FnMut(&WorkflowDataPart),
) -> Result<RunResult, InvokeError> {
    let outgoing = retry_request(ns, workflow, execution_id, &task.into());
    exchange(client, ns, workflow, outgoing, timing, progress, None).await
}

/// [`retry`] that returns once the workflow accepted the new run, or answered at once (a
/// refusal), as [`start`] does.
pub async fn start_retry(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    execution_id: &str,
    timing: Timing,
    task: impl Into<StartAs>,
) -> Result<Started, InvokeError> {
    let outgoing = retry_request(ns, workflow, execution_id, &task.into());
    until_accepted(client, ns, workflow, outgoing, timing).await
}

/// Sends a start (`outgoing`) to `workflow` until it is answered, calling `progress` with
/// each update's DataPart, and reads the final reply: what [`invoke_as`] and [`retry`]
/// share.
async fn exchange(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    mut outgoing: Outgoing,
    timing: Timing,
    mut progress: impl FnMut(&WorkflowDataPart),
    trace: Option<async_nats::HeaderMap>,
) -> Result<RunResult, InvokeError> {
    let trace_id = trace
        .as_ref()
        .and_then(|h| h.get(headers::TRACEPARENT))
        .and_then(|tp| tp.as_str().split('-').nth(1).map(String::from));
    if let Some(trace) = trace {
        outgoing.headers = trace;
    }
    let mut nodes = BTreeMap::new();
    let mut execution_id = None;
    let mut timed_out = false;
    let reply = send_until_answered(client, outgoing, timing, |update| {
        let mut seen = |p: &WorkflowDataPart| {
            if let WorkflowDataPart::ExecutionResult(r) = p {
                timed_out = r.status == RunOutcome::TimedOut;
            }
            progress(p)
        };
        on_status(update, &mut nodes, &mut execution_id, &mut seen)
    })
    .await
    .map_err(|e| invoke_error(workflow, ns, timing.timeout, e))?;
    let task = final_task(reply).expect("send_until_answered returns final replies only");
    let parts = task.status.message.map(|m| m.parts).unwrap_or_default();
    let text: Vec<&str> = parts.iter().filter_map(Part::as_text).collect();
    let output = match output_part(&parts) {
        Some(Output::Inline(v)) => Some(v),
        Some(Output::Object(uri)) => Some(artifact_output(client, ns, &uri).await?),
        None => None,
    };
    // Progress is best effort: the summary names a timeout too.
    let timed_out = timed_out
        || text
            .iter()
            .any(|t| t.starts_with(&format!("Workflow {workflow} timed out")));
    let (status, error) = match task.status.state {
        TaskState::Completed => ("success", None),
        TaskState::Canceled => ("cancelled", Some(text.join("\n"))),
        _ if timed_out => ("timed_out", Some(text.join("\n"))),
        _ => ("failure", Some(text.join("\n"))),
    };
    Ok(RunResult {
        status: status.into(),
        output,
        error,
        nodes,
        execution_id,
        trace_id,
    })
}

/// Starts a run of `workflow` with task id `task_id` and returns as soon as the workflow
/// accepted it (its first status update: the `Started` event is stored, so the run will
/// go on without this caller), resending while it is silent. The final reply, if it
/// comes, is not waited for.
pub async fn submit(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    input: &Value,
    timing: Timing,
    task: impl Into<StartAs>,
) -> Result<(), InvokeError> {
    start(client, ns, workflow, input, timing, task)
        .await
        .map(drop)
}

/// How [`start`] went: the workflow accepted the run, or answered at once with its final
/// reply (a refused input, or a run that ended before the acceptance was seen).
#[derive(Debug, Clone, PartialEq)]
pub enum Started {
    /// The `Started` event is stored: the run goes on without the caller.
    Accepted,
    /// The final reply came first: its state and text.
    Ended {
        /// The task's final state.
        state: TaskState,
        /// Its message's text parts, joined.
        text: String,
    },
}

/// [`submit`], saying whether the run was accepted or the workflow answered at once.
pub async fn start(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    input: &Value,
    timing: Timing,
    task: impl Into<StartAs>,
) -> Result<Started, InvokeError> {
    let outgoing = start_request(ns, workflow, input, &task.into());
    until_accepted(client, ns, workflow, outgoing, timing).await
}

/// Sends `outgoing` until the workflow accepts the run (its first status update) or
/// answers at once with a final reply.
async fn until_accepted(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    outgoing: Outgoing,
    timing: Timing,
) -> Result<Started, InvokeError> {
    let accepted = std::sync::Arc::new(tokio::sync::Notify::new());
    let told = accepted.clone();
    let exchange = send_until_answered(client, outgoing, timing, move |_| told.notify_one());
    tokio::select! {
        ended = exchange => {
            let reply = ended.map_err(|e| invoke_error(workflow, ns, timing.timeout, e))?;
            let task = final_task(reply).expect("send_until_answered returns final replies only");
            let text = task.status.message.as_ref().map(Message::text).unwrap_or_default();
            Ok(Started::Ended { state: task.status.state, text })
        }
        _ = accepted.notified() => Ok(Started::Accepted),
    }
}

fn invoke_error(workflow: &str, ns: &str, timeout: Duration, e: ExchangeError) -> InvokeError {
    let workflow = workflow.to_owned();
    match e {
        ExchangeError::Connection(source) => InvokeError::Connection { workflow, source },
        ExchangeError::NoResponders => InvokeError::NoResponders {
            workflow,
            ns: ns.to_owned(),
        },
        ExchangeError::TimedOut { sends } => InvokeError::TimedOut {
            workflow,
            timeout,
            sends,
        },
        ExchangeError::Refused(e) => InvokeError::Refused {
            workflow,
            code: e.code,
            message: e.message,
        },
        ExchangeError::Malformed(source) => InvokeError::MalformedReply { workflow, source },
    }
}

fn on_status(
    update: &TaskStatusUpdateEvent,
    nodes: &mut BTreeMap<String, String>,
    execution_id: &mut Option<String>,
    progress: &mut impl FnMut(&WorkflowDataPart),
) {
    let parts = update
        .status
        .message
        .as_ref()
        .map(|m| m.parts.as_slice())
        .unwrap_or_default();
    for part in parts.iter().filter_map(Part::as_data) {
        let Ok(Some(data)) = WorkflowDataPart::from_data(part) else {
            continue;
        };
        match &data {
            WorkflowDataPart::ExecutionStart(s) => *execution_id = Some(s.execution_id.clone()),
            WorkflowDataPart::NodeExecutionResult(r) => {
                let s = serde_json::to_value(r.status)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from));
                nodes.insert(r.node_id.clone(), s.unwrap_or_default());
            }
            _ => {}
        }
        progress(&data);
    }
}

/// The output of a reply that carries it as an object-store artifact (a large output).
async fn artifact_output(
    client: &async_nats::Client,
    ns: &str,
    uri: &str,
) -> Result<Value, InvokeError> {
    let artifacts = crate::ArtifactStore::new(client.clone(), ns);
    artifacts
        .get_uri(uri)
        .await
        .map_err(|source| InvokeError::Artifact {
            uri: uri.to_owned(),
            source,
        })
}

/// Where a run is, as `tasks/get` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    /// The A2A state of its task: working, input-required, completed, failed, canceled.
    pub state: TaskState,
    /// The run: its execution id, status, nodes, and output or error once it ended.
    pub run: WorkflowRunState,
}

/// Why [`get_run`] has no state to show.
#[derive(Debug, thiserror::Error)]
pub enum GetRunError {
    /// The request could not be sent, or had no answer in time.
    #[error("asking {workflow} for task '{task}'")]
    Request {
        /// The workflow asked.
        workflow: String,
        /// The task asked about.
        task: String,
        /// What went wrong.
        #[source]
        source: async_nats::RequestError,
    },
    /// The workflow has no run with that task id (from that caller) or execution id.
    #[error("{workflow} has no run '{task}'")]
    NotFound {
        /// The workflow asked.
        workflow: String,
        /// The task asked about.
        task: String,
    },
    /// The workflow answered with another JSON-RPC error.
    #[error("{workflow} refused the request: {message} ({code})")]
    Refused {
        /// The workflow asked.
        workflow: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The error message.
        message: String,
    },
    /// The answer is not a task with a `workflow_run_state`.
    #[error("{workflow} sent an answer that cannot be read: {detail}")]
    Malformed {
        /// The workflow asked.
        workflow: String,
        /// What was wrong with it.
        detail: String,
    },
}

/// Asks `workflow` where the run of task `task` is (`tasks/get`): `task` is the task id the
/// run was started with, by `caller` (the `Mesh-Caller` it was started with, if any), or
/// its execution id.
pub async fn get_run(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    task: &str,
    caller: Option<&str>,
) -> Result<RunState, GetRunError> {
    get_run_signed(client, ns, workflow, task, caller, None).await
}

/// [`get_run`], signed by `signer`: a run started with a signature is shown only to its
/// key and the operators'.
pub async fn get_run_signed(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    task: &str,
    caller: Option<&str>,
    signer: Option<&Signer>,
) -> Result<RunState, GetRunError> {
    let request = Request::tasks_get(format!("get-{}", uuid::Uuid::new_v4().simple()), task);
    let body = serde_json::to_vec(&request).expect("a tasks/get request serialises to JSON");
    let subject = subjects::agent_request(ns, workflow);
    let mut h = async_nats::HeaderMap::new();
    if let Some(caller) = caller {
        h.insert(headers::CALLER, caller);
    }
    let reply = crate::signing::request(client, subject, h, body.into(), signer)
        .await
        .map_err(|source| GetRunError::Request {
            workflow: workflow.to_owned(),
            task: task.to_owned(),
            source,
        })?;
    let malformed = |detail: String| GetRunError::Malformed {
        workflow: workflow.to_owned(),
        detail,
    };
    let response: Response =
        serde_json::from_slice(&reply.payload).map_err(|e| malformed(e.to_string()))?;
    let task_reply = match response.outcome {
        Outcome::Result(reply) => *reply,
        Outcome::Error(e) if e.code == codes::TASK_NOT_FOUND => {
            return Err(GetRunError::NotFound {
                workflow: workflow.to_owned(),
                task: task.to_owned(),
            })
        }
        Outcome::Error(e) => {
            return Err(GetRunError::Refused {
                workflow: workflow.to_owned(),
                code: e.code,
                message: e.message,
            })
        }
    };
    let AgentReply::Task(t) = task_reply else {
        return Err(malformed("not a task".into()));
    };
    let run = t
        .status
        .message
        .as_ref()
        .and_then(|m| m.find_data::<WorkflowRunState>())
        .ok_or_else(|| malformed("no workflow_run_state".into()))?
        .map_err(|e| malformed(format!("malformed workflow_run_state: {e}")))?;
    Ok(RunState {
        state: t.status.state,
        run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metadata of the request `start` makes.
    fn metadata_of(start: &StartAs) -> Option<Value> {
        let out = start_request("mesh", "Flow", &serde_json::json!({"x": 1}), start);
        let request: Value = serde_json::from_slice(&out.body).expect("JSON");
        request["params"]["message"].get("metadata").cloned()
    }

    #[test]
    fn a_start_carries_its_priority_and_pinned_version_in_the_metadata() {
        assert_eq!(metadata_of(&StartAs::from("t1")), None);
        let start = StartAs {
            priority: Some(1),
            version: Some("2".into()),
            ..StartAs::from("t1")
        };
        let metadata = metadata_of(&start).expect("metadata");
        assert_eq!(metadata["priority"], 1);
        assert_eq!(metadata[messages::workflow::PIN_VERSION], "2");
    }
}
