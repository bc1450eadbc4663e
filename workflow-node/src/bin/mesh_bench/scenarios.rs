//! The in-process scenarios: `chain`, `throughput` and `map`. Each starts its own echo
//! agent and workflow node (in this process, on their own connections) in a namespace of
//! its own, and measures the floor on the same server first.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use workflow_node::cli::client::invoke;
use workflow_node::definition::Workflow;
use workflow_node::shell::{names, Config, WorkflowNode};

use super::env::{self, percentile_us, AgentProbe, Env};
use super::floor::{self, round};
use super::Report;

/// An echo agent and a workflow node in one namespace, and a caller connection.
pub(crate) struct Mesh {
    pub(crate) ns: String,
    pub(crate) caller: async_nats::Client,
    pub(crate) probe: Arc<AgentProbe>,
    node: Option<WorkflowNode>,
    agent: Option<agent_sdk::AgentHandle>,
}

impl Mesh {
    async fn start(env: &Env, scenario: &str, workflow: Workflow) -> Result<Mesh> {
        let ns = env::namespace(scenario);
        let config = Config {
            namespace: ns.clone(),
            ..Config::default()
        };
        let node = WorkflowNode::start(env.connect().await?, vec![workflow], config)
            .await
            .map_err(anyhow::Error::msg)?;
        let probe = Arc::new(AgentProbe::default());
        let agent = env::echo_agent(
            env.connect().await?,
            &ns,
            "Echo",
            Duration::ZERO,
            probe.clone(),
        )
        .await?;
        Ok(Mesh {
            ns,
            caller: env.connect().await?,
            probe,
            node: Some(node),
            agent: Some(agent),
        })
    }

    /// One run of `workflow`; fails unless it succeeds.
    pub(crate) async fn run(&self, workflow: &str, input: &Value, timeout: Duration) -> Result<()> {
        run_once(&self.caller, &self.ns, workflow, input, timeout).await
    }

    async fn stop(mut self) {
        if let Some(node) = self.node.take() {
            node.shutdown().await;
        }
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
    }
}

/// One run through the caller's side of the protocol; fails unless it succeeds.
pub(crate) async fn run_once(
    caller: &async_nats::Client,
    ns: &str,
    workflow: &str,
    input: &Value,
    timeout: Duration,
) -> Result<()> {
    let r = invoke(caller, ns, workflow, input, timeout, |_| {}).await?;
    if r.status != "success" {
        bail!(
            "a {workflow} run ended {}: {}",
            r.status,
            r.error.unwrap_or_default()
        );
    }
    Ok(())
}

/// `runs` runs, `in_flight` at a time, bounded by `limit`; returns (runs done, seconds).
pub(crate) async fn batch(
    caller: &async_nats::Client,
    ns: &str,
    workflow: &str,
    runs: usize,
    in_flight: usize,
    limit: Duration,
) -> Result<(usize, f64)> {
    let deadline = Instant::now() + limit;
    let input = json!({"v": 1});
    let t0 = Instant::now();
    let mut results = futures::stream::iter(0..runs)
        .take_while(|_| futures::future::ready(Instant::now() < deadline))
        .map(|_| run_once(caller, ns, workflow, &input, Duration::from_secs(60)))
        .buffer_unordered(in_flight);
    let mut done = 0;
    while let Some(r) = results.next().await {
        r?;
        done += 1;
    }
    Ok((done, t0.elapsed().as_secs_f64()))
}

/// Nodes in the chain.
const CHAIN_NODES: usize = 10;

/// `chain`: 10 echo nodes in a row, one run at a time.
pub(crate) async fn chain(env: &Env) -> Result<Report> {
    let floor = floor::measure(env, "chain").await?;
    let wf = env::workflow(&env::chain_yaml("Chain", "Echo", CHAIN_NODES))?;
    let mesh = Mesh::start(env, "chain", wf).await?;
    let input = json!({"v": 1});
    let timeout = Duration::from_secs(30);
    for _ in 0..20 {
        mesh.run("Chain", &input, timeout).await?;
    }
    let (mut overhead, mut start, mut latency) = (Vec::new(), Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    for _ in 0..300 {
        if Instant::now() > deadline {
            break;
        }
        mesh.probe.reset_first();
        let agent0 = mesh.probe.handler_time();
        let t0 = Instant::now();
        mesh.run("Chain", &input, timeout).await?;
        let lat = t0.elapsed();
        let agent = mesh.probe.handler_time().saturating_sub(agent0);
        latency.push(lat);
        overhead.push(lat.saturating_sub(agent) / CHAIN_NODES as u32);
        if let Some(first) = mesh.probe.first() {
            start.push(first.saturating_duration_since(t0));
        }
    }
    mesh.stop().await;
    for v in [&mut overhead, &mut start, &mut latency] {
        v.sort();
    }
    let o50 = percentile_us(&overhead, 50.0);
    let json = json!({
        "floor": floor.json(),
        "runs": latency.len(),
        "run_latency_p50_us": round(percentile_us(&latency, 50.0)),
        "per_node_overhead_p50_us": round(o50),
        "per_node_overhead_p99_us": round(percentile_us(&overhead, 99.0)),
        "per_node_overhead_vs_floor": round(o50 / floor.step_p50() * 10.0) / 10.0,
        "start_latency_p50_us": round(percentile_us(&start, 50.0)),
        "start_latency_p99_us": round(percentile_us(&start, 99.0)),
    });
    let rows = vec![
        ("runs measured".into(), latency.len().to_string()),
        ("run latency p50".into(), us(percentile_us(&latency, 50.0))),
        (
            "per-node overhead p50 / p99".into(),
            format!("{} / {}", us(o50), us(percentile_us(&overhead, 99.0))),
        ),
        (
            "  vs floor (rr + CAS p50)".into(),
            format!("{:.2}x of {}", o50 / floor.step_p50(), us(floor.step_p50())),
        ),
        (
            "start latency p50 / p99".into(),
            format!(
                "{} / {}",
                us(percentile_us(&start, 50.0)),
                us(percentile_us(&start, 99.0))
            ),
        ),
    ];
    Ok(Report {
        name: "chain",
        floor,
        json,
        rows,
    })
}

/// `throughput`: the 5-node fork/join workflow, 64 and 256 runs in flight.
pub(crate) async fn throughput(env: &Env) -> Result<Report> {
    let floor = floor::measure(env, "throughput").await?;
    let wf = env::workflow(&env::fork_join_yaml("ForkJoin"))?;
    let mesh = Mesh::start(env, "throughput", wf).await?;
    batch(
        &mesh.caller,
        &mesh.ns,
        "ForkJoin",
        128,
        64,
        Duration::from_secs(30),
    )
    .await?;
    let (runs_per_s, nodes_per_s, rows) =
        fork_join_throughput(&mesh.caller, &mesh.ns, |in_flight, done| {
            format!("{in_flight} in flight ({done} runs)")
        })
        .await?;
    mesh.stop().await;
    let json = json!({
        "floor": floor.json(),
        "runs_per_s": runs_per_s,
        "node_executions_per_s": nodes_per_s,
        "nodes_per_run": env::FORK_JOIN_NODES,
    });
    Ok(Report {
        name: "throughput",
        floor,
        json,
        rows,
    })
}

/// Counts bytes and messages written to a bucket (every KV write is a message on
/// `$KV.{bucket}.{key}`), and the largest one.
struct KvMeter {
    bytes: Arc<AtomicU64>,
    largest: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl KvMeter {
    async fn start(client: &async_nats::Client, buckets: &[String]) -> Result<KvMeter> {
        let bytes = Arc::new(AtomicU64::new(0));
        let largest = Arc::new(AtomicU64::new(0));
        let mut subs = Vec::new();
        for b in buckets {
            subs.push(client.subscribe(messages::subjects::kv_all(b)).await?);
        }
        client.flush().await?;
        let (b, l) = (bytes.clone(), largest.clone());
        let task = tokio::spawn(async move {
            let mut all = futures::stream::select_all(subs);
            while let Some(msg) = all.next().await {
                let n = msg.length as u64;
                b.fetch_add(n, Ordering::Relaxed);
                l.fetch_max(msg.payload.len() as u64, Ordering::Relaxed);
            }
        });
        Ok(KvMeter {
            bytes,
            largest,
            task,
        })
    }

    /// (bytes so far, largest payload so far), resetting both.
    fn take(&self) -> (u64, u64) {
        (
            self.bytes.swap(0, Ordering::Relaxed),
            self.largest.swap(0, Ordering::Relaxed),
        )
    }
}

impl Drop for KvMeter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `map`: maps over 100, 1,000 and 10,000 items with `concurrency_limit` 100.
pub(crate) async fn map(env: &Env) -> Result<Report> {
    let floor = floor::measure(env, "map").await?;
    let wf = env::workflow(&env::map_yaml("Map"))?;
    let mesh = Mesh::start(env, "map", wf).await?;
    let meter_client = env.connect().await?;
    let buckets = [names::runs_bucket(&mesh.ns), names::timers_bucket(&mesh.ns)];
    let meter = KvMeter::start(&meter_client, &buckets).await?;
    mesh.run("Map", &env::map_input(100), Duration::from_secs(60))
        .await?;
    let (mut per_item, mut bytes_per_item, mut total_ms, mut largest) = (
        BTreeMap::new(),
        BTreeMap::new(),
        BTreeMap::new(),
        BTreeMap::new(),
    );
    let mut rows = Vec::new();
    for n in [100usize, 1_000, 10_000] {
        let input = env::map_input(n);
        // Small maps are repeated (median), so one hiccup does not decide the figure.
        let repeats = if n <= 1_000 { 5 } else { 1 };
        let mut times = Vec::new();
        let mut bytes = Vec::new();
        let mut big = 0;
        for _ in 0..repeats {
            tokio::time::sleep(Duration::from_millis(200)).await; // let the meter drain
            meter.take();
            let t0 = Instant::now();
            mesh.run("Map", &input, Duration::from_secs(600)).await?;
            times.push(t0.elapsed().as_secs_f64());
            tokio::time::sleep(Duration::from_millis(200)).await;
            let (b, l) = meter.take();
            bytes.push(b as f64);
            big = big.max(l);
        }
        let secs = env::median(times);
        let per = secs * 1e6 / n as f64;
        let bpi = env::median(bytes) / n as f64;
        per_item.insert(n.to_string(), round(per));
        bytes_per_item.insert(n.to_string(), round(bpi));
        total_ms.insert(n.to_string(), round(secs * 1e3));
        largest.insert(n.to_string(), big);
        rows.push((
            format!("{n} items"),
            format!(
                "{:.0} ms total, {} per item, {bpi:.0} KV bytes/item, largest KV write {big} B",
                secs * 1e3,
                us(per)
            ),
        ));
    }
    drop(meter);
    mesh.stop().await;
    let ratio = per_item["10000"] / per_item["100"];
    rows.push(("per-item 10,000 / 100".into(), format!("{ratio:.2}x")));
    let json = json!({
        "floor": floor.json(),
        "total_ms": total_ms,
        "per_item_overhead_us": per_item,
        "kv_bytes_per_item": bytes_per_item,
        "largest_kv_write_bytes": largest,
        "per_item_ratio_10000_vs_100": round(ratio * 100.0) / 100.0,
    });
    Ok(Report {
        name: "map",
        floor,
        json,
        rows,
    })
}

/// Microseconds, readable.
pub(crate) fn us(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.1} ms", x / 1e3)
    } else {
        format!("{x:.0} µs")
    }
}

/// Fork/join runs at 64 and 256 in flight: runs/s and node executions/s keyed by runs in
/// flight, and one table row each (labelled by `label(in_flight, runs done)`).
pub(super) async fn fork_join_throughput(
    caller: &async_nats::Client,
    ns: &str,
    label: impl Fn(usize, usize) -> String,
) -> Result<(
    BTreeMap<String, f64>,
    BTreeMap<String, f64>,
    Vec<(String, String)>,
)> {
    let mut runs_per_s = BTreeMap::new();
    let mut nodes_per_s = BTreeMap::new();
    let mut rows = Vec::new();
    for in_flight in [64usize, 256] {
        let (done, secs) = batch(
            caller,
            ns,
            "ForkJoin",
            in_flight * 10,
            in_flight,
            Duration::from_secs(60),
        )
        .await?;
        let rps = done as f64 / secs;
        let nps = rps * env::FORK_JOIN_NODES as f64;
        runs_per_s.insert(in_flight.to_string(), round(rps));
        nodes_per_s.insert(in_flight.to_string(), round(nps));
        rows.push((
            label(in_flight, done),
            format!("{rps:.0} runs/s, {nps:.0} node executions/s"),
        ));
    }
    Ok((runs_per_s, nodes_per_s, rows))
}
