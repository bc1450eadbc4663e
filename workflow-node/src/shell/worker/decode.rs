//! Decoding what a workflow's event stream delivers: a run's own events (sealed by the
//! replica that published them, see `seal`) and agents' replies (counted only when proven
//! with the token their call went out with), into the run they belong to and the core's event.

use async_nats::jetstream;
use messages::{call_proof, headers, subjects};

use crate::core::{self, Event, ExecutionId, TaskKey};
use crate::definition::Workflow;
use crate::shell::context::Shared;
use crate::shell::error::{Error, Result};
use crate::shell::mesh::seal;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::wire::{interpret_reply, reply_event, ReplyMeaning};
use crate::shell::store::runs;

/// Decodes an event message into its run and event; `None` for a message that is no
/// event (an agent's status update) or cannot be read (logged). An output artifact that
/// cannot be read for now (a lost connection) is an error, so the event comes back; one
/// that does not exist fails the call.
pub(in crate::shell) async fn decode(
    shared: &Shared,
    workflow: &Workflow,
    msg: &jetstream::Message,
) -> Result<Option<(ExecutionId, Envelope)>> {
    let token = subjects::last_token(&msg.subject);
    if msg
        .subject
        .starts_with(subjects::run_events_all(&shared.ns, &workflow.name).trim_end_matches('>'))
    {
        let Ok(execution) = ExecutionId::parse(token) else {
            return Ok(None);
        };
        if let Err(why) = sealed_event(shared, msg) {
            tracing::warn!(
                "refusing an event for run {execution} on {}: {why}",
                msg.subject
            );
            return Ok(None);
        }
        return Ok(match serde_json::from_slice::<Envelope>(&msg.payload) {
            Ok(mut env) => {
                // A start whose input was too large for the event names where it is.
                if let Event::Started { input } = &mut env.event {
                    if let Some(uri) = runs::stood_in_for(input) {
                        *input = shared.artifacts.get(uri).await?;
                    }
                }
                Some((execution, env))
            }
            Err(e) => {
                tracing::warn!("dropping a malformed event for run {execution}: {e}");
                None
            }
        });
    }
    let Some((execution, key, attempt)) = TaskKey::parse_sub_task_id(token) else {
        return Ok(None);
    };
    // A reply counts only when proven with its call's token (see `seal`).
    let mac = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(call_proof::CALL_MAC));
    let mac = mac.map(|v| v.as_str());
    if let Err(e) = shared
        .seal
        .check_call(&workflow.name, token, &msg.subject, &msg.payload, mac)
    {
        tracing::warn!("dropping a reply on {}: {e}", msg.subject);
        shared.metrics.unproven(&workflow.name, "reply");
        return Ok(None);
    }
    let meaning = match interpret_reply(&msg.payload) {
        Some(ReplyMeaning::Artifact(name)) => {
            artifact_output(&name, shared.artifacts.get(&name).await)?
        }
        Some(other) => other,
        None => return Ok(None),
    };
    let envelope = Envelope::event(reply_event(key, attempt, meaning));
    Ok(Some((execution, envelope)))
}

/// Whether an event on a run's subject was published by a replica: it carries the MAC of
/// its subject, de-duplication id and payload (see `seal`).
fn sealed_event(
    shared: &Shared,
    msg: &jetstream::Message,
) -> std::result::Result<(), &'static str> {
    let h = msg.headers.as_ref();
    let get = |name: &str| h.and_then(|h| h.get(name)).map(|v| v.as_str());
    let Some(mac) = get(seal::EVENT_MAC) else {
        return Err("it carries no Mesh-Event-Mac: only a replica may publish a run's events");
    };
    let msg_id = get(headers::MSG_ID).unwrap_or_default();
    if shared
        .seal
        .check_event(&msg.subject, msg_id, &msg.payload, mac)
    {
        Ok(())
    } else {
        Err("its Mesh-Event-Mac does not match: forged or altered")
    }
}

/// What reading an agent's output artifact means for its call: its output; a failed call
/// when the artifact is not there or not JSON (the agent's mistake); an error, so that the
/// event comes back later, when it could not be read for now.
fn artifact_output(name: &str, read: Result<serde_json::Value>) -> Result<ReplyMeaning> {
    match read {
        Ok(v) => Ok(match crate::limits::check_depth("the output", &v) {
            Ok(()) => ReplyMeaning::Output(v),
            Err(e) => ReplyMeaning::Failed(core::Failure {
                class: core::FailureClass::Failed,
                message: format!("the agent's output artifact '{name}' was refused: {e}"),
                kind: None,
            }),
        }),
        Err(e @ (Error::Connection { .. } | Error::Setup { .. })) => Err(e),
        Err(e) => Ok(ReplyMeaning::Failed(core::Failure {
            class: core::FailureClass::Failed,
            message: format!("the agent's output artifact '{name}' could not be read: {e}"),
            kind: None,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_that_cannot_be_read_for_now_brings_the_event_back() {
        let lost = Error::Connection {
            context: "reading artifact a".into(),
            source: "connection lost".into(),
        };
        assert!(artifact_output("a", Err(lost)).is_err());
    }

    #[test]
    fn a_missing_or_malformed_artifact_fails_the_call() {
        let missing = Error::Missing("artifact 'a' in bucket 'b'".into());
        match artifact_output("a", Err(missing)) {
            Ok(ReplyMeaning::Failed(f)) => assert!(f.message.contains("'a' could not be read")),
            other => panic!("expected a failed call, got {other:?}"),
        }
        let ok = artifact_output("a", Ok(serde_json::json!({"x": 1}))).expect("an output");
        assert_eq!(ok, ReplyMeaning::Output(serde_json::json!({"x": 1})));
    }
}
