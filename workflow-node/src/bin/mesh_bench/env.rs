//! What every scenario shares: the server (ours or `--nats-url`), connections, echo agents
//! that answer at once, and percentile helpers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Value};
use workflow_node::definition::{parse_str, Workflow};

use super::counters::Monitor;

/// The server the bench talks to; ours is killed on drop.
pub(crate) struct Env {
    /// Our server, when no `--nats-url` was given.
    pub(crate) server: Option<nats_process::NatsServer>,
    /// `--nats-url` as given, or our server's; the bench and the node processes it starts
    /// both connect here.
    pub(crate) url: String,
    /// The server's monitoring endpoint (`/varz`, `/jsz`): ours on an ephemeral loopback
    /// port, or `--monitor-url`. Without it, no server counts are reported.
    pub(crate) monitor: Option<Monitor>,
    /// The in-process node's liveness check of calls (`--call-check`; `None`: off).
    pub(crate) call_check: Option<Duration>,
    /// Where `chain` and `throughput` draw the flame graph of the node's threads (`--profile`).
    pub(crate) profile: Option<std::path::PathBuf>,
    /// How the in-process node writes run entries (`--record-format`).
    pub(crate) record_format: workflow_node::shell::run::entry::RecordFormat,
}

impl Env {
    /// Starts a server with monitoring on, or uses `url` (and `monitor`, if given).
    pub(crate) fn new(url: Option<String>, monitor: Option<Monitor>) -> Result<Env> {
        match url {
            Some(url) => Ok(Env {
                server: None,
                url,
                monitor,
                call_check: workflow_node::shell::Config::default().call_check,
                profile: None,
                record_format: Default::default(),
            }),
            None => {
                let server = nats_process::NatsServer::start(nats_process::Options {
                    http_port: Some(0),
                    ..nats_process::Options::default()
                })
                .context("starting nats-server")?;
                let url = server.url();
                let monitor = server.http_port().map(Monitor::local);
                Ok(Env {
                    server: Some(server),
                    url,
                    monitor,
                    call_check: workflow_node::shell::Config::default().call_check,
                    profile: None,
                    record_format: Default::default(),
                })
            }
        }
    }

    /// The server's counters once quiet, when its monitoring endpoint is known.
    pub(crate) async fn counters(&self) -> Result<Option<super::counters::Counters>> {
        match &self.monitor {
            Some(m) => Ok(Some(m.settled().await?)),
            None => Ok(None),
        }
    }

    /// A new connection (each role gets its own, as on a real mesh).
    pub(crate) async fn connect(&self) -> Result<async_nats::Client> {
        connect(&self.url).await
    }
}

/// A new connection to `url`, its tasks on the current runtime.
pub(crate) async fn connect(url: &str) -> Result<async_nats::Client> {
    Ok(async_nats::ConnectOptions::new()
        .subscription_capacity(1 << 20)
        .connect(url)
        .await?)
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(server) = self.server.as_mut() {
            let _ = server.kill();
        }
    }
}

/// A unique namespace per scenario and bench process, so scenarios (and repeated runs on
/// one `--nats-url`) never share streams or buckets.
pub(crate) fn namespace(scenario: &str) -> String {
    format!("mb{}{scenario}", std::process::id())
}

/// What the echo agents observed: time spent in handlers and the first request seen.
#[derive(Default)]
pub(crate) struct AgentProbe {
    handler_ns: AtomicU64,
    first: Mutex<Option<Instant>>,
}

impl AgentProbe {
    /// Total time spent inside handlers so far.
    pub(crate) fn handler_time(&self) -> Duration {
        Duration::from_nanos(self.handler_ns.load(Ordering::Relaxed))
    }

    /// Forgets the first request seen.
    pub(crate) fn reset_first(&self) {
        if let Ok(mut f) = self.first.lock() {
            *f = None;
        }
    }

    /// When the first request since [`AgentProbe::reset_first`] arrived.
    pub(crate) fn first(&self) -> Option<Instant> {
        self.first.lock().ok().and_then(|f| *f)
    }
}

/// Serves agent `name` in `ns`: it answers with its input, after `delay` when non-zero.
pub(crate) async fn echo_agent(
    client: async_nats::Client,
    ns: &str,
    name: &str,
    delay: Duration,
    probe: Arc<AgentProbe>,
) -> Result<agent_sdk::AgentHandle> {
    let handler = agent_sdk::handler_fn(move |req: agent_sdk::NodeRequest| {
        let probe = probe.clone();
        async move {
            let t0 = Instant::now();
            if let Ok(mut f) = probe.first.lock() {
                f.get_or_insert(t0);
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let out = req.input;
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            probe.handler_ns.fetch_add(ns, Ordering::Relaxed);
            Ok(out)
        }
    });
    let agent = agent_sdk::AgentBuilder::new(name)
        .namespace(ns)
        .max_in_flight(8192)
        .handler(handler)
        .serve(client)
        .await?;
    Ok(agent)
}

/// Parses a bench workflow (the definitions are ours: a failure is a bug in the bench).
pub(crate) fn workflow(yaml: &str) -> Result<Workflow> {
    parse_str(yaml, "bench.yaml").map_err(|p| anyhow::anyhow!("bench workflow is invalid: {p:?}"))
}

/// `n` echo nodes in sequence.
pub(crate) fn chain_yaml(name: &str, agent: &str, n: usize) -> String {
    let mut nodes = String::new();
    for i in 0..n {
        let dep = if i == 0 {
            String::new()
        } else {
            format!(", depends_on: [n{}]", i - 1)
        };
        nodes.push_str(&format!(
            "    - {{id: n{i}, type: agent, agent_name: {agent}, input: {{step: {i}, v: \"{{{{workflow.input.v}}}}\"}}{dep}}}\n"
        ));
    }
    format!(
        "name: {name}\nworkflow:\n  description: bench chain\n  nodes:\n{nodes}  output_mapping: {{last: \"{{{{n{}.output.step}}}}\"}}\n",
        n - 1
    )
}

/// Five nodes: one agent, a fork into two agents, a join, one agent.
pub(crate) fn fork_join_yaml(name: &str) -> String {
    format!(
        r#"name: {name}
workflow:
  description: bench fork and join
  nodes:
    - {{id: first, type: agent, agent_name: Echo, input: {{v: "{{{{workflow.input.v}}}}"}}}}
    - {{id: left, type: agent, agent_name: Echo, depends_on: [first], input: {{side: left}}}}
    - {{id: right, type: agent, agent_name: Echo, depends_on: [first], input: {{side: right}}}}
    - {{id: both, type: join, depends_on: [left, right], wait_for: [left, right], strategy: all}}
    - {{id: last, type: agent, agent_name: Echo, depends_on: [both], input: {{done: true}}}}
  output_mapping: {{done: "{{{{last.output.done}}}}"}}
"#
    )
}

/// Nodes a fork-join run executes (the join included).
pub(crate) const FORK_JOIN_NODES: u64 = 5;

/// A map over the input's items, `concurrency_limit` 100.
pub(crate) fn map_yaml(name: &str) -> String {
    format!(
        r#"name: {name}
default_max_map_items: 100000
workflow:
  description: bench map
  nodes:
    - {{id: each, type: map, items: "{{{{workflow.input.items}}}}", node: one, concurrency_limit: 100}}
    - {{id: one, type: agent, agent_name: Echo, input: {{value: "{{{{_map_item}}}}"}}}}
  output_mapping: {{count: "{{{{workflow.input.n}}}}"}}
"#
    )
}

/// The input of a map run over `n` items.
pub(crate) fn map_input(n: usize) -> Value {
    json!({"n": n, "items": (0..n).collect::<Vec<_>>()})
}

/// p-th percentile (0..=100) of sorted samples, in microseconds.
pub(crate) fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)].as_secs_f64() * 1e6
}

/// Median of unsorted values.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// CPU time (user and system) that process `pid` has used so far, from `/proc` (Linux;
/// `None` elsewhere). Ticks are the kernel's USER_HZ, 100 a second on Linux.
pub(crate) fn cpu_time(pid: u32) -> Option<Duration> {
    cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// User and system time in a `/proc/.../stat` line (of a process or of a thread).
pub(crate) fn cpu_ticks(stat: &str) -> Option<Duration> {
    // The command name, field 2, is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Microseconds of CPU per one of `units`, between two readings (`None` if either is
/// missing).
pub(crate) fn cpu_us_per(
    before: Option<Duration>,
    after: Option<Duration>,
    units: u64,
) -> Option<f64> {
    before
        .zip(after)
        .map(|(b, a)| a.saturating_sub(b).as_secs_f64() * 1e6 / units.max(1) as f64)
}

/// CPU time of the bench process (the in-process node, agents and callers) and of our
/// server, so far.
pub(crate) fn cpu_times(env: &Env) -> (Option<Duration>, Option<Duration>) {
    let server = env.server.as_ref().and_then(|s| s.pid()).and_then(cpu_time);
    (cpu_time(std::process::id()), server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_per_unit_is_the_difference_over_the_units_or_none_without_both_readings() {
        let (b, a) = (Duration::from_millis(10), Duration::from_millis(30));
        assert_eq!(cpu_us_per(Some(b), Some(a), 100), Some(200.0));
        assert_eq!(
            cpu_us_per(Some(b), Some(a), 0),
            Some(20_000.0),
            "no unit counts as one"
        );
        assert_eq!(
            cpu_us_per(Some(a), Some(b), 10),
            Some(0.0),
            "a clock that went back"
        );
        assert_eq!(cpu_us_per(None, Some(a), 10), None);
        assert_eq!(cpu_us_per(Some(b), None, 10), None);
    }
}
