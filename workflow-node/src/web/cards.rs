//! The cards on the mesh, as the web view shows them: every card that arrived on the cards
//! subject, with when it last did. At start, and on [`Cards::refresh`], a discovery ping
//! asks every agent and workflow to publish its card now.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use anyhow::Result;
use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;

use crate::core::Millis;
use crate::shell::now;

/// Cards by name, with when each last arrived.
#[derive(Debug)]
pub(super) struct Cards {
    client: async_nats::Client,
    ns: String,
    seen: RwLock<BTreeMap<String, (AgentCard, Millis)>>,
}

impl Cards {
    /// Every card, by name, with when it last arrived.
    pub(super) fn all(&self) -> Vec<(AgentCard, Millis)> {
        self.seen
            .read()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The card named `name`, if one arrived.
    pub(super) fn get(&self, name: &str) -> Option<(AgentCard, Millis)> {
        self.seen.read().ok()?.get(name).cloned()
    }

    /// Asks every agent to publish its card now.
    pub(super) async fn refresh(&self) -> Result<()> {
        self.client
            .publish(subjects::discovery_ping(&self.ns), "".into())
            .await?;
        Ok(())
    }

    fn insert(&self, card: AgentCard) {
        if let Ok(mut seen) = self.seen.write() {
            seen.insert(card.name.clone(), (card, now()));
        }
    }
}

/// The task that keeps the cards; dropping it stops it.
#[derive(Debug)]
pub(super) struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Subscribes to the cards of namespace `ns`, pings discovery, and keeps the cards.
pub(super) async fn follow(client: async_nats::Client, ns: &str) -> Result<(Arc<Cards>, Watch)> {
    let mut sub = client.subscribe(subjects::agent_cards(ns)).await?;
    client.flush().await?;
    let cards = Arc::new(Cards {
        client,
        ns: ns.to_owned(),
        seen: RwLock::new(BTreeMap::new()),
    });
    let kept = cards.clone();
    let task = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            match serde_json::from_slice::<AgentCard>(&msg.payload) {
                Ok(card) => kept.insert(card),
                Err(e) => tracing::debug!("ignoring a malformed agent card: {e}"),
            }
        }
    });
    cards.refresh().await?;
    Ok((cards, Watch(task)))
}
