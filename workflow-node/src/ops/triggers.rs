//! Triggers' dead letters, for every face: listing them (read from the dead-letter stream,
//! nothing written) and replaying one by asking its workflow's nodes, which check that an
//! operator asks.

use messages::a2a::{Message, Part, Role};
use messages::control::WorkflowTriggerReplay;
use messages::jsonrpc::Request;
use serde::Serialize;

use crate::shell::run::names::{self, dead};

use super::ask::{ask, completed};
use super::refusal::{Refusal, RefusalKind};

/// The most dead letters listed at once (the newest).
pub const MAX_LISTED: u64 = 1000;

/// One parked message.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// Its sequence in the dead-letter stream (what `replay` names).
    pub sequence: u64,
    /// The workflow whose trigger parked it.
    pub workflow: String,
    /// The trigger.
    pub trigger: String,
    /// The subject it was published on.
    pub subject: String,
    /// Why it started no run.
    pub reason: String,
    /// When it was parked (RFC 3339).
    pub parked_at: String,
    /// Its payload, as text (lossy), at most 1 KiB.
    pub payload: String,
}

/// The dead letters of namespace `ns` (of `workflow`, when given), oldest first.
pub async fn list(
    client: &async_nats::Client,
    ns: &str,
    workflow: Option<&str>,
) -> Result<Vec<DeadLetter>, Refusal> {
    let js = async_nats::jetstream::new(client.clone());
    let Ok(mut stream) = js.get_stream(names::dead_letter_stream(ns)).await else {
        return Ok(Vec::new());
    };
    let info = stream
        .info()
        .await
        .map_err(|e| Refusal::unavailable(format!("reading the dead letters: {e}")))?;
    let (first, last) = (info.state.first_sequence, info.state.last_sequence);
    let mut letters = Vec::new();
    for seq in first.max(last.saturating_sub(MAX_LISTED - 1))..=last {
        let Ok(m) = stream.get_raw_message(seq).await else {
            continue; // replayed, or expired
        };
        let header = |n: &str| {
            m.headers
                .get(n)
                .map(|v| v.as_str().to_string())
                .unwrap_or_default()
        };
        let owner = header(dead::TRIGGER);
        let (wf, trigger) = owner.split_once('.').unwrap_or((&owner, ""));
        if workflow.is_some_and(|only| only != wf) {
            continue;
        }
        let payload = String::from_utf8_lossy(&m.payload[..m.payload.len().min(1024)]);
        letters.push(DeadLetter {
            sequence: seq,
            workflow: wf.to_string(),
            trigger: trigger.to_string(),
            subject: header(dead::SUBJECT),
            reason: header(dead::REASON),
            parked_at: m.time.to_string(),
            payload: payload.into_owned(),
        });
    }
    Ok(letters)
}

/// Asks the nodes serving `workflow` to replay dead letter `sequence`, signed by `signer`.
pub async fn replay(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    sequence: u64,
    signer: Option<&agent_sdk::Signer>,
) -> Result<String, Refusal> {
    let part = WorkflowTriggerReplay { sequence };
    let message_id = format!("replay-{}", uuid::Uuid::new_v4().simple());
    let message = Message::new(message_id.clone(), Role::User, vec![Part::data_part(&part)]);
    let request = Request::message_send(message_id.as_str(), message);
    let answer = ask(client, ns, workflow, &request, signer).await?;
    completed(answer, RefusalKind::Conflict, || {
        format!("{workflow} gave an answer that is not a task")
    })
}
