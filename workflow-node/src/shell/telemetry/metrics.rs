//! The node's metrics: OpenTelemetry instruments on a meter provider of the node's own,
//! recorded once and read two ways. A periodic reader exports them over OTLP when an
//! endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or `..._METRICS_ENDPOINT`;
//! `OTEL_EXPORTER_OTLP_PROTOCOL` picks `http/protobuf`, the default, or `grpc`), and a
//! manual reader is collected on each scrape of `/metrics` (see `scrape`) when the node
//! serves one. With neither, no provider is built and recording is a no-op.
//!
//! Labels are bounded: workflow, status, node type, agent, outcome. Run and sub-task ids
//! and error texts belong to traces, never here. Counts of runs, nodes and calls come
//! from `run::observed` and are recorded after the commit that made them holds.
//!
//! Every replica exports its own counts: a run started on one replica and ended on
//! another adds to each one's counters, so sum over replicas (`sum by (workflow)`). The
//! pending counts are the stream's, read by every replica alike (take the max).

pub(in crate::shell) mod scrape;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use agent_sdk::metrics::SharedReader;
use async_nats::jetstream::{self, consumer::PullConsumer};
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _, UpDownCounter};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{ManualReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use crate::shell::error::{Error, Result};
use crate::shell::run::names;
use crate::shell::run::observed::Observed;

/// How a node exposes its metrics.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// Serve them in the Prometheus text format at `http://{addr}/metrics` (port 0 picks
    /// a free port: see `WorkflowNode::metrics_addr`). `None`: no endpoint.
    pub addr: Option<SocketAddr>,
    /// Whether and where to push them over OTLP.
    pub otlp: Otlp,
    /// How often each workflow's pending event count is read from its consumer.
    pub pending_interval: Duration,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            addr: None,
            otlp: Otlp::FromEnv,
            pending_interval: Duration::from_secs(5),
        }
    }
}

/// Whether to export metrics over OTLP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Otlp {
    /// When `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set
    /// (and neither `OTEL_SDK_DISABLED=true` nor `OTEL_METRICS_EXPORTER=none`), configured
    /// by the standard `OTEL_*` variables; otherwise not.
    FromEnv,
    /// Never.
    Off,
    /// Over `http/protobuf` to this URL (the whole path, e.g. `http://host:4318/v1/metrics`);
    /// the other `OTEL_*` variables still apply.
    Http(String),
}

impl Otlp {
    /// Whether the environment asks for an OTLP metric export.
    fn wanted_by_env() -> bool {
        let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
        let is =
            |k: &str, v: &str| std::env::var(k).is_ok_and(|x| x.trim().eq_ignore_ascii_case(v));
        (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
            && !is("OTEL_SDK_DISABLED", "true")
            && !is("OTEL_METRICS_EXPORTER", "none")
    }
}

/// The instruments and the provider behind them; every method is a no-op when disabled.
pub(in crate::shell) struct Metrics {
    enabled: Option<Enabled>,
}

struct Enabled {
    provider: SdkMeterProvider,
    /// Collected by `/metrics`; `None` when no address is served.
    scrape: Option<Arc<ManualReader>>,
    /// Per workflow, its consumer's (pending, unacked) counts, last read.
    pending: Arc<Mutex<BTreeMap<String, (u64, u64)>>>,
    /// Per limited agent, its gate's (in flight, waiting) counts, as last seen.
    gates: Arc<Mutex<BTreeMap<String, (u64, u64)>>>,
    i: Instruments,
}

struct Instruments {
    runs_started: Counter<u64>,
    runs_ended: Counter<u64>,
    runs_in_flight: UpDownCounter<i64>,
    runs_queued: UpDownCounter<i64>,
    run_duration: Histogram<f64>,
    node_duration: Histogram<f64>,
    call_duration: Histogram<f64>,
    call_retries: Counter<u64>,
    events_processed: Counter<u64>,
    events_redelivered: Counter<u64>,
    cas_conflicts: Counter<u64>,
    unproven: Counter<u64>,
}

/// Bucket bounds in seconds for runs and nodes: 50 ms to an hour.
const LONG: [f64; 15] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// Bucket bounds in seconds for agent calls: 5 ms to 5 minutes.
const SHORT: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

impl Metrics {
    /// Builds the provider with the readers `config` asks for; nothing when it asks none.
    /// Must run inside the tokio runtime (a gRPC exporter's channel lives on it).
    pub(in crate::shell) fn new(config: &MetricsConfig) -> Result<Metrics> {
        // The HTTP exporter builds a reqwest client, which needs the TLS provider.
        agent_sdk::crypto::install();
        let exporter = match &config.otlp {
            Otlp::FromEnv if Otlp::wanted_by_env() => {
                Some(opentelemetry_otlp::MetricExporter::builder().build())
            }
            Otlp::FromEnv | Otlp::Off => None,
            Otlp::Http(url) => {
                use opentelemetry_otlp::WithExportConfig as _;
                let builder = opentelemetry_otlp::MetricExporter::builder().with_http();
                Some(builder.with_endpoint(url.clone()).build())
            }
        };
        let exporter = exporter.transpose().map_err(|e| Error::Setup {
            resource: "the OTLP metric exporter".into(),
            source: e.into(),
        })?;
        if exporter.is_none() && config.addr.is_none() {
            return Ok(Metrics { enabled: None });
        }
        let mut builder = SdkMeterProvider::builder().with_resource(resource());
        if let Some(exporter) = exporter {
            builder = builder.with_periodic_exporter(exporter);
        }
        let scrape = config
            .addr
            .map(|_| Arc::new(ManualReader::builder().build()));
        if let Some(reader) = &scrape {
            builder = builder.with_reader(SharedReader(reader.clone()));
        }
        let provider = builder.build();
        let pending = Arc::new(Mutex::new(BTreeMap::new()));
        let i = Instruments::new(&provider.meter("workflow-node"), pending.clone());
        let gates = Arc::new(Mutex::new(BTreeMap::new()));
        observe_gates(&provider.meter("workflow-node"), &gates);
        Ok(Metrics {
            enabled: Some(Enabled {
                provider,
                scrape,
                pending,
                gates,
                i,
            }),
        })
    }

    /// Counts the cards `registry` ignored because of who signed them, as
    /// `workflow.cards.ignored` (read at each collection; the registry is not kept alive).
    pub(in crate::shell) fn observe_cards_ignored(&self, registry: Weak<agent_sdk::CardCache>) {
        let Some(enabled) = &self.enabled else {
            return;
        };
        enabled
            .provider
            .meter("workflow-node")
            .u64_observable_counter("workflow.cards.ignored")
            .with_unit("{card}")
            .with_description(
                "Agent cards ignored: unsigned, or signed by a key not bound to their name.",
            )
            .with_callback(move |o| {
                if let Some(registry) = registry.upgrade() {
                    o.observe(registry.ignored(), &[]);
                }
            })
            .build();
    }

    /// Records the counts of `agent`'s gate as this replica last saw them (every replica
    /// sees the one mesh-wide entry).
    pub(in crate::shell) fn agent_gate(&self, agent: &str, in_flight: usize, waiting: usize) {
        let Some(enabled) = &self.enabled else {
            return;
        };
        let mut gates = enabled.gates.lock().unwrap_or_else(|p| p.into_inner());
        gates.insert(agent.to_string(), (in_flight as u64, waiting as u64));
    }

    /// The reader `/metrics` collects, when there is one.
    pub(in crate::shell) fn scrape_reader(&self) -> Option<Arc<ManualReader>> {
        self.enabled.as_ref().and_then(|e| e.scrape.clone())
    }

    /// Records what a committed event did to a run of `workflow`.
    pub(in crate::shell) fn observed(&self, workflow: &str, o: &Observed) {
        let Some(Enabled { i, .. }) = &self.enabled else {
            return;
        };
        let wf = KeyValue::new("workflow", workflow.to_string());
        if o.run_started {
            i.runs_started.add(1, std::slice::from_ref(&wf));
            i.runs_in_flight.add(1, std::slice::from_ref(&wf));
        }
        if o.queued != 0 {
            i.runs_queued
                .add(i64::from(o.queued), std::slice::from_ref(&wf));
        }
        if let Some(end) = &o.run_ended {
            let labels = [wf.clone(), KeyValue::new("status", end.status.as_str())];
            i.runs_ended.add(1, &labels);
            i.runs_in_flight.add(-1, std::slice::from_ref(&wf));
            if let Some(seconds) = end.seconds {
                i.run_duration.record(seconds, &labels);
            }
        }
        for node in &o.nodes {
            let labels = [
                wf.clone(),
                KeyValue::new("node_type", node.node_type),
                KeyValue::new("status", node.status.as_str()),
            ];
            i.node_duration.record(node.seconds, &labels);
        }
        for attempt in &o.attempts {
            let labels = [
                wf.clone(),
                KeyValue::new("agent", attempt.agent.clone()),
                KeyValue::new("outcome", attempt.outcome.as_str()),
            ];
            if let Some(seconds) = attempt.seconds {
                i.call_duration.record(seconds, &labels);
            }
            if attempt.retried {
                i.call_retries.add(1, &labels);
            }
        }
    }

    /// Counts an event taken from `workflow`'s stream, processed (`ok`) or not.
    pub(in crate::shell) fn event_processed(&self, workflow: &str, ok: bool) {
        if let Some(Enabled { i, .. }) = &self.enabled {
            let outcome = if ok { "ok" } else { "error" };
            let labels = [
                KeyValue::new("workflow", workflow.to_string()),
                KeyValue::new("outcome", outcome),
            ];
            i.events_processed.add(1, &labels);
        }
    }

    /// Counts an event delivered again (its delivery count is over 1).
    pub(in crate::shell) fn redelivered(&self, workflow: &str) {
        if let Some(Enabled { i, .. }) = &self.enabled {
            let labels = [KeyValue::new("workflow", workflow.to_string())];
            i.events_redelivered.add(1, &labels);
        }
    }

    /// Counts a commit lost to another writer of the run's entry.
    pub(in crate::shell) fn cas_conflict(&self, workflow: &str) {
        if let Some(Enabled { i, .. }) = &self.enabled {
            let labels = [KeyValue::new("workflow", workflow.to_string())];
            i.cas_conflicts.add(1, &labels);
        }
    }

    /// Counts a reply or status update (`kind`) of one of `workflow`'s calls dropped for
    /// want of a valid `Mesh-Call-Mac`: forged, or from an agent that does not prove them.
    pub(in crate::shell) fn unproven(&self, workflow: &str, kind: &'static str) {
        if let Some(Enabled { i, .. }) = &self.enabled {
            let labels = [
                KeyValue::new("workflow", workflow.to_string()),
                KeyValue::new("kind", kind),
            ];
            i.unproven.add(1, &labels);
        }
    }

    /// Exports what is left and stops the readers (up to 5 s; on a blocking thread, as
    /// the SDK asks).
    pub(in crate::shell) async fn shutdown(&self) {
        let Some(Enabled { provider, .. }) = &self.enabled else {
            return;
        };
        let provider = provider.clone();
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            // The SDK says little more (e.g. "Failed to shutdown"): an exporter that could
            // not reach its endpoint.
            Ok(Err(e)) => tracing::warn!("the last metrics may not have been exported: {e}"),
            Err(e) => tracing::warn!("the last metrics were not exported: {e}"),
        }
    }
}

impl Instruments {
    fn new(meter: &Meter, pending: Arc<Mutex<BTreeMap<String, (u64, u64)>>>) -> Instruments {
        let counter = |name: &'static str, unit: &'static str, help: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(help)
                .build()
        };
        let seconds = |name: &'static str, help: &'static str, bounds: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(help)
                .with_boundaries(bounds.to_vec())
                .build()
        };
        for (name, help, pick) in [
            (
                "workflow.events.pending",
                "Events in the workflow's stream not yet delivered, as last read.",
                (|p: &(u64, u64)| p.0) as fn(&(u64, u64)) -> u64,
            ),
            (
                "workflow.events.unacked",
                "Events delivered and not yet acknowledged, as last read.",
                |p: &(u64, u64)| p.1,
            ),
        ] {
            let pending = pending.clone();
            meter
                .u64_observable_gauge(name)
                .with_unit("{event}")
                .with_description(help)
                .with_callback(move |o| {
                    let pending = pending.lock().unwrap_or_else(|p| p.into_inner());
                    for (workflow, counts) in pending.iter() {
                        o.observe(pick(counts), &[KeyValue::new("workflow", workflow.clone())]);
                    }
                })
                .build();
        }
        Instruments {
            runs_started: counter("workflow.runs.started", "{run}", "Runs started."),
            runs_ended: counter("workflow.runs.ended", "{run}", "Runs ended, by status."),
            runs_in_flight: meter
                .i64_up_down_counter("workflow.runs.in_flight")
                .with_unit("{run}")
                .with_description(
                    "Runs started and not ended (this replica's starts less its ends: sum \
                     over replicas).",
                )
                .build(),
            runs_queued: meter
                .i64_up_down_counter("workflow.runs.queued")
                .with_unit("{run}")
                .with_description(
                    "Runs waiting for a slot under their workflow's max_concurrent_runs or \
                     concurrency_key (this replica's queueings less its admissions and ends \
                     of queued runs: sum over replicas).",
                )
                .build(),
            run_duration: seconds("workflow.run.duration", "Run durations.", &LONG),
            node_duration: seconds(
                "workflow.node.duration",
                "Durations of the nodes that ran, by type and status.",
                &LONG,
            ),
            call_duration: seconds(
                "workflow.agent.call.duration",
                "Latency of agent call attempts, by agent and outcome.",
                &SHORT,
            ),
            call_retries: counter(
                "workflow.agent.call.retries",
                "{attempt}",
                "Attempts retried, by agent and the failed attempt's outcome.",
            ),
            events_processed: counter(
                "workflow.events.processed",
                "{event}",
                "Events taken from the stream, processed (ok) or given back (error).",
            ),
            events_redelivered: counter(
                "workflow.events.redelivered",
                "{event}",
                "Events delivered more than once.",
            ),
            cas_conflicts: counter(
                "workflow.cas.conflicts",
                "{commit}",
                "Commits of a run's entry lost to another writer (then planned again).",
            ),
            unproven: counter(
                "workflow.calls.unproven",
                "{message}",
                "Replies and status updates of calls dropped without a valid Mesh-Call-Mac, by kind.",
            ),
        }
    }
}

/// The gauges of the agents' gates: `workflow.agent.calls.in_flight` and
/// `workflow.agent.calls.waiting`, by agent.
fn observe_gates(meter: &Meter, gates: &Arc<Mutex<BTreeMap<String, (u64, u64)>>>) {
    for (name, help, pick) in [
        (
            "workflow.agent.calls.in_flight",
            "Calls holding a slot of a limited agent, mesh-wide, as this replica last saw its gate.",
            (|p: &(u64, u64)| p.0) as fn(&(u64, u64)) -> u64,
        ),
        (
            "workflow.agent.calls.waiting",
            "Calls waiting for a slot of a limited agent, mesh-wide, as this replica last saw its gate.",
            |p: &(u64, u64)| p.1,
        ),
    ] {
        let gates = gates.clone();
        meter
            .u64_observable_gauge(name)
            .with_unit("{call}")
            .with_description(help)
            .with_callback(move |o| {
                let gates = gates.lock().unwrap_or_else(|p| p.into_inner());
                for (agent, counts) in gates.iter() {
                    o.observe(pick(counts), &[KeyValue::new("agent", agent.clone())]);
                }
            })
            .build();
    }
}

/// The resource the metrics describe: `service.name` is `workflow-node` unless
/// `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` names it; the other standard
/// attributes come from the environment.
fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("workflow-node").build()
    }
}

impl Metrics {
    /// What reads `workflow`'s consumer (through `js`) every `interval` for the pending
    /// gauges while the node runs, to spawn; `None` when metrics are off. A read that
    /// fails drops the workflow's values until one succeeds, so a stale count is never
    /// shown as current.
    pub(in crate::shell) fn poll_pending(
        &self,
        js: jetstream::Context,
        ns: &str,
        interval: Duration,
        workflow: String,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let pending = self.enabled.as_ref()?.pending.clone();
        let stream = names::event_stream(ns, &workflow);
        Some(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut consumer: Option<PullConsumer> = None;
            loop {
                tick.tick().await;
                if consumer.is_none() {
                    consumer = js
                        .get_consumer_from_stream(names::CONSUMER, stream.as_str())
                        .await
                        .ok();
                }
                let read = match consumer.as_mut() {
                    Some(c) => c.info().await.map_err(|e| e.to_string()),
                    None => Err("the consumer is not there".into()),
                };
                let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
                match read {
                    Ok(info) => {
                        let counts = (info.num_pending, info.num_ack_pending as u64);
                        pending.insert(workflow.clone(), counts);
                    }
                    Err(e) => {
                        tracing::debug!("reading the pending events of {workflow}: {e}");
                        pending.remove(&workflow);
                        consumer = None;
                    }
                }
            }
        })
    }
}
