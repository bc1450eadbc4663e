//! The agent-card registry: every card seen on the discovery subject, and our own cards,
//! published at start, on an interval, and when pinged, kept in an `agent_sdk::CardCache`
//! (the cache callers and the web view keep too).
//!
//! A card seen on the mesh expires when no new copy arrives for [`CARD_EXPIRY_INTERVALS`]
//! card intervals: its agent is gone, and a call to it should fail with "has no card"
//! rather than wait on a subject nobody serves. Our own cards never expire.
//!
//! A card travels in one NATS message. One larger than the server's maximum payload (a
//! workflow of thousands of nodes has a diagram of megabytes) is published with its
//! visualization in the artifact object store and a `content_uri` in its place; a reader
//! gets it back with [`full_card`].
//!
//! Our cards go out signed by the deployment's card key (see `seal`: derived from the
//! secret every replica shares, so replicas sign as one), and cards from the mesh count
//! only when their signer may speak for their name (the node's `CardTrust`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agent_sdk::pings::PingGate;
use agent_sdk::CardCache;
use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;
use sha2::{Digest, Sha256};

use crate::shell::error::{Context, Error, Result};
use crate::shell::mesh::artifacts::Artifacts;

/// How many card intervals a card of another agent lives without a new copy.
pub const CARD_EXPIRY_INTERVALS: u32 = 3;

/// The card of `name` in `registry`, waiting up to `wait` for it to arrive after asking
/// every agent to republish. `None` when it does not.
pub(in crate::shell) async fn wait_for(
    registry: &CardCache,
    client: &async_nats::Client,
    ns: &str,
    name: &str,
    wait: Duration,
) -> Option<AgentCard> {
    if let Some(card) = registry.get(name) {
        return Some(card);
    }
    let _ = client
        .publish(subjects::discovery_ping(ns), "".into())
        .await;
    registry.wait_for(name, wait).await
}

/// Keeps the registry up to date from the discovery subject (`sub`, from
/// [`subscribe_cards`]).
pub(in crate::shell) async fn watch_cards(
    registry: Arc<CardCache>,
    mut sub: async_nats::Subscriber,
) {
    while let Some(msg) = sub.next().await {
        // An ignored card is counted and warned about by the registry.
        if let Err(agent_sdk::CardRefused::Malformed(e)) =
            registry.receive(&msg.payload, msg.headers.as_ref())
        {
            tracing::debug!("ignoring a malformed agent card: {e}");
        }
    }
    tracing::warn!("the agent-card subscription ended: the registry no longer updates");
}

/// The subscriptions of the registry: cards, and discovery pings.
pub(in crate::shell) async fn subscribe_cards(
    client: &async_nats::Client,
    ns: &str,
) -> Result<(async_nats::Subscriber, async_nats::Subscriber)> {
    let cards = subjects::agent_cards(ns);
    let cards = client
        .subscribe(cards.clone())
        .await
        .context(|| format!("subscribing to agent cards on {cards}"))?;
    let pings = subjects::discovery_ping(ns);
    let pings = client
        .subscribe(pings.clone())
        .await
        .context(|| format!("subscribing to discovery pings on {pings}"))?;
    Ok((cards, pings))
}

/// Our cards as they are published, each encoded: a card larger than the server's maximum
/// payload has its visualization stored in the artifact bucket (under a name derived from
/// its content, so replicas agree) and a reference in its place. A card still too large
/// after that cannot be published at all: that is an error.
pub(in crate::shell) async fn wire_cards(
    client: &async_nats::Client,
    cards: &HashMap<String, AgentCard>,
    artifacts: &Artifacts,
) -> Result<Vec<(String, Vec<u8>)>> {
    let limit = match client.server_info().max_payload {
        0 => 1024 * 1024,
        n => n,
    };
    let mut wire = Vec::new();
    for card in cards.values() {
        let mut bytes = encode(card)?;
        if bytes.len() > limit {
            let stored = store_visualization(artifacts, card).await?;
            let size = bytes.len();
            bytes = encode(&stored)?;
            if bytes.len() > limit {
                return Err(Error::CardTooLarge {
                    workflow: card.name.clone(),
                    size: bytes.len(),
                    limit,
                });
            }
            tracing::info!(
                "the card of {} is {size} bytes, over the server's limit of {limit}: its \
                 visualization is in the object store ({} bytes published)",
                card.name,
                bytes.len()
            );
        }
        wire.push((card.name.clone(), bytes));
    }
    Ok(wire)
}

fn encode(card: &AgentCard) -> Result<Vec<u8>> {
    serde_json::to_vec(card).context(|| format!("encoding the card of {}", card.name))
}

/// Puts `card`'s visualization params into the card bucket; the card referring to them.
async fn store_visualization(artifacts: &Artifacts, card: &AgentCard) -> Result<AgentCard> {
    let params = card.visualization_params().cloned().unwrap_or_default();
    let bytes = serde_json::to_vec(&params)
        .context(|| format!("encoding the visualization of {}", card.name))?;
    let digest = hex::encode(Sha256::digest(&bytes));
    let name = format!("cards/{}/visualization-{digest}.json", card.name);
    let uri = artifacts
        .put_card(&name, bytes)
        .await
        .context(|| format!("storing the visualization of {} as {name}", card.name))?;
    Ok(card.clone().with_visualization_ref(uri))
}

/// `card` with its visualization inline: read back from the object store when the card
/// carries only a reference to it (see [`AgentCard::visualization_ref`]), as is otherwise.
/// One reading for the node and the SDK ([`agent_sdk::catalog::with_visualization`]): only
/// the namespace's card and artifact buckets, each read bounded.
pub async fn full_card(
    client: &async_nats::Client,
    ns: &str,
    card: AgentCard,
) -> Result<AgentCard> {
    agent_sdk::catalog::with_visualization(client, ns, card)
        .await
        .map_err(super::artifacts::artifact_error)
}

/// Publishes our cards (`wire`, from [`wire_cards`]), each copy signed by `signer`, at
/// start, every interval, and in answer to discovery pings (`pings`), at most once per
/// `agent_sdk::pings::PING_ANSWER_GAP` however many arrive (see `agent_sdk::pings`). A card
/// that cannot be published is logged with its name and size, and the others, and later
/// rounds, go on.
pub(in crate::shell) async fn publish_cards(
    client: async_nats::Client,
    ns: String,
    interval: Duration,
    (wire, signer): (Vec<(String, Vec<u8>)>, agent_sdk::Signer),
    mut pings: async_nats::Subscriber,
) {
    let mut tick = tokio::time::interval(interval);
    let mut gate = PingGate::default();
    let mut pinging = true;
    loop {
        let owed = gate.due();
        let owed_at = tokio::time::Instant::from_std(owed.unwrap_or_else(Instant::now));
        let for_pings = tokio::select! {
            _ = tick.tick() => false,
            _ = tokio::time::sleep_until(owed_at), if owed.is_some() => true,
            ping = pings.next(), if pinging => match ping {
                Some(_) if gate.ping(Instant::now()) => true,
                Some(_) => continue,
                None => {
                    tracing::warn!("the discovery-ping subscription ended: cards go out on \
                                    the interval only");
                    pinging = false;
                    continue;
                }
            },
        };
        publish_round(&client, &ns, &wire, &signer).await;
        if for_pings {
            gate.published(Instant::now());
        }
    }
}

async fn publish_round(
    client: &async_nats::Client,
    ns: &str,
    wire: &[(String, Vec<u8>)],
    signer: &agent_sdk::Signer,
) {
    let subject = subjects::agent_cards(ns);
    for (name, bytes) in wire {
        let headers = agent_sdk::card_trust::sign_card(signer, name, bytes, SystemTime::now());
        let sent = client
            .publish_with_headers(subject.clone(), headers, bytes.clone().into())
            .await;
        if let Err(e) = sent {
            tracing::warn!(
                "the card of {name} ({} bytes) could not be published: {e}",
                bytes.len()
            );
        }
    }
}
