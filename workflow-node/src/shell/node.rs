//! The node: [`WorkflowNode::start`] makes (or finds) the streams and buckets, wires the
//! rooms together (workers, callers, wakes, cards, metrics) and hands back a node to
//! drain with [`WorkflowNode::shutdown`].

use std::net::SocketAddr;
use std::sync::Arc;

use async_nats::jetstream;
use messages::card::AgentCard;
use messages::subjects;
use tokio::task::JoinHandle;

use crate::definition::Workflow;
use crate::shell::callers::{cancels, identity, requests, statuses};
use crate::shell::callers::{early, nonces};
use crate::shell::config::Config;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Error, Result};
use crate::shell::mesh::artifact_reads;
use crate::shell::mesh::artifacts::Artifacts;
use crate::shell::mesh::registry::{self, CARD_EXPIRY_INTERVALS};
use crate::shell::mesh::seal;
use crate::shell::mesh::setup::{kv_bucket, patiently};
use crate::shell::run::names;
use crate::shell::store::events;
use crate::shell::store::history;
use crate::shell::store::versions;
use crate::shell::telemetry::health::Health;
use crate::shell::telemetry::metrics::{self, scrape};
use crate::shell::triggers;
use crate::shell::worker::signs::SignsOfLife;
use crate::shell::worker::slots::Gates;
use crate::shell::worker::{driver, wakes};

/// The default name of a replica: the host's name and the process id.
fn default_replica() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!("{host}-{}", std::process::id())
}

/// Every [`versions::SERVED_REFRESH`]: [`versions::Versions::sweep`].
async fn keep_sweeping(shared: Arc<Shared>, served: Vec<Arc<Workflow>>) {
    loop {
        tokio::time::sleep(versions::SERVED_REFRESH).await;
        let c = &shared.config;
        let sweep = shared
            .versions
            .sweep(&shared.client, &shared.ns, c.retention, &served);
        if let Err(e) = sweep.await {
            tracing::warn!("sweeping stored definitions: {e}");
        }
    }
}

/// A running workflow node.
pub struct WorkflowNode {
    shared: Arc<Shared>,
    stop: tokio::sync::watch::Sender<bool>,
    consumers: Vec<JoinHandle<Result<()>>>,
    background: Vec<JoinHandle<()>>,
    metrics_addr: Option<SocketAddr>,
    served: Vec<Arc<Workflow>>,
}

impl WorkflowNode {
    /// Creates the streams and buckets it needs (or finds them) and starts serving
    /// `workflows` on `client`.
    pub async fn start(
        client: async_nats::Client,
        workflows: Vec<Workflow>,
        config: Config,
    ) -> Result<WorkflowNode> {
        subjects::validate_namespace(&config.namespace)
            .map_err(|e| Error::Definition(format!("namespace: {e}")))?;
        identity::check_config(&config, &workflows)?;
        let mut names_seen = std::collections::HashSet::new();
        if let Some(w) = workflows.iter().find(|w| !names_seen.insert(&w.name)) {
            return Err(Error::Definition(format!(
                "two workflows are named '{}': a node serves each name once",
                w.name
            )));
        }
        let js = jetstream::new(client.clone());
        let ns = config.namespace.clone();
        let replicas = config.replicas;
        let (runs_name, wakes_name) = (names::runs_bucket(&ns), names::wakes_bucket(&ns));
        let bytes = config.store_limits;
        let runs = patiently(|| kv_bucket(&js, &runs_name, replicas, bytes.runs)).await?;
        let wakes = patiently(|| kv_bucket(&js, &wakes_name, replicas, bytes.wakes)).await?;
        patiently(|| history::stream(&js, &ns, replicas, config.retention, bytes.history)).await?;
        let replica = config.replica.clone().unwrap_or_else(default_replica);
        let versions_name = names::versions_bucket(&ns);
        let versions =
            patiently(|| kv_bucket(&js, &versions_name, replicas, bytes.versions)).await?;
        let seal =
            patiently(|| seal::Seal::open_or_create(&js, &ns, replicas, bytes.secrets)).await?;
        let nonces = patiently(|| nonces::bucket(&js, &ns, replicas, bytes.nonces)).await?;
        let early_cancels =
            patiently(|| early::bucket(&js, &ns, replicas, bytes.early_cancels)).await?;
        let schedules_name = names::schedules_bucket(&ns);
        let schedules =
            patiently(|| kv_bucket(&js, &schedules_name, replicas, bytes.schedules)).await?;
        let flow_name = names::flow_bucket(&ns);
        let flow = patiently(|| kv_bucket(&js, &flow_name, replicas, bytes.flow)).await?;
        let agent_limits = Gates::merged(&workflows);
        let gates_bucket = if agent_limits.is_empty() {
            None
        } else {
            // The gates are few and small: they share the schedules' byte limit.
            let name = names::gates_bucket(&ns);
            Some(patiently(|| kv_bucket(&js, &name, replicas, bytes.schedules)).await?)
        };
        let gates = Gates::new(agent_limits, gates_bucket);
        let cards = workflows
            .iter()
            .map(|w| (w.name.clone(), crate::visual::agent_card(w, &ns)))
            .collect();
        let registry = Arc::new(agent_sdk::CardCache::with_trust(
            config.card_interval * CARD_EXPIRY_INTERVALS,
            &config.card_trust,
        ));
        let metrics = metrics::Metrics::new(&config.metrics)?;
        metrics.observe_cards_ignored(Arc::downgrade(&registry));
        let metrics_listener = match config.metrics.addr {
            Some(addr) => Some(scrape::bind(addr).await?),
            None => None,
        };
        let artifacts = Artifacts::new(
            js.clone(),
            &ns,
            replicas,
            config.retention,
            config.max_artifact_bytes,
            &config.store_limits,
        );
        let signs = SignsOfLife::new(config.call_check);
        let shared = Arc::new(Shared {
            signs,
            client,
            js,
            ns,
            config,
            runs,
            wakes,
            registry,
            cards,
            artifacts,
            health: Arc::default(),
            replica,
            metrics,
            versions: versions::Versions::new(versions),
            seal,
            nonces,
            early_cancels,
            schedules,
            flow,
            encoded: Default::default(),
            gates,
        });
        for card in shared.cards.values() {
            shared.registry.insert_own(card.clone());
        }
        let wire_cards =
            registry::wire_cards(&shared.client, &shared.cards, &shared.artifacts).await?;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut background = Vec::new();
        // Every subscription exists before start returns: a request sent right after
        // finds a responder.
        let (card_sub, ping_sub) = registry::subscribe_cards(&shared.client, &shared.ns).await?;
        background.push(tokio::spawn(registry::watch_cards(
            shared.registry.clone(),
            card_sub,
        )));
        background.push(tokio::spawn(wakes::run(shared.clone())));
        let reads = artifact_reads::subscribe(&shared).await?;
        background.push(tokio::spawn(artifact_reads::serve(shared.clone(), reads)));
        let mut metrics_addr = None;
        if let (Some(listener), Some(reader)) = (metrics_listener, shared.metrics.scrape_reader()) {
            metrics_addr = listener.local_addr().ok();
            background.push(tokio::spawn(scrape::serve(listener, reader)));
        }
        let mut consumers = Vec::new();
        let served: Vec<Arc<Workflow>> = workflows.into_iter().map(Arc::new).collect();
        for workflow in served.iter().cloned() {
            // Stored before any run of it starts: a replica serving another version
            // applies this one's runs with it.
            patiently(|| shared.versions.store(&workflow)).await?;
            // The consumer exists before requests are taken, so no start is lost.
            patiently(|| events::consumer(&shared, &workflow.name)).await?;
            consumers.push(tokio::spawn(driver::run(
                shared.clone(),
                workflow.clone(),
                stop_rx.clone(),
            )));
            let sub = requests::subscribe(&shared, &workflow)
                .await
                .context(|| format!("subscribing to requests to {}", workflow.name))?;
            let cancel_sub = cancels::subscribe(&shared, &workflow)
                .await
                .context(|| format!("subscribing to cancels of {}", workflow.name))?;
            let status_sub = statuses::subscribe(&shared, &workflow)
                .await
                .context(|| format!("subscribing to agents' status of {}", workflow.name))?;
            let (s, w) = (shared.clone(), workflow.clone());
            background.push(tokio::spawn(statuses::serve(s, w, status_sub)));
            let (s, w) = (shared.clone(), workflow.clone());
            background.push(tokio::spawn(async move {
                log_err("cancels", cancels::serve(s, w, cancel_sub).await)
            }));
            if let Some(poll) = shared.metrics.poll_pending(
                shared.js.clone(),
                &shared.ns,
                shared.config.metrics.pending_interval,
                workflow.name.clone(),
            ) {
                background.push(tokio::spawn(poll));
            }
            let s = shared.clone();
            background.push(tokio::spawn(async move {
                log_err("requests", requests::serve(s, workflow, sub).await)
            }));
        }
        background.push(tokio::spawn(keep_sweeping(shared.clone(), served.clone())));
        background.push(tokio::spawn(triggers::schedules::run(
            shared.clone(),
            served.clone(),
        )));
        if served.iter().any(|w| !w.triggers.is_empty()) {
            patiently(|| triggers::events::dead_letters(&shared)).await?;
        }
        for workflow in &served {
            for hook in triggers::hooks::load(workflow)? {
                let sub = triggers::hooks::subscribe(&shared, &hook).await?;
                let s = shared.clone();
                background.push(tokio::spawn(triggers::hooks::serve(s, hook, sub)));
            }
            // Webhooks are taken by `callers::hooks`, not from a stream.
            for trigger in workflow.triggers.iter().filter(|t| t.webhook.is_none()) {
                let consumer = triggers::events::consumer(&shared, workflow, trigger).await?;
                background.push(tokio::spawn(triggers::events::run(
                    shared.clone(),
                    workflow.clone(),
                    trigger.clone(),
                    consumer,
                )));
            }
        }
        // Requests are taken once the server knows the subscriptions (a flush only
        // writes them out).
        agent_sdk::Mesh::new(shared.client.clone())
            .roundtrip()
            .await
            .context(|| "making the subscriptions known to the server".into())?;
        // Cards go out only now: a caller that sees one finds a responder.
        let card_signer = shared.seal.card_signer();
        tracing::info!(
            "the cards of this node's workflows are signed by key {} (bind it with \
             --agent-key NAME={} where cards must be signed)",
            card_signer.public_key(),
            card_signer.public_key()
        );
        background.push(tokio::spawn(registry::publish_cards(
            shared.client.clone(),
            shared.ns.clone(),
            shared.config.card_interval,
            (wire_cards, card_signer),
            ping_sub,
        )));
        Ok(WorkflowNode {
            shared,
            stop,
            consumers,
            background,
            metrics_addr,
            served,
        })
    }

    /// Marks the definitions this node serves as served, and deletes the stored
    /// definitions of its workflows that no replica served for the retention and no kept
    /// run names (done every [`versions::SERVED_REFRESH`] anyway); returns how many were
    /// deleted.
    pub async fn sweep_versions(&self) -> Result<usize> {
        let s = &self.shared;
        s.versions
            .sweep(&s.client, &s.ns, s.config.retention, &self.served)
            .await
    }

    /// The agent cards of the workflows this node serves, in full. (One too large for a
    /// message is published with its visualization in the object store: see [`full_card`].)
    pub fn cards(&self) -> Vec<AgentCard> {
        self.shared.cards.values().cloned().collect()
    }

    /// Whether the node is doing its work (every workflow's events are being pulled).
    pub fn health(&self) -> &Health {
        &self.shared.health
    }

    /// The same, shared: for a health endpoint that outlives a borrow of the node.
    pub fn health_handle(&self) -> Arc<Health> {
        self.shared.health.clone()
    }

    /// Where `/metrics` is served (the port bound, when `Config::metrics` asked for 0);
    /// `None` when it is not.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The key that signs the cards of this deployment's workflows (every replica's is the
    /// same: see `seal`): readers bind the workflows' names to it.
    pub fn card_key(&self) -> String {
        self.shared.seal.card_signer().public_key().to_owned()
    }

    /// The bytes this node encoded into run-record commits and event publishes so far.
    pub fn encoded(&self) -> crate::shell::EncodedCounts {
        self.shared.encoded.counts()
    }

    /// The registry of cards seen on the mesh.
    pub fn registry(&self) -> &agent_sdk::CardCache {
        &self.shared.registry
    }

    /// Drains: stops taking requests and events, finishes the events in hand, exports the
    /// last metrics, returns.
    pub async fn shutdown(self) {
        for task in &self.background {
            task.abort();
        }
        let _ = self.stop.send(true);
        for c in self.consumers {
            let _ = c.await;
        }
        let _ = self.shared.client.flush().await;
        self.shared.metrics.shutdown().await;
    }
}

fn log_err<E: std::fmt::Display>(what: &str, result: std::result::Result<(), E>) {
    if let Err(e) = result {
        tracing::error!("{what} stopped: {e}");
    }
}
