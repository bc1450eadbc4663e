//! What every task of a node shares: the connection, the buckets, the settings, the
//! registry, the metrics, the seal. Rooms that do I/O take it; the pure `run` room never
//! does. Where a room needs only one handle (the registry, the stored definitions, the
//! metrics), it takes that handle instead.

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use messages::card::AgentCard;

use crate::shell::config::Config;
use crate::shell::error::{Context, Result};
use crate::shell::mesh::artifacts::Artifacts;
use crate::shell::mesh::seal;
use crate::shell::store::versions;
use crate::shell::telemetry::health::Health;
use crate::shell::telemetry::metrics;

/// What every task of a node shares.
pub(crate) struct Shared {
    /// The connection.
    pub(in crate::shell) client: async_nats::Client,
    /// JetStream on it.
    pub(in crate::shell) js: jetstream::Context,
    /// The subject namespace.
    pub(in crate::shell) ns: String,
    /// The node's settings.
    pub(in crate::shell) config: Config,
    /// The runs bucket.
    pub(in crate::shell) runs: kv::Store,
    /// The wakes bucket (see `worker::wakes`).
    pub(in crate::shell) wakes: kv::Store,
    /// Agent cards seen on the mesh, ours among them.
    pub(in crate::shell) registry: Arc<agent_sdk::CardCache>,
    /// The cards of the workflows this node serves, by name.
    pub(in crate::shell) cards: HashMap<String, AgentCard>,
    /// The object store.
    pub(in crate::shell) artifacts: Artifacts,
    /// Whether every workflow's events are being pulled.
    pub(in crate::shell) health: Arc<Health>,
    /// This replica's name in runs' histories.
    pub(in crate::shell) replica: String,
    /// The node's metrics.
    pub(in crate::shell) metrics: metrics::Metrics,
    /// The stored definition versions.
    pub(in crate::shell) versions: versions::Versions,
    /// The deployment's secret: call tokens and event MACs.
    pub(in crate::shell) seal: seal::Seal,
    /// The signs of life this replica heard from calls in flight (see `run::check`).
    pub(in crate::shell) signs: crate::shell::worker::signs::SignsOfLife,
    /// The nonces of signed requests accepted (see `callers::nonces`).
    pub(in crate::shell) nonces: kv::Store,
    /// Slots of cancels kept for runs not started (see `callers::early`).
    pub(in crate::shell) early_cancels: kv::Store,
    /// The schedules' entries (see `store::schedules`).
    pub(in crate::shell) schedules: kv::Store,
    /// The gates of the workflows' flow control (see `run::flow`).
    pub(in crate::shell) flow: kv::Store,
    /// The bytes encoded into commits and event publishes (see `telemetry::encoded`).
    pub(in crate::shell) encoded: crate::shell::telemetry::encoded::Encoded,
    /// The limited agents' gates (see `worker::slots`).
    pub(in crate::shell) gates: crate::shell::worker::slots::Gates,
}

/// The wall clock, in the core's unit: the servers', as estimated (see `shell::clock`).
pub use crate::shell::clock::now;

impl Shared {
    /// Subscribes to `subject` in the queue group of `workflow`'s replicas: one of them
    /// takes each message.
    pub(in crate::shell) async fn queue_subscribe(
        &self,
        subject: String,
        workflow: &str,
    ) -> Result<async_nats::Subscriber> {
        self.client
            .queue_subscribe(subject.clone(), workflow.to_string())
            .await
            .context(|| format!("subscribing to {subject}"))
    }
}
