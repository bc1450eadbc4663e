//! The settings of a workflow node: what `serve` and the tests pass to
//! [`crate::shell::WorkflowNode::start`]. Plain values, read by every room; no handle.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::shell::telemetry::metrics::MetricsConfig;

/// Settings of a workflow node.
#[derive(Debug, Clone)]
pub struct Config {
    /// Subject namespace (default `mesh`).
    pub namespace: String,
    /// How often cards are republished (default 10 s). A card of another agent with no new
    /// copy for [`crate::shell::CARD_EXPIRY_INTERVALS`] of these leaves the registry.
    pub card_interval: Duration,
    /// How long an event may be in hand before another replica gets it (default 5 s): the
    /// time a run waits after its replica is killed.
    pub ack_wait: Duration,
    /// How long a call in flight may stay silent (no heartbeat, status update or reply
    /// heard) before the same attempt is sent again (default 10 s; `None`: never). It
    /// recovers a request or reply lost with a NATS server or an agent's process whatever
    /// the workflow's `timeout` (see `run::check`).
    pub call_check: Option<Duration>,
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
    /// How run entries are written (default LZ4-compressed JSON; both forms are read):
    /// `Json` for a rolling upgrade from a version that reads only JSON.
    pub record_format: crate::shell::run::entry::RecordFormat,
    /// Requests to one workflow handled at once (default 256; at least 1). Excess requests
    /// wait, unread, in the subscription's buffer: a burst slows, it never spawns a task
    /// per request.
    pub max_concurrent_requests: usize,
    /// The limits this replica sets (see [`crate::limits`] for every limit).
    pub limits: crate::limits::Limits,
    /// The byte limit of each stream and bucket the node creates (set per deployment: the
    /// replica that creates one, or finds it with another limit, sets it).
    pub store_limits: crate::limits::StoreLimits,
    /// How long what an ended run leaves behind is kept: its record, the keys beside it,
    /// its final-reply markers, its artifacts (default 7 days). Also the most an event
    /// may wait unprocessed in a workflow's stream.
    pub retention: Duration,
    /// How long a cancel of a run not started yet (its start still behind it in the
    /// stream) is kept for that start (default 5 minutes); its record then goes.
    pub early_cancel_expiry: Duration,
    /// How many cancels of runs not started yet one caller identity (signing key, else
    /// caller name, else all unnamed callers together) may have kept at once (default
    /// 20); more are refused until some expire.
    pub early_cancels_per_caller: usize,
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
    /// Which keys may sign the cards of the agents the node calls (`serve --agent-key
    /// NAME=U…`, `--require-signed-cards`): a card signed otherwise never replaces the
    /// bound one in the registry (see `agent_sdk::card_trust`).
    pub card_trust: agent_sdk::CardTrust,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: "mesh".into(),
            card_interval: Duration::from_secs(10),
            ack_wait: Duration::from_secs(5),
            call_check: Some(Duration::from_secs(10)),
            workers: 64,
            pull: Pull::default(),
            inline_limit: 256 * 1024,
            max_artifact_bytes: agent_sdk::artifacts::MAX_ARTIFACT_BYTES as u64,
            card_wait: Duration::from_secs(2),
            replicas: 1,
            max_deliver: 10,
            max_state_bytes: None,
            record_format: Default::default(),
            max_concurrent_requests: 256,
            limits: crate::limits::Limits::default(),
            store_limits: crate::limits::StoreLimits::default(),
            retention: Duration::from_secs(7 * 24 * 3600),
            early_cancel_expiry: Duration::from_secs(300),
            early_cancels_per_caller: 20,
            cache_bytes: 256 << 20,
            reply_in_flight: Duration::from_secs(30),
            replica: None,
            metrics: MetricsConfig::default(),
            dialect: messages::workflow::Dialect::Mesh,
            approvers: BTreeMap::new(),
            operators: Vec::new(),
            card_trust: agent_sdk::CardTrust::default(),
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
