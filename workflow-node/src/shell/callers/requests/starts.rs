//! A `message/send` that starts a run: checked (call depth, pinned version, signature,
//! input), its `Started` event published with a message id from the caller's task id,
//! and the caller told it was accepted. A request sent again finds its run: an ended one
//! is answered from its record (see `answers`), a running one gets the caller attached
//! when it comes from another reply address. A start the store cannot take is either
//! left to the caller's resend (store out of reach) or refused with the cause.

use std::sync::Arc;
use std::time::SystemTime;

use messages::a2a::{Message, Part, TaskState};
use messages::control::WorkflowRetry;
use messages::workflow::{WorkflowNodeRequest, PIN_VERSION};
use messages::{call_proof, headers, inbound, msg_id, subjects};
use serde_json::Value;

use super::answers::answer_ended;
use super::{call_token, header, read_run};
use crate::core::{Event, ExecutionId};
use crate::definition::Workflow;
use crate::shell::callers::identity::{self, caller_name};
use crate::shell::callers::start::{check_input, publish_start};
use crate::shell::callers::steer;
use crate::shell::context::Shared;
use crate::shell::error::{Error, Result};
use crate::shell::run::envelope::{Caller, Envelope};
use crate::shell::run::names;
use crate::shell::run::record::RunRecord;
use crate::shell::run::reply;
use crate::shell::run::wire::{self, InputSource};
use crate::shell::store::events::{publish_event, store_unreachable};

/// Starts a run for a `message/send`, or, for a request sent again, answers it from the
/// ended run or attaches its caller to the running one. `Some`: the answer to send now.
pub(super) async fn start(
    shared: &Shared,
    workflow: &Arc<Workflow>,
    msg: &async_nats::Message,
    message: Message,
    id: Value,
    (reply_to, received): (Option<String>, SystemTime),
) -> Option<Vec<u8>> {
    let task_key = message
        .task_id
        .clone()
        .unwrap_or_else(|| message.message_id.clone());
    let execution =
        names::caller_execution_id(&workflow.name, caller_name(msg).as_deref(), &task_key);
    let refuse = |text: String| {
        Some(wire::response(
            &id,
            wire::task(
                &execution.0,
                &execution.0,
                TaskState::Failed,
                vec![Part::text(text)],
            ),
        ))
    };
    let h = msg.headers.as_ref();
    // A depth that is not a number is refused: read as 0, it would reset the count.
    let depth = header(h, headers::CALL_DEPTH);
    let depth: u32 = match depth.as_deref().map(|d| d.trim().parse()) {
        None => 0,
        Some(Ok(depth)) => depth,
        Some(Err(_)) => {
            let text = depth.unwrap_or_default();
            return refuse(format!(
                "{} '{text}' is not a call depth",
                headers::CALL_DEPTH
            ));
        }
    };
    if depth > workflow.max_call_depth {
        return refuse(format!(
            "call depth {depth} exceeds max_call_depth ({}) of {}",
            workflow.max_call_depth, workflow.name
        ));
    }
    // The definition the run is to use: a version the caller pins, or the one served here.
    let pinned = message
        .metadata
        .as_ref()
        .and_then(|m| m.get(PIN_VERSION))
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        });
    // The key that signed the start owns the run: only it (or an operator) may cancel it.
    // Checked once: a signature's nonce is accepted once.
    let signer = match identity::signer(shared, msg).await {
        Ok(signer) => signer,
        Err(e) => return refuse(format!("the request's signature is refused: {e}")),
    };
    // A retry runs with the definition and the input of the run it retries.
    let retried = match message.find_data::<WorkflowRetry>() {
        None => None,
        Some(Err(e)) => return refuse(format!("malformed workflow_retry: {e}")),
        Some(Ok(r)) => {
            match steer::retry_source(shared, workflow, msg, signer.as_deref(), &r).await {
                Ok(found) => Some(found),
                Err(text) => return refuse(text),
            }
        }
    };
    let pinned_workflow;
    let workflow = match (pinned, &retried) {
        (_, Some((old_workflow, _))) => &**old_workflow,
        (None, None) => &**workflow,
        (Some(version), None) => match shared.versions.pinned(workflow, &version).await {
            Ok(Some(found)) => {
                pinned_workflow = found;
                &*pinned_workflow
            }
            Ok(None) => workflow,
            Err(e) => return refuse(e.to_string()),
        },
    };
    let input = match &retried {
        Some((_, old)) => Ok(old.state.input.clone()),
        None => input_of(shared, workflow, &message).await,
    };
    let input = match input {
        Ok(input) => input,
        Err(text) => return refuse(text),
    };
    let token = match call_token(h) {
        Ok(token) => token,
        Err(e) => return refuse(e),
    };
    let priority = match crate::definition::priority_of(message.metadata.as_ref()) {
        Ok(priority) => priority,
        Err(text) => return refuse(text),
    };
    let workflow_caller = message.find_data::<WorkflowNodeRequest>().is_some();
    let caller = Caller {
        reply_to,
        status_to: header(h, headers::STATUS_TO),
        request_id: id.clone(),
        context_id: message.context_id.clone(),
        call_depth: depth,
        traceparent: header(h, headers::TRACEPARENT)
            .filter(|tp| inbound::traceparent(tp).is_some()),
        workflow_caller,
        sub_task_id: workflow_caller.then(|| task_key.clone()),
        attached: false,
        name: caller_name(msg),
        signer,
        call_token: token.as_deref().map(|t| shared.seal.wrap_token(t)),
        token_id: token.as_deref().map(|t| shared.seal.token_id(t)),
        priority,
    };
    // A plain start goes into the stream before the run is looked up, so that a worker
    // takes it while this replica looks: the look-up decides only what the caller is told.
    // A start that finds its run already started is ignored by the worker (see
    // `plan::plan`): a request sent again joins the run here, after the owner check.
    let published = match &retried {
        Some(_) => None,
        None => match publish_start(shared, workflow, &execution, &caller, input.clone()).await {
            Ok(published) => Some(published),
            // A request sent again for a run whose start is stored joins it below, whatever
            // refused this copy (a full store): only a run that does not exist is refused.
            Err(e) => match read_run(shared, workflow, &execution).await {
                Some(record) if record.state.started => None,
                _ => return unanswered_or_refused(&execution, e, refuse),
            },
        },
    };
    let found = read_run(shared, workflow, &execution).await;
    if let Some(record) = found.as_ref().filter(|r| r.state.started) {
        // A request sent again joins the run, and gets its final reply: the owner's.
        let owner = identity::may_see(
            &shared.config,
            &execution,
            &record.caller,
            caller.signer.as_deref(),
        );
        if let Err(why) = owner {
            return refuse(why);
        }
        // A run started with a call token is that call's alone: a request naming it by its
        // task id without the token (a forger that learned the id) neither joins it nor is
        // answered from it, and a call whose task id a forger took first is refused, not
        // answered with the forger's run.
        if shared.seal.token_of(&record.caller) != token {
            return refuse(format!(
                "task '{task_key}' names a run started by another call (its {} differs)",
                call_proof::CALL_TOKEN
            ));
        }
    }
    let outcome = match found {
        Some(record) if record.state.status.is_terminal() => {
            answer_ended(shared, workflow, &execution, &record, &caller, received).await
        }
        // A record that has not started holds a cancel that overtook the start: the
        // start goes into the stream, and the cancel ends the run as it starts (if the
        // same identity sent both: see `run::identity::kept_cancel_holds`).
        Some(record) if record.state.started => {
            join(shared, workflow, &execution, &record, caller, input).await
        }
        _ => {
            let published = match (published, &retried) {
                (Some(published), _) => Ok(published),
                // A retry's run is seeded with what succeeded before it starts.
                (None, Some((_, old))) => {
                    if let Err(e) = steer::seed(shared, workflow, &execution, old, &caller).await {
                        return refuse(format!("could not start the retry: {e}"));
                    }
                    publish_start(shared, workflow, &execution, &caller, input).await
                }
                (None, None) => unreachable!("a plain start is published above"),
            };
            match published {
                Ok(published) => begun(shared, workflow, &execution, &caller, published).await,
                Err(e) => Err(e),
            }
        }
    };
    outcome.unwrap_or_else(|e| unanswered_or_refused(&execution, e, refuse))
}

/// What a start that could not be stored answers. A store out of reach (no quorum on this
/// side of a partition, an election outlasting the retries) answers nothing: the event
/// may yet be stored (a publish "in process" on a leader that lost its quorum), so a
/// `failed` could contradict the run's real end, and the protocol has callers resend a
/// request that gets no answer, which joins the run or starts it once the store is back.
/// Any other cause (a full store, a limit) is told at once.
fn unanswered_or_refused(
    execution: &ExecutionId,
    error: Error,
    refuse: impl FnOnce(String) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    if store_unreachable(&error) {
        tracing::warn!("run {execution} not started yet, left to the caller's resend: {error}");
        return None;
    }
    refuse(start_refused(&error))
}

/// What a caller whose start could not be stored is told: a full store is named as such
/// (the deployment must make space; see `docs/faults.md`).
fn start_refused(e: &crate::shell::error::Error) -> String {
    if e.is_store_full() {
        format!("could not start the run: the mesh's JetStream store is full ({e})")
    } else {
        format!("could not start the run: {e}")
    }
}

/// The workflow input of a start request, checked against the input schema; the error
/// says what is wrong with it.
async fn input_of(
    shared: &Shared,
    workflow: &Workflow,
    message: &Message,
) -> std::result::Result<Value, String> {
    let bucket = subjects::artifact_bucket(&shared.ns);
    let input = match wire::request_input(message, &bucket) {
        Ok(InputSource::Inline(v)) => v,
        Ok(InputSource::Object(bucket, name)) => {
            shared.artifacts.get_in(&bucket, &name).await.map_err(|e| {
                format!("input artifact '{name}' in bucket '{bucket}' could not be read: {e}")
            })?
        }
        Err(e) => return Err(format!("invalid input: {e}")),
    };
    check_input(workflow, &input)?;
    Ok(input)
}

/// Once a new run's `Started` event is stored, tells the caller its request was accepted.
/// A request sent again before its run's record exists finds its `Started` already stored
/// (`stored` false): its caller is then attached, in case it comes from another reply
/// address.
async fn begun(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    caller: &Caller,
    (stored, envelope): (bool, Envelope),
) -> Result<Option<Vec<u8>>> {
    if !stored {
        return attach(shared, workflow, execution, envelope).await;
    }
    accept(shared, workflow, execution, caller).await;
    Ok(None)
}

/// A request sent again while its run goes on: a caller from another reply address joins
/// the run; one from the address the run will answer needs nothing.
async fn join(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    record: &RunRecord,
    caller: Caller,
    input: Value,
) -> Result<Option<Vec<u8>>> {
    if record
        .callers()
        .iter()
        .any(|c| c.reply_to == caller.reply_to)
    {
        accept(shared, workflow, execution, &caller).await;
        return Ok(None);
    }
    // A joining caller's copy of the input is not used: a large one is left out.
    let large = serde_json::to_vec(&input).map_or(true, |b| b.len() > shared.config.inline_limit);
    let input = if large { Value::Null } else { input };
    let envelope = Envelope {
        event: Event::Started { input },
        caller: Some(caller),
        attach: true,
        definition: None,
        wake: None,
    };
    attach(shared, workflow, execution, envelope).await
}

async fn attach(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    envelope: Envelope,
) -> Result<Option<Vec<u8>>> {
    let Some(caller) = envelope.caller.as_ref().filter(|c| c.reply_to.is_some()) else {
        return Ok(None);
    };
    let key = names::final_marker(&workflow.name, execution, caller);
    let msg_id = msg_id::run_attach(&key);
    publish_event(shared, &workflow.name, execution, &msg_id, &envelope).await?;
    accept(shared, workflow, execution, caller).await;
    Ok(None)
}

/// Tells the caller its request is in the run's stream (a `submitted` status update), so
/// that a caller that hears nothing knows to send it again.
async fn accept(shared: &Shared, workflow: &Workflow, execution: &ExecutionId, caller: &Caller) {
    let Some(status_to) = &caller.status_to else {
        return;
    };
    let text = Part::text(format!("accepted as run {execution} of {}", workflow.name));
    let bytes = reply::status_update(caller, execution, TaskState::Submitted, vec![text]);
    let token = shared.seal.token_of(caller);
    let h = shared
        .seal
        .answer_headers(token.as_deref(), status_to, &bytes);
    if let Err(e) = shared
        .client
        .publish_with_headers(status_to.clone(), h, bytes.into())
        .await
    {
        tracing::debug!("telling a caller that run {execution} was accepted failed: {e}");
    }
}
