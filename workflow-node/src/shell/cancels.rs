//! Cancelling a workflow's runs: a `tasks/cancel` on the workflow's request subject (from
//! a caller) or on its cancel subject `{ns}.a2a.v1.agent.cancel.{workflow}` (from a
//! workflow that called this one as an agent and stopped the call).
//!
//! A calling workflow names the run by its own sub-task id, which is the task id the run
//! was started with, so [`requests::find_run`] finds it. The cancel subject is taken in a
//! queue group: recording the cancel is the same on every replica, one is enough.

use std::sync::Arc;

use futures::StreamExt;
use messages::a2a::{Part, TaskState};
use messages::jsonrpc::{codes, ErrorObject, Method, Request, RequestId, TaskIdParams};
use messages::{msg_id, subjects};

use super::error::Result;
use super::{names, publish_event, requests, wire, Envelope, Shared};
use crate::core::{Event, ExecutionId};
use crate::definition::Workflow;

/// Subscribes to the workflow's cancel subject (in its queue group).
pub(super) async fn subscribe(
    shared: &Shared,
    workflow: &Workflow,
) -> Result<async_nats::Subscriber> {
    let subject = subjects::agent_cancel(&shared.ns, &workflow.name);
    shared.queue_subscribe(subject, &workflow.name).await
}

/// Serves the workflow's cancel subscription until it ends. Anything but a `tasks/cancel`
/// is ignored there: starts and decisions come on the request subject.
pub(super) async fn serve(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    mut sub: async_nats::Subscriber,
) -> Result<()> {
    while let Some(msg) = sub.next().await {
        let Ok(request) = Request::from_slice(&msg.payload) else {
            tracing::debug!(workflow = %workflow.name, "ignoring a malformed message on the cancel subject");
            continue;
        };
        let Method::TasksCancel(params) = request.method else {
            tracing::debug!(workflow = %workflow.name, "ignoring a non-cancel on the cancel subject");
            continue;
        };
        let shared = shared.clone();
        let workflow = workflow.clone();
        tokio::spawn(async move {
            let caller = requests::caller_name(&msg);
            let reason = reason(&params);
            let answer = cancel(
                &shared,
                &workflow,
                caller.as_deref(),
                request.id,
                &params.id,
                reason,
            )
            .await;
            if let (Some(to), Some(answer)) = (msg.reply, answer) {
                match subjects::check_reply(&shared.ns, &to) {
                    Ok(()) => drop(shared.client.publish(to, answer.into()).await),
                    Err(e) => tracing::warn!("not answering a cancel: {e}"),
                }
            }
        });
    }
    Ok(())
}

/// The reason a `tasks/cancel` gives in `metadata.reason`, if any.
pub(super) fn reason(params: &TaskIdParams) -> Option<String> {
    params
        .metadata
        .as_ref()
        .and_then(|m| m.get("reason"))
        .and_then(|r| r.as_str())
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
}

/// Records a cancel of the run named by `task_id` (its execution id, or the task id
/// `caller` started it with) as a `CancelRequested` event, with `reason` (else "requested
/// by the caller"); returns the answer to the request. A run that has ended is not
/// cancelled; one not found yet gets the cancel kept for its start.
pub(super) async fn cancel(
    shared: &Shared,
    workflow: &Workflow,
    caller: Option<&str>,
    request_id: RequestId,
    task_id: &str,
    reason: Option<String>,
) -> Option<Vec<u8>> {
    let refuse = |code, message| {
        let e = ErrorObject::new(code, message);
        Some(wire::error_response(Some(request_id.clone()), e))
    };
    let found = requests::find_run(shared, workflow, caller, task_id).await;
    let Some((execution, record)) = found else {
        // The run may not have started yet (its start is still in the stream, behind a
        // busy worker): the cancel is kept for it, and ends it as it starts.
        let execution = names::caller_execution_id(&workflow.name, caller, task_id);
        return Some(record_cancel(shared, workflow, &execution, &request_id, reason).await);
    };
    if record.state.status.is_terminal() {
        let status = record.state.status.as_str();
        let message = format!("run {execution} already ended ({status})");
        return refuse(codes::TASK_NOT_CANCELABLE, message);
    }
    Some(record_cancel(shared, workflow, &execution, &request_id, reason).await)
}

/// Publishes the cancel of run `execution` into its stream; the answer to the request.
async fn record_cancel(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    request_id: &RequestId,
    reason: Option<String>,
) -> Vec<u8> {
    let envelope = Envelope::event(Event::CancelRequested {
        reason: Some(reason.unwrap_or_else(|| "requested by the caller".into())),
    });
    let msg_id = msg_id::run_cancel(&execution.0);
    let (state, text) =
        match publish_event(shared, &workflow.name, execution, &msg_id, &envelope).await {
            Ok(_) => (
                TaskState::Working,
                format!("cancel of run {execution} requested"),
            ),
            Err(e) => (
                TaskState::Failed,
                format!("could not record the cancel: {e}"),
            ),
        };
    let id = serde_json::to_value(request_id).unwrap_or_default();
    let task = wire::task(&execution.0, &execution.0, state, vec![Part::text(text)]);
    wire::response(&id, task)
}
