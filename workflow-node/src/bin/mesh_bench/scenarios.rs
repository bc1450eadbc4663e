//! The in-process scenarios `chain` and `throughput` (and the `Mesh` that `map` uses too). Each starts its own echo
//! agent and workflow node (in this process, on their own connections) in a namespace of
//! its own, and measures the floor on the same server first.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_sdk::workflow::invoke;
use anyhow::{bail, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use workflow_node::definition::Workflow;
use workflow_node::shell::{Config, WorkflowNode};

use super::counters::{Counters, PerUnit};
use super::env::{self, percentile_us, AgentProbe, Env};
use super::floor::{self, round, Floor};
use super::usage::{self, Usage};
use super::wiretap::{self, Wiretap};
use super::Report;

/// Longest wait for a scenario's node to see its agent's card.
const READY_LIMIT: Duration = Duration::from_secs(10);

/// An echo agent and a workflow node in one namespace, and a caller connection.
pub(crate) struct Mesh {
    pub(crate) ns: String,
    pub(crate) caller: async_nats::Client,
    pub(crate) probe: Arc<AgentProbe>,
    node: Option<WorkflowNode>,
    agent: Option<agent_sdk::AgentHandle>,
    /// The node's own runtime (see `usage`): its connection and tasks run there.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Mesh {
    /// Starts the node and the agent in a namespace of the scenario's, and waits until
    /// they are ready.
    pub(crate) async fn start(env: &Env, scenario: &str, workflow: Workflow) -> Result<Mesh> {
        Mesh::start_with(env, scenario, vec![workflow], Config::default()).await
    }

    /// [`Mesh::start`] with several workflows and the node's settings (its namespace is
    /// the scenario's).
    pub(crate) async fn start_with(
        env: &Env,
        scenario: &str,
        workflows: Vec<Workflow>,
        config: Config,
    ) -> Result<Mesh> {
        let ns = env::namespace(scenario);
        let config = Config {
            namespace: ns.clone(),
            call_check: env.call_check,
            record_format: env.record_format,
            ..config
        };
        let runtime = usage::runtime()?;
        let (url, node_ns) = (env.url.clone(), ns.clone());
        let started = runtime.spawn(async move {
            let client = env::connect(&url).await?;
            WorkflowNode::start(client, workflows, config)
                .await
                .map_err(|e| anyhow::anyhow!("the node in {node_ns}: {e}"))
        });
        let node = match started.await {
            Ok(Ok(node)) => node,
            Ok(Err(e)) => {
                drop_runtime(Some(runtime));
                return Err(e);
            }
            Err(e) => {
                drop_runtime(Some(runtime));
                return Err(e.into());
            }
        };
        let runtime = Some(runtime);
        let probe = Arc::new(AgentProbe::default());
        let agent = env::echo_agent(
            env.connect().await?,
            &ns,
            "Echo",
            Duration::ZERO,
            probe.clone(),
        )
        .await?;
        // Ready means: the node takes requests (it returns from `start` once the server
        // has its subscriptions), the agent too (likewise), and the node has the agent's
        // card, so the first dispatch does not wait for it. Each scenario's warm-up runs
        // then prove the whole path before anything is timed.
        let deadline = Instant::now() + READY_LIMIT;
        while node.registry().get("Echo").is_none() {
            if Instant::now() > deadline {
                bail!("the node in {ns} did not see the Echo agent's card within {READY_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(Mesh {
            ns,
            caller: env.connect().await?,
            probe,
            node: Some(node),
            agent: Some(agent),
            runtime,
        })
    }

    /// What the node alone has spent so far (see `usage`).
    pub(crate) fn usage(&self) -> Usage {
        Usage::now(
            self.node
                .as_ref()
                .map(WorkflowNode::encoded)
                .unwrap_or_default(),
        )
    }

    /// One run of `workflow`; fails unless it succeeds.
    pub(crate) async fn run(&self, workflow: &str, input: &Value, timeout: Duration) -> Result<()> {
        run_once(&self.caller, &self.ns, workflow, input, timeout).await
    }

    /// Stops the node, then the agent.
    pub(crate) async fn stop(mut self) {
        if let (Some(node), Some(rt)) = (self.node.take(), &self.runtime) {
            let _ = rt.spawn(node.shutdown()).await;
        }
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        drop_runtime(self.runtime.take());
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        drop_runtime(self.runtime.take());
    }
}

/// Ends a node's runtime from within the bench's own (where dropping it would block).
fn drop_runtime(runtime: Option<tokio::runtime::Runtime>) {
    if let Some(rt) = runtime {
        rt.shutdown_background();
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
pub(crate) const CHAIN_NODES: usize = 10;
/// Chain runs under the wiretap, after the timed ones.
const WIRETAP_RUNS: usize = 20;

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
    let before = env.counters().await?;
    let cpu_before = env::cpu_times(env);
    let node_before = mesh.usage();
    let recording = env
        .profile
        .as_deref()
        .map(super::profile::start)
        .transpose()?;
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
    let node_after = mesh.usage();
    let cpu_after = env::cpu_times(env);
    let profiled = match recording {
        Some(r) => Some(r.finish()?),
        None => None,
    };
    let nodes = (latency.len() * CHAIN_NODES) as u32;
    let node_alone = node_after.per(&node_before, u64::from(nodes));
    let bench_cpu = env::cpu_us_per(cpu_before.0, cpu_after.0, u64::from(nodes));
    let server_cpu = env::cpu_us_per(cpu_before.1, cpu_after.1, u64::from(nodes));
    let counts = per_unit(env, &mesh.ns, before.as_ref(), u64::from(nodes)).await?;
    // Which messages, apart from the timed runs.
    let tap = Wiretap::start(env.connect().await?, &mesh.ns).await?;
    for _ in 0..WIRETAP_RUNS {
        mesh.run("Chain", &input, timeout).await?;
    }
    let tapped = tap.take((WIRETAP_RUNS * CHAIN_NODES) as u64).await?;
    let (timeline, typical, spans) = tap.node_timeline();
    drop(tap);
    mesh.stop().await;
    for v in [&mut overhead, &mut start, &mut latency] {
        v.sort();
    }
    let o50 = percentile_us(&overhead, 50.0);
    let mut json = json!({
        "floor": floor.json(),
        "runs": latency.len(),
        "run_latency_p50_us": round(percentile_us(&latency, 50.0)),
        "per_node_overhead_p50_us": round(o50),
        "per_node_overhead_p99_us": round(percentile_us(&overhead, 99.0)),
        "per_node_overhead_vs_floor": round(o50 / floor.step_p50() * 10.0) / 10.0,
        "start_latency_p50_us": round(percentile_us(&start, 50.0)),
        "start_latency_p99_us": round(percentile_us(&start, 99.0)),
    });
    let mut rows = vec![
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
    if let (Some(b), Some(s)) = (bench_cpu, server_cpu) {
        rows.push((
            "CPU per node execution: bench / server".into(),
            format!("{} (node, agent, caller) / {} (nats-server)", us(b), us(s)),
        ));
        json["cpu_per_node_us"] = json!({"bench": round(b), "server": round(s)});
        if let Some(n) = node_alone.cpu_us {
            json["cpu_per_node_us"]["node"] = json!(round(n));
        }
    }
    rows.extend(node_alone.rows());
    json["node_alone_per_node_execution"] = node_alone.json();
    if let (Some(samples), Some(svg)) = (profiled, &env.profile) {
        rows.push((
            "profile of the node's threads".into(),
            format!("{} ({samples} samples)", svg.display()),
        ));
    }
    add_counts(&mut json, &mut rows, "per_node_execution", counts, &floor);
    rows.push((
        format!("messages per node by subject ({WIRETAP_RUNS} runs, not timed)"),
        wiretap::text(&tapped),
    ));
    json["messages_per_node_by_subject"] = wiretap::json(&tapped);
    rows.push((
        format!("one node, request to request ({typical} of {spans} alike)"),
        wiretap::timeline_text(&timeline),
    ));
    json["node_timeline"] = wiretap::timeline_json(&timeline);
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
    let before = env.counters().await?;
    // The node's own CPU under load, without the allocation counter's (see `usage`).
    let paused = usage::pause_counting();
    let node_before = mesh.usage();
    let server_before = env::cpu_times(env).1;
    let recording = env
        .profile
        .as_deref()
        .map(super::profile::start)
        .transpose()?;
    let (runs_per_s, nodes_per_s, mut rows, runs) =
        fork_join_throughput(&mesh.caller, &mesh.ns, |in_flight, done| {
            format!("{in_flight} in flight ({done} runs)")
        })
        .await?;
    if let (Some(r), Some(svg)) = (recording, &env.profile) {
        let samples = r.finish()?;
        rows.push((
            "profile of the node's threads".into(),
            format!("{} ({samples} samples)", svg.display()),
        ));
    }
    let executions = runs as u64 * env::FORK_JOIN_NODES;
    let server_cpu = env::cpu_us_per(server_before, env::cpu_times(env).1, executions);
    let node_alone = mesh.usage().per(&node_before, executions);
    drop(paused);
    let counts = per_unit(
        env,
        &mesh.ns,
        before.as_ref(),
        runs as u64 * env::FORK_JOIN_NODES,
    )
    .await?;
    mesh.stop().await;
    rows.extend(node_alone.rows());
    // What bounds the rate on two shared cores: the server's CPU per node execution under
    // load, beside its CPU per floor step at the same concurrency.
    if let Some(s) = server_cpu {
        rows.push(("  nats-server CPU per node execution".into(), us(s)));
    }
    // The ceiling on this machine: floor steps per second at the same concurrency.
    let mut floor_rate = serde_json::Map::new();
    let mut floor_cpu = serde_json::Map::new();
    for in_flight in [64usize, 256] {
        let (rate, step_cpu) =
            floor::steps_per_s(env, &format!("throughput{in_flight}"), in_flight).await?;
        let nodes = nodes_per_s
            .get(&in_flight.to_string())
            .copied()
            .unwrap_or(0.0);
        let cpu = step_cpu.map_or(String::new(), |c| {
            floor_cpu.insert(in_flight.to_string(), json!(round(c)));
            format!("; nats-server CPU {} per step", us(c))
        });
        rows.push((
            format!("  floor steps (rr + CAS), {in_flight} in flight"),
            format!(
                "{rate:.0}/s (node executions: {:.2}x of it){cpu}",
                nodes / rate
            ),
        ));
        floor_rate.insert(in_flight.to_string(), json!(round(rate)));
    }
    let mut json = json!({
        "floor": floor.json(),
        "runs_per_s": runs_per_s,
        "node_executions_per_s": nodes_per_s,
        "floor_steps_per_s": floor_rate,
        "floor_server_cpu_per_step_us": floor_cpu,
        "server_cpu_per_node_execution_us": server_cpu.map(round),
        "nodes_per_run": env::FORK_JOIN_NODES,
        "node_alone_per_node_execution": node_alone.json(),
    });
    add_counts(&mut json, &mut rows, "per_node_execution", counts, &floor);
    Ok(Report {
        name: "throughput",
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
    usize,
)> {
    let mut total = 0;
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
        total += done;
        let rps = done as f64 / secs;
        let nps = rps * env::FORK_JOIN_NODES as f64;
        runs_per_s.insert(in_flight.to_string(), round(rps));
        nodes_per_s.insert(in_flight.to_string(), round(nps));
        rows.push((
            label(in_flight, done),
            format!("{rps:.0} runs/s, {nps:.0} node executions/s"),
        ));
    }
    Ok((runs_per_s, nodes_per_s, rows, total))
}

/// The server's counts since `before`, per one of `units`, when monitoring is on.
pub(crate) async fn per_unit(
    env: &Env,
    ns: &str,
    before: Option<&Counters>,
    units: u64,
) -> Result<Option<PerUnit>> {
    Ok(match (before, env.counters().await?) {
        (Some(b), Some(now)) => Some(now.since(b).named(ns).per(units)),
        _ => None,
    })
}

/// Adds the server's counts per unit (`key`: `per_node_execution`, ...) and the floor's
/// per step, with their ratio, to the JSON and the table.
pub(crate) fn add_counts(
    json: &mut Value,
    rows: &mut Vec<(String, String)>,
    key: &str,
    counts: Option<PerUnit>,
    floor: &Floor,
) {
    let Some(c) = counts else { return };
    let label = key.replace('_', " ");
    rows.push((format!("server counts {label}"), c.text()));
    rows.push(("  JS writes by stream".into(), c.streams_text()));
    json["server_counts"] = json!({ key: c.json() });
    compare_with_floor(json, rows, &c, floor);
}

/// The floor's counts per step and the ratio of `c`'s to them, in the JSON (under
/// `server_counts`) and the table.
pub(crate) fn compare_with_floor(
    json: &mut Value,
    rows: &mut Vec<(String, String)>,
    c: &PerUnit,
    floor: &Floor,
) {
    let Some(f) = floor.step_counts() else { return };
    rows.push(("  floor per step (rr + CAS)".into(), f.text()));
    rows.push((
        "  vs floor: msgs in / bytes in".into(),
        format!(
            "{:.1}x / {:.1}x",
            c.in_msgs / f.in_msgs,
            c.in_bytes / f.in_bytes
        ),
    ));
    json["server_counts"]["floor_per_step"] = f.json();
    json["server_counts"]["msgs_in_vs_floor"] = json!(round(c.in_msgs / f.in_msgs));
}
