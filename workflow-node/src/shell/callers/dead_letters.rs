//! Replaying a trigger's dead letter (`workflow_trigger_replay`, operators only, as for
//! schedules): the parked message is published again on the subject it was first
//! published on, with its own headers (the dead letter's are left off), so the trigger
//! takes it again (its de-duplication key still holds); then it is removed from the dead
//! letters. A dead letter of another workflow is refused: each workflow's nodes replay
//! their own.

use async_nats::HeaderMap;
use messages::control::WorkflowTriggerReplay;

use crate::definition::Workflow;
use crate::shell::callers::identity;
use crate::shell::context::Shared;
use crate::shell::run::names::{self, dead};

/// Replays the dead letter `r` names; the answer's text, or why not.
pub(in crate::shell) async fn replay(
    shared: &Shared,
    workflow: &Workflow,
    msg: &async_nats::Message,
    r: WorkflowTriggerReplay,
) -> Result<String, String> {
    let what = format!("dead letters of {} are replayed", workflow.name);
    identity::operator_only(shared, msg, &what).await?;
    let name = names::dead_letter_stream(&shared.ns);
    let stream = shared
        .js
        .get_stream(&name)
        .await
        .map_err(|e| format!("no dead letters here ({name}: {e})"))?;
    let seq = r.sequence;
    let letter = stream
        .get_raw_message(seq)
        .await
        .map_err(|_| format!("no dead letter {seq}"))?;
    let header = |n: &str| letter.headers.get(n).map(|v| v.as_str().to_string());
    let trigger = header(dead::TRIGGER).unwrap_or_default();
    if trigger.split('.').next() != Some(workflow.name.as_str()) {
        return Err(format!(
            "dead letter {seq} is not one of {}'s",
            workflow.name
        ));
    }
    let subject = header(dead::SUBJECT).ok_or(format!("dead letter {seq} names no subject"))?;
    let mut original = HeaderMap::new();
    for (n, values) in letter.headers.iter() {
        if [dead::SUBJECT, dead::REASON, dead::TRIGGER].contains(&n.as_ref()) {
            continue;
        }
        for v in values {
            original.append(n.as_ref(), v.as_str());
        }
    }
    let sent = shared
        .js
        .publish_with_headers(subject.clone(), original, letter.payload.clone())
        .await;
    async { sent?.await }
        .await
        .map_err(|e| format!("dead letter {seq} could not be published again: {e}"))?;
    stream
        .delete_message(seq)
        .await
        .map_err(|e| format!("dead letter {seq} was replayed but not removed: {e}"))?;
    Ok(format!(
        "dead letter {seq} of trigger {trigger} published again on {subject}"
    ))
}
