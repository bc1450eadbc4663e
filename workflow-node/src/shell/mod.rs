//! The NATS shell around the core: a process on the mesh that hosts workflows.
//!
//! - `requests`: takes requests to each workflow (start, get, cancel, approve), any
//!   replica.
//! - `cancels`: cancels of runs, also from a calling workflow on the cancel subject.
//! - `identity`: who may decide an approval or cancel a run (NKey signatures).
//! - `worker`: the event stream of each workflow and its shared durable consumer: load,
//!   `apply`, commit with compare-and-swap, carry out, ack; `decode` reads what the stream
//!   delivers, `tail` finishes an event once its commands are out.
//! - `effects`: carries out the core's commands (dispatch, timers, progress, final reply).
//! - `timers`: durable timers in a KV bucket, armed by every replica.
//! - `registry`: agent cards seen on the mesh, and publishing our own.
//! - `record`, `names`, `wire`: what a run's KV entry holds, resource names, message
//!   encoding.
//! - `bulk`: the items and results of large maps, kept beside the run's entry.
//! - `history`: every event applied to a run, kept for the retention in a stream.
//! - `statuses`: agents' status updates on a run's calls, forwarded to its callers.
//! - `inspect`: reading runs and their history for the operator's CLI.
//! - `metrics`, `observe`, `prometheus`, `scrape`: OpenTelemetry metrics (what a committed
//!   event did, recorded once), exported over OTLP and served at `/metrics`.
//! - `spans`, `traces`: the run's OpenTelemetry spans, derived from the core's states
//!   and emitted once a commit holds, with ids every replica derives alike.
//!
//! Nothing about a run lives only in one process: its state is in KV, its events in a
//! stream, its timers in KV. Any replica carries on any run.

pub mod bulk;
mod cache;
mod cancels;
mod decode;
pub mod definitions;
mod effects;
mod error;
mod final_claim;
mod grouped;
mod health;
pub mod history;
mod identity;
pub mod inspect;
mod lease;
mod metrics;
pub mod names;
mod observe;
mod outbox;
mod plan;
mod prometheus;
pub mod record;
mod registry;
mod reply;
mod requests;
mod retry;
mod scrape;
pub mod seal;
pub mod spans;
pub mod statuses;
mod steer;
mod store;
mod tail;
pub mod timers;
mod traces;
pub mod wake;
pub mod wire;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, kv};
use async_nats::HeaderMap;
use messages::card::AgentCard;
use messages::{headers, subjects};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::task::JoinHandle;

use error::Context;

use crate::core::{Event, ExecutionId, Millis};
use crate::definition::Workflow;
pub use error::{Error, Result};
pub use health::Health;
pub use metrics::{MetricsConfig, Otlp};
pub use record::{Caller, RunRecord};
pub use registry::{full_card, CARD_EXPIRY_INTERVALS};

/// Settings of a workflow node.
#[derive(Debug, Clone)]
pub struct Config {
    /// Subject namespace (default `mesh`).
    pub namespace: String,
    /// How often cards are republished (default 10 s). A card of another agent with no new
    /// copy for [`CARD_EXPIRY_INTERVALS`] of these leaves the registry.
    pub card_interval: Duration,
    /// How long an event may be in hand before another replica gets it (default 5 s): the
    /// time a run waits after its replica is killed.
    pub ack_wait: Duration,
    /// Worker tasks per workflow (runs are spread over them by id; default 64, which
    /// `mesh-bench pull` measured 15–20 % faster than 16 at 64 runs in flight).
    pub workers: usize,
    /// How the workflow's event consumer is pulled (see [`Pull`]).
    pub pull: Pull,
    /// Inputs and outputs larger than this travel through the object store.
    pub inline_limit: usize,
    /// The largest artifact (an object-store input or output) the node reads, in bytes
    /// (default 64 MiB); a larger one fails its call or request with a clear error.
    pub max_artifact_bytes: u64,
    /// How long a dispatch waits for an agent's card before failing the call.
    pub card_wait: Duration,
    /// Replicas of streams and buckets (1, or 3 on a cluster).
    pub replicas: usize,
    /// Failures of an event's processing (seen by one replica) before its run is abandoned
    /// (failed with the cause); the delay between tries doubles, from 0.5 s up to 5 s.
    pub max_deliver: u32,
    /// The largest run entry to store, in bytes (`None`: the server's max payload, the
    /// most it can take). A run whose entry would grow past it fails with "state too
    /// large" instead of being stored.
    pub max_state_bytes: Option<usize>,
    /// Requests to one workflow handled at once (default 256; at least 1). Excess requests
    /// wait, unread, in the subscription's buffer: a burst slows, it never spawns a task
    /// per request.
    pub max_concurrent_requests: usize,
    /// The limits this replica sets (see [`crate::limits`] for every limit).
    pub limits: crate::limits::Limits,
    /// How long what an ended run leaves behind is kept: its record, the keys beside it,
    /// its final-reply markers, its artifacts (default 7 days). Also the most an event
    /// may wait unprocessed in a workflow's stream.
    pub retention: Duration,
    /// Bytes of runs each workflow's workers keep in memory between events (estimated;
    /// default 256 MiB), so that a run's next event needs no read from KV.
    pub cache_bytes: usize,
    /// How long after a final reply was sent to an address a request resent from that
    /// address is told so (a status update) instead of answered again: the resend crossed
    /// the reply, maybe long before a busy replica got to it (default 30 s; 5 s let a
    /// crossing resend handled late on a loaded machine be answered twice). Later resends
    /// are answered from the record, so a reply that was really lost comes that much later.
    pub reply_in_flight: Duration,
    /// The name this replica gives itself in runs' histories (default: `{host}-{pid}`).
    pub replica: Option<String>,
    /// Metrics: served at an address, exported over OTLP, or neither (the default unless
    /// the `OTEL_EXPORTER_OTLP_*ENDPOINT` variables are set).
    pub metrics: MetricsConfig,
    /// The words the node sends to agents and callers (default ours): `Reference` sends
    /// `structured_invocation_request`/`_result` and the status `error`. Both dialects are
    /// always read.
    pub dialect: messages::workflow::Dialect,
    /// Approver names bound to NKey user public keys (`serve --approver NAME=U…`): an
    /// approval node's `approvers` may list the name, and a decision signed by the key
    /// counts as the name's. Every name a served workflow lists must be bound here.
    pub approvers: BTreeMap<String, String>,
    /// Operators' NKey user public keys (`serve --operator-key U…`): they decide the
    /// approvals that list no approvers, and may cancel any run (see `identity`).
    pub operators: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: "mesh".into(),
            card_interval: Duration::from_secs(10),
            ack_wait: Duration::from_secs(5),
            workers: 64,
            pull: Pull::default(),
            inline_limit: 256 * 1024,
            max_artifact_bytes: agent_sdk::artifacts::MAX_ARTIFACT_BYTES as u64,
            card_wait: Duration::from_secs(2),
            replicas: 1,
            max_deliver: 10,
            max_state_bytes: None,
            max_concurrent_requests: 256,
            limits: crate::limits::Limits::default(),
            retention: Duration::from_secs(7 * 24 * 3600),
            cache_bytes: 256 << 20,
            reply_in_flight: Duration::from_secs(30),
            replica: None,
            metrics: MetricsConfig::default(),
            dialect: messages::workflow::Dialect::Mesh,
            approvers: BTreeMap::new(),
            operators: Vec::new(),
        }
    }
}

/// How a replica pulls a workflow's events: the consumer is asked for `batch` events at a
/// time, asked again when half of them are in hand, and each ask expires after `expires`
/// (an idle replica then asks again, and a server heartbeat at half that tells a live pull
/// from a lost one). The defaults are the client's own (200 and 30 s): `mesh-bench pull`
/// measured no batch from 10 to 1,000 and no expiry from 1 s to 30 s apart from them on 2
/// cores, and a batch of 1 at about half the throughput (see the README's "Figures").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pull {
    /// Events asked for at a time (at least 1).
    pub batch: usize,
    /// How long one ask stays open on the server (at least 1 s).
    pub expires: Duration,
}

impl Default for Pull {
    fn default() -> Self {
        Pull {
            batch: 200,
            expires: Duration::from_secs(30),
        }
    }
}

/// An event as it travels in a workflow's stream: the core event, and for a start, who
/// asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// The core event, applied to the run named by the subject the envelope was published
    /// on (`{ns}.wf.{workflow}.events.{execution}`).
    pub event: Event,
    /// The caller (on `Started`); on a `CancelRequested` sent for a run not found yet,
    /// its sender (see `identity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Caller>,
    /// A `Started` sent again by a caller: it joins the run (or, if the run has ended, is
    /// answered from its record) instead of starting one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attach: bool,
    /// On a start: the content hash of the definition the run is to use (the one the
    /// replica that took the request serves, or the version the caller pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// On a `TimerFired` published by a run's wake entry: that wake. The run's worker then
    /// fires every pending timer due by it (see `wake`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<wake::Wake>,
}

impl Envelope {
    /// An event that carries no caller.
    pub fn event(event: Event) -> Envelope {
        Envelope {
            event,
            caller: None,
            attach: false,
            definition: None,
            wake: None,
        }
    }
}

/// What every task of a node shares.
pub struct Shared {
    client: async_nats::Client,
    js: jetstream::Context,
    ns: String,
    config: Config,
    runs: kv::Store,
    timers: kv::Store,
    registry: agent_sdk::CardCache,
    cards: HashMap<String, AgentCard>,
    /// The mesh's artifacts: objects expire after the retention (a run's artifacts are
    /// written while it runs, and a run never outlives it).
    artifacts: agent_sdk::ArtifactStore,
    /// Card contents too large for a card: they live as long as the card.
    card_objects: agent_sdk::ArtifactStore,
    health: Arc<Health>,
    /// This replica's name in runs' histories.
    replica: String,
    metrics: metrics::Metrics,
    definitions: definitions::Definitions,
    /// The deployment's secret: call tokens and event MACs.
    seal: seal::Seal,
}

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

/// How long a setup step (a stream, bucket or consumer to find or make, a definition to
/// store) is tried again before `start` gives up: a cluster electing leaders or busy
/// servers time JetStream requests out, and a new bucket's stream may not be known to
/// every server yet.
const SETUP_PATIENCE: Duration = Duration::from_secs(30);

/// Runs the setup step `step` until it succeeds or [`SETUP_PATIENCE`] has passed (then its
/// last error), waiting 100 ms, then twice as long each time, up to 2 s, between tries.
async fn patiently<T, F, Fut>(mut step: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + SETUP_PATIENCE;
    let mut wait = Duration::from_millis(100);
    loop {
        match step().await {
            Ok(value) => return Ok(value),
            Err(e) if tokio::time::Instant::now() + wait < deadline => {
                tracing::warn!("{e}; trying again in {} ms", wait.as_millis());
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Every [`definitions::SERVED_REFRESH`]: [`definitions::sweep`].
async fn sweep_definitions(shared: Arc<Shared>, served: Vec<Arc<Workflow>>) {
    loop {
        tokio::time::sleep(definitions::SERVED_REFRESH).await;
        if let Err(e) = definitions::sweep(&shared, &served).await {
            tracing::warn!("sweeping stored definitions: {e}");
        }
    }
}

/// The wall clock, in the core's unit.
pub fn now() -> Millis {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    Millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// How long [`publish_event`] waits before each new try of a publish that failed in a way
/// that passes (about 6 s in all: a stream's leader election after a server restart).
const TRANSIENT_WAITS: [Duration; 6] = [
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
    Duration::from_millis(1600),
    Duration::from_millis(3000),
];

/// Publishes an event into a run's stream and waits for the stream to store it; `true`
/// when it was stored, `false` when the stream already had an event with this `msg_id`
/// (which makes a second publish of the same event a no-op). A stream that was deleted is
/// made again first.
pub(crate) async fn publish_event(
    shared: &Shared,
    workflow: &str,
    execution: &ExecutionId,
    msg_id: &str,
    envelope: &Envelope,
) -> Result<bool> {
    use async_nats::jetstream::context::PublishErrorKind;
    let bytes: bytes::Bytes = serde_json::to_vec(envelope)?.into();
    let subject = subjects::run_events(&shared.ns, workflow, &execution.0);
    let mac = shared.seal.event_mac(&subject, msg_id, &bytes);
    let publish = || async {
        let mut h = HeaderMap::new();
        h.insert(headers::MSG_ID, msg_id);
        h.insert(seal::EVENT_MAC, mac.as_str());
        let ack = shared
            .js
            .publish_with_headers(subject.clone(), h, bytes.clone())
            .await?;
        ack.await
    };
    // "No stream" is also what a clustered stream answers while it elects a leader (a
    // server restarting), and a timeout what it answers without quorum: both pass, so the
    // publish is tried again for a few seconds (the message id keeps one copy) before the
    // error reaches the caller or the worker's retry.
    let mut remade = false;
    let mut waits = TRANSIENT_WAITS.iter();
    let ack = loop {
        let error = match publish().await {
            Err(e) => e,
            ok => break ok,
        };
        let kind = error.kind();
        if kind == PublishErrorKind::StreamNotFound && !remade {
            remade = true;
            tracing::warn!("the event stream of {workflow} is gone: making it again");
            if worker::consumer(shared, workflow).await.is_ok() {
                continue;
            }
        }
        let transient = matches!(
            kind,
            PublishErrorKind::StreamNotFound
                | PublishErrorKind::TimedOut
                | PublishErrorKind::BrokenPipe
        );
        match waits.next() {
            Some(wait) if transient => tokio::time::sleep(*wait).await,
            _ => break Err(error),
        }
    };
    let ack = ack.context(|| format!("storing an event of run {execution}"))?;
    Ok(!ack.duplicate)
}

impl Shared {
    /// Subscribes to `subject` in the queue group of `workflow`'s replicas: one of them
    /// takes each message.
    async fn queue_subscribe(
        &self,
        subject: String,
        workflow: &str,
    ) -> Result<async_nats::Subscriber> {
        self.client
            .queue_subscribe(subject.clone(), workflow.to_string())
            .await
            .context(|| format!("subscribing to {subject}"))
    }

    /// Stores an artifact; returns its `nats-object://` URI.
    async fn put_artifact(&self, name: &str, bytes: Vec<u8>) -> Result<String> {
        let stored = self.artifacts.put_bytes(name, &bytes).await;
        stored.map_err(artifact_error)
    }

    /// Stores version 1 of a run's artifact (see `ArtifactStore::put_first_version`);
    /// returns its `nats-object://` URI.
    async fn put_run_artifact(&self, name: &str, run: &str, bytes: Vec<u8>) -> Result<String> {
        let stored = self.artifacts.put_first_version(name, run, &bytes).await;
        stored.map_err(artifact_error)
    }

    /// Stores a card's content; returns its `nats-object://` URI.
    async fn put_card_object(&self, name: &str, bytes: Vec<u8>) -> Result<String> {
        let stored = self.card_objects.put_bytes(name, &bytes).await;
        stored.map_err(artifact_error)
    }

    /// Reads a JSON artifact from our bucket: a `nats-object://` URI or an object name.
    async fn get_artifact(&self, name: &str) -> Result<Value> {
        let bytes = self.artifacts.read_reference(name).await;
        let bucket = subjects::artifact_bucket(&self.ns);
        let (bucket, name) =
            messages::payload::object_ref(name, &bucket).unwrap_or((&bucket, name));
        decode_artifact(&bytes.map_err(artifact_error)?, bucket, name)
    }

    /// Reads a JSON artifact from a bucket: only the mesh's artifact bucket is read, and
    /// no more than `Config::max_artifact_bytes` (see `agent_sdk::artifacts`).
    async fn get_artifact_in(&self, bucket: &str, name: &str) -> Result<Value> {
        let bytes = self.artifacts.get_bytes(bucket, name).await;
        decode_artifact(&bytes.map_err(artifact_error)?, bucket, name)
    }
}

/// The node's error for the artifact store's: a missing object is missing, a foreign
/// bucket or an object over the limit is refused, the rest is a connection error (worth
/// retrying) or a setup error.
fn artifact_error(e: agent_sdk::ArtifactError) -> Error {
    use agent_sdk::ArtifactError as A;
    match e {
        A::BadUri(name) => Error::Missing(format!("artifact '{name}' (not an artifact name)")),
        A::NotFound { bucket, name } => {
            Error::Missing(format!("artifact '{name}' in bucket '{bucket}'"))
        }
        e @ A::ForeignBucket { .. } => Error::Refused(e.to_string()),
        A::TooLarge {
            bucket,
            name,
            size,
            limit,
        } => Error::Refused(format!(
            "artifact '{name}' of {bucket} is {size} bytes, over the limit of {limit} bytes"
        )),
        A::Bucket { bucket, reason } => Error::Setup {
            resource: format!("object store {bucket}"),
            source: reason.into(),
        },
        A::Read {
            bucket,
            name,
            reason,
        } => Error::Connection {
            context: format!("reading artifact {name} of {bucket}"),
            source: reason.into(),
        },
        A::Write {
            bucket,
            name,
            reason,
        } => Error::Connection {
            context: format!("storing object {name} in {bucket}"),
            source: reason.into(),
        },
        e @ A::NotJson { .. } => Error::Refused(e.to_string()),
    }
}

/// The JSON value of artifact `name` of `bucket`.
fn decode_artifact(bytes: &[u8], bucket: &str, name: &str) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|source| Error::Encoding {
        context: format!("reading artifact {name} of {bucket}"),
        source,
    })
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
        let (runs_name, timers_name) = (names::runs_bucket(&ns), names::timers_bucket(&ns));
        let runs = patiently(|| kv_bucket(&js, &runs_name, replicas)).await?;
        let timers = patiently(|| kv_bucket(&js, &timers_name, replicas)).await?;
        patiently(|| history::stream(&js, &ns, replicas, config.retention)).await?;
        let replica = config.replica.clone().unwrap_or_else(default_replica);
        let definitions_name = names::definitions_bucket(&ns);
        let definitions = patiently(|| kv_bucket(&js, &definitions_name, replicas)).await?;
        let seal = patiently(|| seal::Seal::open_or_create(&js, &ns, replicas)).await?;
        let cards = workflows
            .iter()
            .map(|w| (w.name.clone(), crate::visual::agent_card(w, &ns)))
            .collect();
        let registry = agent_sdk::CardCache::new(config.card_interval * CARD_EXPIRY_INTERVALS);
        let metrics = metrics::Metrics::new(&config.metrics)?;
        let metrics_listener = match config.metrics.addr {
            Some(addr) => Some(scrape::bind(addr).await?),
            None => None,
        };
        let artifacts = agent_sdk::ArtifactStore::new(client.clone(), &ns)
            .replicas(config.replicas)
            .max_age(config.retention)
            .max_bytes(usize::try_from(config.max_artifact_bytes).unwrap_or(usize::MAX));
        let card_objects =
            agent_sdk::ArtifactStore::in_bucket(client.clone(), subjects::cards_bucket(&ns))
                .replicas(config.replicas);
        let shared = Arc::new(Shared {
            client,
            js,
            ns,
            config,
            runs,
            timers,
            registry,
            cards,
            artifacts,
            card_objects,
            health: Arc::default(),
            replica,
            metrics,
            definitions: definitions::Definitions::new(definitions),
            seal,
        });
        for card in shared.cards.values() {
            shared.registry.insert_own(card.clone());
        }
        let wire_cards = registry::wire_cards(&shared).await?;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut background = Vec::new();
        // Every subscription exists before start returns: a request sent right after
        // finds a responder.
        let (card_sub, ping_sub) = registry::subscribe_cards(&shared).await?;
        background.push(tokio::spawn(registry::watch_cards(
            shared.clone(),
            card_sub,
        )));
        background.push(tokio::spawn(timers::run(shared.clone())));
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
            patiently(|| shared.definitions.store(&workflow)).await?;
            // The consumer exists before requests are taken, so no start is lost.
            patiently(|| worker::consumer(&shared, &workflow.name)).await?;
            consumers.push(tokio::spawn(worker::run(
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
            if shared.metrics.enabled() {
                let s = shared.clone();
                let name = workflow.name.clone();
                background.push(tokio::spawn(metrics::poll_pending(s, name)));
            }
            let s = shared.clone();
            background.push(tokio::spawn(async move {
                log_err("requests", requests::serve(s, workflow, sub).await)
            }));
        }
        background.push(tokio::spawn(sweep_definitions(
            shared.clone(),
            served.clone(),
        )));
        // Requests are taken once the server knows the subscriptions (a flush only
        // writes them out).
        agent_sdk::Mesh::new(shared.client.clone())
            .roundtrip()
            .await
            .context(|| "making the subscriptions known to the server".into())?;
        // Cards go out only now: a caller that sees one finds a responder.
        background.push(tokio::spawn(registry::publish_cards(
            shared.clone(),
            wire_cards,
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
    /// run names (done every [`definitions::SERVED_REFRESH`] anyway); returns how many were
    /// deleted.
    pub async fn sweep_definitions(&self) -> Result<usize> {
        definitions::sweep(&self.shared, &self.served).await
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

    /// The registry of cards seen on the mesh, and our own.
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

/// Finds or creates a KV bucket whose keys may expire (per-message TTL, nats-server
/// 2.11+): what an ended run leaves behind expires after the retention, and purge markers
/// after a second. A bucket made by an older version is given the TTLs it lacks.
async fn kv_bucket(js: &jetstream::Context, bucket: &str, replicas: usize) -> Result<kv::Store> {
    let setup = |e: async_nats::Error| Error::Setup {
        resource: format!("bucket {bucket}"),
        source: e,
    };
    if let Ok(store) = js.get_key_value(bucket).await {
        let mut stream = store.stream.clone();
        let info = stream.info().await.map_err(|e| setup(e.into()))?;
        if !info.config.allow_message_ttl {
            let mut config = info.config.clone();
            config.allow_message_ttl = true;
            config.subject_delete_marker_ttl = Some(Duration::from_secs(1));
            js.update_stream(config)
                .await
                .map_err(|e| setup(e.into()))?;
        }
        return Ok(store);
    }
    let config = kv::Config {
        bucket: bucket.to_string(),
        history: 1,
        num_replicas: replicas,
        limit_markers: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another replica created it in between.
        Err(_) => js.get_key_value(bucket).await.map_err(|e| setup(e.into())),
    }
}
