//! An approval decision sent to a workflow: recorded on the approval node it names when
//! one of the node's approvers signed it (by the definition the run started with), once
//! (its nonce is accepted once), and only the first decision on a node counts.

use std::sync::Arc;

use messages::msg_id;
use messages::workflow::{Decision, WorkflowApprovalDecision};

use super::find_run;
use crate::core::{Event, NodeStatus};
use crate::definition::{NodeKind, Workflow};
use crate::shell::callers::identity;
use crate::shell::callers::nonces;
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::envelope::Envelope;
use crate::shell::store::events::publish_event;

/// Records decision `d` on an approval node if it is signed by one of the node's approvers
/// (see `identity`), whose name it is recorded as; else says why not (the run goes on
/// waiting).
pub(super) async fn approve(
    shared: &Shared,
    served: &Arc<Workflow>,
    msg: &async_nats::Message,
    d: WorkflowApprovalDecision,
) -> Result<String, String> {
    let (execution, record) = find_run(shared, served, None, &d.execution_id)
        .await
        .ok_or_else(|| format!("no run of {} with id '{}'", served.name, d.execution_id))?;
    // The gate is the one of the run's own definition (the version it started with), not
    // the one this replica serves: its approvers may differ.
    let workflow = shared
        .versions
        .for_run(served, record.definition.as_deref())
        .await
        .map_err(|e| format!("the definition of run {execution} cannot be read: {e}"))?;
    let Some(NodeKind::Approval(def)) = workflow.node(&d.node_id).map(|n| &n.kind) else {
        return Err(format!(
            "'{}' is not an approval node of {}",
            d.node_id, workflow.name
        ));
    };
    let status = record.state.node_status(&d.node_id);
    if status != NodeStatus::Waiting {
        return Err(format!(
            "node '{}' is not waiting for a decision (it is {})",
            d.node_id,
            status.as_str()
        ));
    }
    let reply = msg.reply.as_ref().map(|r| r.as_str());
    let signed = (
        msg.headers.as_ref(),
        msg.subject.as_str(),
        reply,
        &msg.payload[..],
    );
    let by = identity::approver(&shared.config, &d.node_id, def, signed, d.by.as_deref())?;
    nonces::first_use(shared, msg.headers.as_ref())
        .await
        .map_err(|e| format!("the decision on '{}' is refused: {e}", d.node_id))?;
    let approved = d.decision == Decision::Approve;
    let event = Event::ApprovalDecided {
        node: d.node_id.clone(),
        approved,
        by: Some(by),
        comment: d.comment,
    };
    let msg_id = msg_id::approval_decision(&execution.0, &d.node_id);
    let stored = publish_event(
        shared,
        &workflow.name,
        &execution,
        &msg_id,
        &Envelope::event(event),
    )
    .await
    .map_err(|e| format!("could not record the decision: {e}"))?;
    if !stored {
        // Only a replica makes the id: another decision on the node came first.
        return Err(format!(
            "a decision on '{}' of run {execution} was already recorded: this one is not \
             (the first decision counts)",
            d.node_id
        ));
    }
    Ok(format!(
        "decision on '{}' of run {execution} recorded",
        d.node_id
    ))
}
