//! The agent-card registry: every card seen on the discovery subject, and our own cards,
//! published at start, on an interval, and when pinged.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;
use tokio::sync::Notify;

use super::Shared;

/// Cards by agent name.
#[derive(Default)]
pub struct Registry {
    cards: RwLock<HashMap<String, AgentCard>>,
    arrived: Notify,
}

impl Registry {
    /// Records a card.
    pub fn insert(&self, card: AgentCard) {
        if let Ok(mut cards) = self.cards.write() {
            cards.insert(card.name.clone(), card);
        }
        self.arrived.notify_waiters();
    }

    /// The card of `name`, if seen.
    pub fn get(&self, name: &str) -> Option<AgentCard> {
        self.cards.read().ok()?.get(name).cloned()
    }

    /// Names of every agent seen.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .cards
            .read()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The card of `name`, waiting up to `wait` for it to arrive (after asking every agent
    /// to republish). `None` when it does not.
    pub async fn wait_for(&self, shared: &Shared, name: &str, wait: Duration) -> Option<AgentCard> {
        if let Some(card) = self.get(name) {
            return Some(card);
        }
        let deadline = tokio::time::Instant::now() + wait;
        let _ = shared
            .client
            .publish(subjects::discovery_ping(&shared.ns), "".into())
            .await;
        loop {
            let arrived = self.arrived.notified();
            if let Some(card) = self.get(name) {
                return Some(card);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.get(name);
            }
        }
    }
}

/// Keeps the registry up to date from the discovery subject (`sub`, from
/// [`subscribe_cards`]).
pub(super) async fn watch_cards(
    shared: Arc<Shared>,
    mut sub: async_nats::Subscriber,
) -> Result<(), async_nats::Error> {
    while let Some(msg) = sub.next().await {
        match serde_json::from_slice::<AgentCard>(&msg.payload) {
            Ok(card) => shared.registry.insert(card),
            Err(e) => tracing::debug!("ignoring a malformed agent card: {e}"),
        }
    }
    Ok(())
}

/// The subscriptions of the registry: cards, and discovery pings.
pub(super) async fn subscribe_cards(
    shared: &Shared,
) -> Result<(async_nats::Subscriber, async_nats::Subscriber), async_nats::Error> {
    let cards = shared
        .client
        .subscribe(subjects::agent_cards(&shared.ns))
        .await?;
    let pings = shared
        .client
        .subscribe(subjects::discovery_ping(&shared.ns))
        .await?;
    Ok((cards, pings))
}

/// Publishes our cards at start, every interval, and on every discovery ping (`pings`).
pub(super) async fn publish_cards(
    shared: Arc<Shared>,
    mut pings: async_nats::Subscriber,
) -> Result<(), async_nats::Error> {
    let mut tick = tokio::time::interval(shared.config.card_interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            ping = pings.next() => if ping.is_none() { return Ok(()) },
        }
        for card in shared.cards.values() {
            shared.registry.insert(card.clone());
            let bytes = serde_json::to_vec(card)?;
            shared
                .client
                .publish(subjects::agent_cards(&shared.ns), bytes.into())
                .await?;
        }
    }
}
