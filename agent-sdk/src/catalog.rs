//! [`Catalog`]: a live registry of the agent cards on the mesh, and the tools they make.
//!
//! At start it subscribes to the cards subject and pings discovery (every agent and
//! workflow then republishes its card); after that, cards arrive as their agents publish
//! them (every card interval), into a [`CardCache`]. A card expires when no new copy
//! arrives within the catalog's expiry (default [`DEFAULT_CARD_EXPIRY`], three default
//! card intervals): its agent has stopped. Only cards signed by the key bound to their
//! name count (the mesh's [`crate::CardTrust`], see [`crate::card_trust`]).
//!
//! A workflow card too large for one NATS message carries its visualization as a
//! `content_uri` reference to an object store; [`Catalog::full_card`] reads it back. The
//! schemas, which is what tools need, are always in the card itself.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;
use serde_json::Value;

use crate::cards::{CardCache, CardRefused};
use crate::error::ArtifactError;
use crate::mesh::Mesh;
use crate::tools::{Tool, ToolCall};

/// How long a card lives without a new copy unless told otherwise: three default card
/// intervals (30 s).
pub const DEFAULT_CARD_EXPIRY: Duration = Duration::from_secs(30);

/// The largest visualization read back for a card ([`with_visualization`]): 8 MiB, far
/// more than the diagram of a workflow of the most nodes a definition may have.
pub const MAX_VISUALIZATION_BYTES: usize = 8 << 20;

/// Why a catalog could not start.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// Subscribing to the cards subject failed.
    #[error("subscribing to agent cards on {subject}")]
    Subscribe {
        /// The cards subject.
        subject: String,
        /// The client's error.
        #[source]
        source: async_nats::SubscribeError,
    },
    /// The server did not confirm the subscription.
    #[error("confirming the cards subscription")]
    Roundtrip(#[source] crate::error::RoundtripError),
    /// The discovery ping could not be published.
    #[error("publishing the discovery ping")]
    Ping(#[source] async_nats::PublishError),
}

/// A live registry of the cards on the mesh (see the module doc). Clones share it; the
/// watch stops when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Catalog {
    mesh: Mesh,
    cards: Arc<CardCache>,
    _watch: Arc<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Catalog {
    /// Subscribes to cards, asks every agent for its card, and keeps the registry up to
    /// date in a tokio task.
    pub(crate) async fn start(mesh: Mesh, expiry: Duration) -> Result<Catalog, CatalogError> {
        let client = mesh.client().clone();
        let subject = subjects::agent_cards(mesh.ns());
        let mut sub = client
            .subscribe(subject.clone())
            .await
            .map_err(|source| CatalogError::Subscribe { subject, source })?;
        crate::roundtrip::roundtrip(&client)
            .await
            .map_err(CatalogError::Roundtrip)?;
        let cards = Arc::new(CardCache::with_trust(expiry, mesh.cards_trusted()));
        let registry = cards.clone();
        let watch = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                // An ignored card is counted and warned about by the cache.
                if let Err(CardRefused::Malformed(e)) =
                    registry.receive(&msg.payload, msg.headers.as_ref())
                {
                    tracing::debug!("ignoring a malformed agent card: {e}");
                }
            }
        });
        let catalog = Catalog {
            mesh,
            cards,
            _watch: Arc::new(AbortOnDrop(watch)),
        };
        catalog.refresh().await?;
        Ok(catalog)
    }

    /// Asks every agent on the mesh to republish its card now.
    pub async fn refresh(&self) -> Result<(), CatalogError> {
        let client = self.mesh.client();
        client
            .publish(subjects::discovery_ping(self.mesh.ns()), "".into())
            .await
            .map_err(CatalogError::Ping)?;
        // Best effort: a flush failure shows up as missing cards, not as an error here.
        let _ = client.flush().await;
        Ok(())
    }

    /// The mesh this catalog watches.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// Every live card, by name.
    pub fn cards(&self) -> Vec<AgentCard> {
        self.cards.live()
    }

    /// The cache the catalog keeps (when each card last arrived, waiting for cards).
    pub fn cache(&self) -> &CardCache {
        &self.cards
    }

    /// The live cards of workflows.
    pub fn workflows(&self) -> Vec<AgentCard> {
        self.cards()
            .into_iter()
            .filter(|c| c.is_workflow())
            .collect()
    }

    /// The live cards of agents that are not workflows.
    pub fn agents(&self) -> Vec<AgentCard> {
        self.cards()
            .into_iter()
            .filter(|c| !c.is_workflow())
            .collect()
    }

    /// The live card of `name`.
    pub fn get(&self, name: &str) -> Option<AgentCard> {
        self.cards().into_iter().find(|c| c.name == name)
    }

    /// The live cards with a skill tagged `tag` (compared without regard to case).
    pub fn with_tag(&self, tag: &str) -> Vec<AgentCard> {
        self.cards()
            .into_iter()
            .filter(|c| {
                c.skills
                    .iter()
                    .any(|s| s.tags.iter().any(|t| t.eq_ignore_ascii_case(tag)))
            })
            .collect()
    }

    /// Waits up to `within` until `ready` holds of the live cards (checked at once and on
    /// each card that arrives); returns whether it did.
    pub async fn wait_until(
        &self,
        within: Duration,
        ready: impl FnMut(&[AgentCard]) -> bool,
    ) -> bool {
        self.cards.wait_until(within, ready).await
    }

    /// The live card of `name`, waiting up to `within` for it to arrive.
    pub async fn wait_for(&self, name: &str, within: Duration) -> Option<AgentCard> {
        self.cards.wait_for(name, within).await
    }

    /// The card of `name` with its visualization inline: read back from the object store
    /// when the card carries only a reference to it. `Ok(None)` when there is no such
    /// live card.
    pub async fn full_card(&self, name: &str) -> Result<Option<AgentCard>, ArtifactError> {
        let Some(card) = self.get(name) else {
            return Ok(None);
        };
        with_visualization(self.mesh.client(), self.mesh.ns(), card)
            .await
            .map(Some)
    }

    /// One tool per live card (see [`Tool::from_card`]), by tool name. Two cards whose
    /// names map to the same tool name make no tool: neither could be told apart.
    pub fn tools(&self) -> Vec<Tool> {
        let tools: Vec<Tool> = self.cards().iter().map(Tool::from_card).collect();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for t in &tools {
            *seen.entry(t.name.clone()).or_default() += 1;
        }
        tools.into_iter().filter(|t| seen[&t.name] == 1).collect()
    }

    /// The tool named `name` (a tool name or the agent's own name).
    pub fn tool(&self, name: &str) -> Option<Tool> {
        let tools = self.tools();
        let found = tools.iter().position(|t| t.name == name);
        let found = found.or_else(|| tools.iter().position(|t| t.agent == name));
        found.map(|i| tools[i].clone())
    }

    /// A call of tool `name` with `arguments` (as an LLM gives them): await it for the
    /// output, or set it up first (see [`ToolCall`]).
    pub fn call_tool(&self, name: &str, arguments: Value) -> ToolCall {
        ToolCall::new(self.clone(), name, arguments)
    }
}

/// `card` with its visualization inline: read back from the object store when the card
/// carries only a reference to it, as is otherwise. Only the bucket where workflow nodes
/// keep large card contents (namespace `ns`) is read, and at most
/// [`MAX_VISUALIZATION_BYTES`] of it: a card is anyone's to publish, and a reference into
/// another bucket (callers' inputs in the artifacts) is refused.
pub async fn with_visualization(
    client: &async_nats::Client,
    ns: &str,
    card: AgentCard,
) -> Result<AgentCard, ArtifactError> {
    let Some(uri) = card.visualization_ref().map(str::to_owned) else {
        return Ok(card);
    };
    let stored = crate::ArtifactStore::in_bucket(client.clone(), subjects::cards_bucket(ns))
        .max_bytes(MAX_VISUALIZATION_BYTES)
        .get_uri(&uri)
        .await?;
    match stored {
        Value::Object(params) => Ok(card.with_visualization_params(params)),
        _ => Err(ArtifactError::NotJson {
            bucket: uri.clone(),
            name: card.name.clone(),
            reason: "the stored visualization is not a JSON object".into(),
        }),
    }
}
