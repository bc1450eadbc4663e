//! Replaying a trigger's dead letter (`workflow_trigger_replay`, operators only, as for
//! schedules): the node that takes the request takes the parked message itself, as its
//! trigger would (condition, input, de-duplication key, start: `trigger_start::take_event`),
//! with its original subject and headers and, when no `dedup_key` is declared, the key
//! derived from where it was first taken, so a replayed event that had started a run
//! starts no second one. It is not published again: its subject may be outside the
//! mesh's (an organisation's own stream), where no mesh user may publish, and a copy
//! would reach every other reader of that stream. A dead letter that starts a run (or
//! whose condition is now false) is removed; one that still cannot start one is kept, and
//! the refusal says why. A dead letter of another workflow is refused: each workflow's
//! nodes replay their own.

use messages::control::WorkflowTriggerReplay;

use crate::definition::{Trigger, Workflow};
use crate::shell::callers::identity;
use crate::shell::callers::trigger_start::{headers_of, take_event, Outcome};
use crate::shell::context::Shared;
use crate::shell::run::names::{self, dead};

/// Replays the dead letter `r` names; the answer's text, or why not.
pub(in crate::shell) async fn replay(
    shared: &Shared,
    workflow: &std::sync::Arc<Workflow>,
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
    let owner = header(dead::TRIGGER).unwrap_or_default();
    let (of, trigger_name) = owner.split_once('.').unwrap_or((&owner, ""));
    if of != workflow.name {
        return Err(format!(
            "dead letter {seq} is not one of {}'s",
            workflow.name
        ));
    }
    let trigger = workflow
        .triggers
        .iter()
        .find(|t| t.name == trigger_name && t.webhook.is_none())
        .ok_or(format!(
            "dead letter {seq}: {} declares no trigger '{trigger_name}' any more",
            workflow.name
        ))?;
    let subject = header(dead::SUBJECT).ok_or(format!("dead letter {seq} names no subject"))?;
    let mut original = headers_of(&Some(letter.headers.clone()));
    for n in dead::ALL {
        original.remove(n);
    }
    let sequence = header(dead::SEQUENCE).and_then(|s| s.parse::<u64>().ok());
    let key = match (header(dead::STREAM), sequence) {
        (Some(stream), Some(sequence)) => format!("{stream}-{sequence}"),
        // Parked by a version that did not say: the dead letter itself is the key.
        _ => format!("{name}-{seq}"),
    };
    let scope = Trigger::scope(&subject, &letter.payload, original, sequence.unwrap_or(seq));
    let done = match take_event(shared, workflow, trigger, &scope, &key).await {
        Outcome::Started(execution, true) => format!("started run {execution}"),
        Outcome::Started(execution, false) => format!("its run {execution} had been started"),
        Outcome::Ignored => "the trigger's condition is false for it: nothing started".into(),
        Outcome::Signalled => "delivered as a signal to its waiting run".into(),
        Outcome::Poison(why) | Outcome::Failed(why) => {
            return Err(format!(
                "dead letter {seq} still starts no run (kept): {why}"
            ))
        }
    };
    stream
        .delete_message(seq)
        .await
        .map_err(|e| format!("dead letter {seq} was replayed ({done}) but not removed: {e}"))?;
    Ok(format!("dead letter {seq} of trigger {owner}: {done}"))
}
