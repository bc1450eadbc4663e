//! Answers read from a run's record: the final reply of an ended run for a caller that
//! asked again (sent only by whoever holds the right to send it, so that no caller gets
//! two), and the state of a run for `tasks/get`.

use std::time::SystemTime;

use messages::a2a::{Part, TaskState};
use messages::jsonrpc::{codes, ErrorObject};
use serde_json::Value;

use crate::core::ExecutionId;
use crate::definition::Workflow;
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::envelope::Caller;
use crate::shell::run::names;
use crate::shell::run::record::RunRecord;
use crate::shell::run::reply;
use crate::shell::run::wire;
use crate::shell::worker::effects;
use crate::shell::worker::final_claim::{Claimant, Markers};

/// The final reply of an ended run, for a caller that asked again (its request `received`
/// then): sent only with the right to send it ([`crate::shell::worker::final_claim`]),
/// which the replica ending the run may hold (its reply is on its way, or the run's outbox
/// has yet to send it), so that no caller gets two.
pub(super) async fn answer_ended(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    record: &RunRecord,
    caller: &Caller,
    received: SystemTime,
) -> Result<Option<Vec<u8>>> {
    let Some(address) = &caller.reply_to else {
        return Ok(None);
    };
    // The starting caller's reply is claimed once per run; another address's per address.
    let marker = if record.caller.reply_to.as_ref() == Some(address) {
        names::final_marker(&workflow.name, execution, &record.caller)
    } else {
        let attached = Caller {
            attached: true,
            ..caller.clone()
        };
        names::final_marker(&workflow.name, execution, &attached)
    };
    // Built before the right to send is taken: once taken, the reply leaves at once.
    let ending = ended_run(shared, execution, record)?;
    let dialect = shared.config.dialect;
    let reply = reply::final_reply(workflow, execution, caller, &ending, dialect);
    let markers = Markers::of(shared);
    let sent = match markers.claim(&marker, Claimant::Answerer, received).await? {
        Some(claim) => {
            let token = shared.seal.token_of(caller);
            let (to, status) = (address, ending.status);
            let token = token.as_deref();
            markers
                .send(&marker, claim, to, reply, status, token)
                .await?;
            true
        }
        None => false,
    };
    if !sent {
        // A sign of life, so that the caller waits for the reply on its way.
        if let Some(status_to) = &caller.status_to {
            let text = Part::text(format!(
                "run {execution} has ended: its final reply is on its way to this address"
            ));
            let bytes = reply::status_update(caller, execution, TaskState::Working, vec![text]);
            let token = shared.seal.token_of(caller);
            let h = shared
                .seal
                .answer_headers(token.as_deref(), status_to, &bytes);
            let _ = shared
                .client
                .publish_with_headers(status_to.clone(), h, bytes.into())
                .await;
        }
    }
    // Sent (and marked so) here, not returned: the mark must follow the reply.
    Ok(None)
}

/// How the ended run of `record` ended, as its callers are told: a large output is named
/// by the artifact the commit ending the run stored, never stored again here.
fn ended_run(
    shared: &Shared,
    execution: &ExecutionId,
    record: &RunRecord,
) -> Result<reply::Ending> {
    let state = &record.state;
    effects::ending(
        shared,
        execution,
        state.status,
        state.output.as_ref(),
        record.output_artifact,
        state.error.as_ref(),
    )
}

/// The answer to `tasks/get` of run `execution`, asked for by `task_id` (see
/// `reply::run_state`); an ended run's large output is named by its artifact.
pub(super) async fn run_state(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    record: &RunRecord,
    task_id: &str,
    request_id: &Value,
) -> Vec<u8> {
    let state = &record.state;
    let ending = if state.status.is_terminal() {
        let ending = ended_run(shared, execution, record);
        match ending {
            Ok(ending) => Some(ending),
            Err(e) => {
                let e = ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    format!("reading how run {execution} ended: {e}"),
                );
                let id = serde_json::from_value(request_id.clone()).ok();
                return wire::error_response(id, e);
            }
        }
    } else {
        None
    };
    let context = record.caller.context_id.as_deref().unwrap_or(&execution.0);
    let task = reply::run_state(
        workflow,
        execution,
        task_id,
        context,
        state,
        ending.as_ref(),
    );
    wire::response(request_id, task)
}
