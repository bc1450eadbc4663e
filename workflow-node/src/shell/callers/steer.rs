//! Steering a run that exists, so an operator can hold, release or re-run it without a
//! new request from its caller: pausing and resuming it (`workflow_run_control`), and
//! retrying it once it has ended (`workflow_retry`). Both arrive in a `message/send` on
//! the workflow's request subject.
//!
//! Who may: the same authority as a `tasks/cancel` of the run (`identity::may_cancel`): a
//! run started with a signed request only by a request signed by the same key or an
//! operator's; an unsigned one by whoever names it by its caller's task id (under its
//! `Mesh-Caller`), or by its execution id with an operator's signature.
//!
//! A pause or resume becomes an event in the run's stream, with a message id per request
//! (a pause after a resume is a new fact). A retry is a new run: [`retry_source`] finds the
//! ended run, its definition and its input, and [`seed`] writes the new run's record
//! (what it keeps of the old one, see `core::retry_state`) before its start is published,
//! so the worker applies the start to it.

use std::sync::Arc;

use messages::control::{RunControl, WorkflowRetry, WorkflowRunControl};
use messages::msg_id;

use crate::core::{self, Event, ExecutionId, RunStatus};
use crate::definition::Workflow;
use crate::shell::callers::cancels;
use crate::shell::callers::identity;
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::apart;
use crate::shell::run::entry;
use crate::shell::run::envelope::Caller;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::names;
use crate::shell::run::record::RunRecord;
use crate::shell::store::events::publish_event;
use crate::shell::store::runs;

/// Records a pause or resume of the run `c` names, if the request's sender may steer it;
/// the text of the answer, or why not.
pub(in crate::shell) async fn control(
    shared: &Shared,
    workflow: &Workflow,
    msg: &async_nats::Message,
    request: &str,
    c: WorkflowRunControl,
) -> std::result::Result<String, String> {
    let signer = identity::signer(shared, msg)
        .await
        .map_err(|e| format!("the request's signature is refused: {e}"))?;
    let (execution, record) =
        steerable(shared, workflow, msg, signer.as_deref(), &c.execution_id).await?;
    let action = c.action.as_str();
    if record.state.status.is_terminal() {
        let status = record.state.status.as_str();
        return Err(format!(
            "run {execution} already ended ({status}): it cannot {action}"
        ));
    }
    let paused = record.state.paused.is_some();
    let stopped = record.state.cancel_requested || record.state.deadline_passed;
    let event = match c.action {
        RunControl::Pause if stopped => {
            return Err(format!(
                "run {execution} is stopping (cancelled or past its deadline): it cannot pause"
            ))
        }
        RunControl::Pause if paused => return Err(format!("run {execution} is already paused")),
        RunControl::Resume if !paused => return Err(format!("run {execution} is not paused")),
        RunControl::Pause => Event::PauseRequested { reason: c.reason },
        RunControl::Resume => Event::ResumeRequested,
    };
    let msg_id = msg_id::run_control(&execution.0, action, request);
    let stored = publish_event(
        shared,
        &workflow.name,
        &execution,
        &msg_id,
        &Envelope::event(event),
    )
    .await
    .map_err(|e| format!("could not record the {action}: {e}"))?;
    if !stored {
        return Err(format!(
            "the {action} of run {execution} by request '{request}' was already recorded: \
             this copy changes nothing"
        ));
    }
    Ok(format!("{action} of run {execution} recorded"))
}

/// The run a steering request names, if its sender (`signer`, the key whose signature
/// of the request was accepted, if any) may steer it (see the module doc).
async fn steerable(
    shared: &Shared,
    workflow: &Workflow,
    msg: &async_nats::Message,
    signer: Option<&str>,
    id: &str,
) -> std::result::Result<(ExecutionId, RunRecord), String> {
    let caller = identity::caller_name(msg);
    let found = cancels::find(shared, workflow, caller.as_deref(), id)
        .await
        .map_err(|e| format!("finding the run: {e}"))?;
    let Some((execution, record, named)) = found else {
        return Err(format!("no run of {} with id '{id}'", workflow.name));
    };
    identity::may_cancel(&shared.config, &execution, &record.caller, named, signer)?;
    Ok((execution, record))
}

/// The run a retry retries: one that ended without success (failed, cancelled), with what
/// it kept apart read back, and the definition it ran with. `signer`: the key whose
/// signature of the request was accepted, if any.
pub(in crate::shell) async fn retry_source(
    shared: &Shared,
    served: &Arc<Workflow>,
    msg: &async_nats::Message,
    signer: Option<&str>,
    r: &WorkflowRetry,
) -> std::result::Result<(Arc<Workflow>, RunRecord), String> {
    let (execution, mut record) = steerable(shared, served, msg, signer, &r.execution_id).await?;
    if !record.state.retryable() {
        let status = record.state.shown_status();
        return Err(if record.state.status == RunStatus::Success {
            format!("run {execution} succeeded: there is nothing to retry")
        } else {
            format!(
                "run {execution} has not ended (it is {status}): only a run that ended without success can be retried"
            )
        });
    }
    let key = names::run_key(&served.name, &execution);
    runs::load_apart(shared, &key, &mut record)
        .await
        .map_err(|e| format!("reading run {execution}: {e}"))?;
    let workflow = shared
        .versions
        .for_run(served, record.definition.as_deref())
        .await
        .map_err(|e| format!("the definition of run {execution} cannot be read: {e}"))?;
    Ok((workflow, record))
}

/// Writes the record a retry `execution` of `old` starts from, for `caller`, unless the run
/// has one already (a request sent again). Its start, published next, is applied to it.
pub(in crate::shell) async fn seed(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    old: &RunRecord,
    caller: &Caller,
) -> Result<()> {
    let state = core::retry_state(workflow, &old.state, execution.clone());
    let mut record = RunRecord::new(state, caller.clone());
    record.definition = Some(workflow.hash.clone());
    let key = names::run_key(&workflow.name, execution);
    let ttl = shared.config.retention;
    let apart = apart::set_apart(&mut record, &key, shared.config.inline_limit)?;
    runs::start_puts(shared, apart, ttl).await?.stored().await?;
    let bytes = entry::pack(apart::encode(&mut record)?, shared.config.record_format);
    // Created only if absent, and expiring like a kept cancel if its start never comes.
    runs::put(shared, &key, bytes, Some(0), Some(ttl)).await?;
    Ok(())
}
