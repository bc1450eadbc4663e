//! Cancelling a workflow's runs: a `tasks/cancel` on the workflow's request subject (from
//! a caller) or on its cancel subject `{ns}.a2a.v1.agent.cancel.{workflow}` (from a
//! workflow that called this one as an agent and stopped the call).
//!
//! A calling workflow names the run by its own sub-task id, which is the task id the run
//! was started with, under its name (`Mesh-Caller`), and proves the cancel with the call
//! token the run was started with (`Mesh-Call-Mac`). Who may cancel which run, and how a
//! cancel that overtakes its run's start is kept, is `identity`'s to say. The cancel
//! subject is taken in a queue group: recording the cancel is the same on every replica,
//! one is enough.

use std::sync::Arc;

use futures::StreamExt;
use messages::a2a::{Part, TaskState};
use messages::jsonrpc::{codes, ErrorObject, Method, Request, RequestId, TaskIdParams};
use messages::{call_proof, msg_id, subjects};

use crate::core::{Event, ExecutionId};
use crate::definition::Workflow;
use crate::shell::callers::early;
use crate::shell::callers::identity::{self, Named};
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::envelope::Caller;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::names;
use crate::shell::run::record::RunRecord;
use crate::shell::run::wire;
use crate::shell::store::events::publish_event;
use crate::shell::store::runs;

/// Subscribes to the workflow's cancel subject (in its queue group).
pub(in crate::shell) async fn subscribe(
    shared: &Shared,
    workflow: &Workflow,
) -> Result<async_nats::Subscriber> {
    let subject = subjects::agent_cancel(&shared.ns, &workflow.name);
    shared.queue_subscribe(subject, &workflow.name).await
}

/// Serves the workflow's cancel subscription until it ends. Anything but a `tasks/cancel`
/// is ignored there: starts and decisions come on the request subject.
pub(in crate::shell) async fn serve(
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
        if let Err(e) = identity::check_headers(msg.headers.as_ref()) {
            tracing::warn!(workflow = %workflow.name, "ignoring a cancel: {e}");
            continue;
        }
        let shared = shared.clone();
        let workflow = workflow.clone();
        tokio::spawn(async move {
            let reason = reason(&params);
            let answer = cancel(&shared, &workflow, &msg, request.id, &params.id, reason).await;
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
pub(in crate::shell) fn reason(params: &TaskIdParams) -> Option<String> {
    params
        .metadata
        .as_ref()
        .and_then(|m| m.get("reason"))
        .and_then(|r| r.as_str())
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
}

/// Records a cancel of the run named by `task_id` (the task id the cancel's caller, its
/// `Mesh-Caller`, started it with, or its execution id) as a `CancelRequested` event, with
/// `reason` (else "requested by the caller"), if the cancel's sender may cancel it (see
/// `identity`); returns the answer to the request. A run that has ended is not cancelled;
/// one not found yet gets the cancel kept for its start, with the key that signed it.
pub(in crate::shell) async fn cancel(
    shared: &Shared,
    workflow: &Workflow,
    msg: &async_nats::Message,
    request_id: RequestId,
    task_id: &str,
    reason: Option<String>,
) -> Option<Vec<u8>> {
    let refuse = |code, message| {
        let e = ErrorObject::new(code, message);
        Some(wire::error_response(Some(request_id.clone()), e))
    };
    let signer = match identity::signer(shared, msg).await {
        Ok(signer) => signer,
        Err(e) => {
            let message = format!("the cancel's signature is refused: {e}");
            return refuse(codes::NOT_PERMITTED, message);
        }
    };
    let caller = identity::caller_name(msg);
    let found = match find(shared, workflow, caller.as_deref(), task_id).await {
        Ok(found) => found,
        Err(e) => return refuse(codes::INTERNAL_ERROR, format!("finding the run: {e}")),
    };
    let Some((execution, record, named)) = found else {
        // The run may not have started yet (its start is still in the stream, behind a
        // busy worker): the cancel is kept for it, under the execution the caller's name
        // and task id make, and ends it as it starts if the same identity started it.
        let execution = names::caller_execution_id(&workflow.name, caller.as_deref(), task_id);
        let by = Caller {
            name: caller,
            signer,
            ..Caller::default()
        };
        if let Err(why) = early::take_slot(shared, &by, &execution).await {
            tracing::warn!(workflow = %workflow.name, "an early cancel refused: {why}");
            return refuse(codes::NOT_PERMITTED, why);
        }
        let sent = Sent { by, checked: false };
        return Some(record_cancel(shared, workflow, &execution, &request_id, reason, sent).await);
    };
    if record.state.status.is_terminal() {
        let status = record.state.status.as_str();
        let message = format!("run {execution} already ended ({status})");
        return refuse(codes::TASK_NOT_CANCELABLE, message);
    }
    // A run a calling workflow started with a call token is stopped, unsigned, only by
    // that caller: its cancel is proven with the token (see `messages::call_proof`).
    if let (Some(token), None) = (shared.seal.token_of(&record.caller), &signer) {
        let mac = msg
            .headers
            .as_ref()
            .and_then(|h| h.get(call_proof::CALL_MAC));
        let proven = mac.is_some_and(|mac| {
            call_proof::verify(&token, msg.subject.as_str(), &msg.payload, mac.as_str())
        });
        if !proven {
            let why = format!(
                "run {execution} was started by a call: only a cancel proven with its {} may stop it",
                call_proof::CALL_MAC
            );
            tracing::warn!(workflow = %workflow.name, "a cancel refused: {why}");
            return refuse(codes::NOT_PERMITTED, why);
        }
    }
    let permitted = identity::may_cancel(
        &shared.config,
        &execution,
        &record.caller,
        named,
        signer.as_deref(),
    );
    if let Err(why) = permitted {
        tracing::warn!(workflow = %workflow.name, "a cancel of run {execution} refused: {why}");
        return refuse(codes::NOT_PERMITTED, why);
    }
    let by = Caller {
        name: caller,
        signer,
        ..Caller::default()
    };
    let sent = Sent { by, checked: true };
    Some(record_cancel(shared, workflow, &execution, &request_id, reason, sent).await)
}

/// Who sent a cancel (its caller name and signing key), and whether it was checked
/// against the run's caller here: an unchecked one (for a run not found, whose start may
/// still be in the stream) carries its sender in the event, and the worker lets it end
/// the run only if the run's caller sent it.
struct Sent {
    by: Caller,
    checked: bool,
}

/// The run a cancel names: by the task id `caller` started it with, else by its execution
/// id; with how it was named.
pub(in crate::shell) async fn find(
    shared: &Shared,
    workflow: &Workflow,
    caller: Option<&str>,
    id: &str,
) -> Result<Option<(ExecutionId, RunRecord, Named)>> {
    let mut candidates = vec![(
        names::caller_execution_id(&workflow.name, caller, id),
        Named::TaskId,
    )];
    if let Ok(direct) = ExecutionId::parse(id) {
        candidates.push((direct, Named::ExecutionId));
    }
    for (execution, named) in candidates {
        let key = names::run_key(&workflow.name, &execution);
        if let Some((_, record)) = runs::read_record(shared, &key).await? {
            return Ok(Some((execution, record, named)));
        }
    }
    Ok(None)
}

/// Publishes the cancel of run `execution` into its stream (see [`Sent`]); the answer to
/// the request.
async fn record_cancel(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    request_id: &RequestId,
    reason: Option<String>,
    sent: Sent,
) -> Vec<u8> {
    let msg_id = msg_id::run_cancel(&execution.0, sent.by.signer.as_deref());
    let envelope = Envelope {
        caller: (!sent.checked).then_some(sent.by),
        ..Envelope::event(Event::CancelRequested {
            reason: Some(reason.unwrap_or_else(|| "requested by the caller".into())),
        })
    };
    let (state, text) = match publish_event(shared, &workflow.name, execution, &msg_id, &envelope)
        .await
    {
        Ok(true) => (
            TaskState::Working,
            format!("cancel of run {execution} requested"),
        ),
        // Only a replica makes the id: this identity's cancel is recorded already.
        Ok(false) => (
            TaskState::Working,
            format!("cancel of run {execution} was already requested: this one changes nothing"),
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
