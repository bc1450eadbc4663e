//! The cards on the mesh, as the web view shows them: every card that arrived on the cards
//! subject, with when it last did, kept by an `agent_sdk::Catalog` for [`CARDS_KEPT`]
//! after its last copy (the view shows how long ago each was seen), and at most
//! `agent_sdk::cards::MAX_CARDS` of them: anyone allowed to publish a card can publish
//! thousands. At start, and on [`Cards::refresh`], a discovery ping asks every agent and
//! workflow to publish its card now. Only cards signed as the view's `CardTrust` says are kept (see
//! `agent_sdk::card_trust`): an impostor's description or form never shows.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use messages::card::AgentCard;

use crate::core::Millis;

/// How long the view keeps a card without a new copy: thirty default card intervals, so an
/// agent that stopped still shows for a while, with how long ago it was seen.
pub(super) const CARDS_KEPT: Duration = Duration::from_secs(300);

/// Cards by name, with when each last arrived; the watch stops when this is dropped.
#[derive(Debug)]
pub(super) struct Cards(agent_sdk::Catalog);

impl Cards {
    /// Every card, by name, with when it last arrived.
    pub(super) fn all(&self) -> Vec<(AgentCard, Millis)> {
        let seen = self.0.cache().live_seen();
        seen.into_iter()
            .map(|(card, at)| (card, millis(at)))
            .collect()
    }

    /// The card named `name`, if one arrived.
    pub(super) fn get(&self, name: &str) -> Option<(AgentCard, Millis)> {
        let (card, at) = self.0.cache().get_seen(name)?;
        Some((card, millis(at)))
    }

    /// Which keys may sign which cards (the cards here, and a run's definition read from a
    /// workflow's card).
    pub(super) fn trust(&self) -> &agent_sdk::CardTrust {
        self.0.mesh().cards_trusted()
    }

    /// Asks every agent to publish its card now.
    pub(super) async fn refresh(&self) -> Result<()> {
        Ok(self.0.refresh().await?)
    }
}

/// `at` in milliseconds since the Unix epoch.
fn millis(at: SystemTime) -> Millis {
    let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Subscribes to the cards of namespace `ns`, pings discovery, and keeps the cards that
/// `trust` takes.
pub(super) async fn follow(
    client: async_nats::Client,
    ns: &str,
    trust: agent_sdk::CardTrust,
) -> Result<Cards> {
    let mesh = agent_sdk::Mesh::new(client)
        .namespace(ns)?
        .card_trust(trust);
    Ok(Cards(mesh.catalog_with_expiry(CARDS_KEPT).await?))
}
