//! The scenarios with node processes (`target/release/workflow-node serve`, found next to
//! this binary): `replicas` (throughput with 1, 2, 3 processes, and the resident memory of
//! one with 1,000 runs in flight) and `resume` (`kill -9` of a replica mid-chain).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;
use serde_json::json;

use super::env::{self, AgentProbe, Env};
use super::floor::{self, round};
use super::scenarios::{batch, fork_join_throughput, run_once};
use super::Report;

/// One `workflow-node serve` child; killed on drop.
struct NodeProcess {
    child: Child,
}

impl NodeProcess {
    fn spawn(env: &Env, ns: &str, file: &Path, log: &Path) -> Result<NodeProcess> {
        let exe = std::env::current_exe()?;
        let bin = exe.with_file_name("workflow-node");
        if !bin.exists() {
            bail!(
                "{} is missing: cargo build --release -p workflow-node",
                bin.display()
            );
        }
        let log = std::fs::File::create(log)?;
        let child = Command::new(&bin)
            .arg("serve")
            .arg(file)
            .args(["--nats-url", &env.url, "--namespace", ns, "--ack-wait", "1"])
            .args(["--record-format", env.record_format.as_str()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(NodeProcess { child })
    }

    /// Resident set now and at its peak, in MB (from /proc).
    fn rss_mb(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map_or(f64::NAN, |kb| kb / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Waits for `count` card publications of `name` on `cards` (each replica publishes its
/// card when it starts), at most 20 s.
async fn wait_cards(cards: &mut async_nats::Subscriber, name: &str, count: usize) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut seen = 0;
    while seen < count {
        let msg = tokio::time::timeout_at(deadline, cards.next())
            .await
            .context("a node process did not publish its card within 20 s")?
            .context("card subscription ended")?;
        if serde_json::from_slice::<AgentCard>(&msg.payload).is_ok_and(|c| c.name == name) {
            seen += 1;
        }
    }
    Ok(())
}

/// Waits until `workflow` in `ns` takes requests: a cancel of an unknown run gets an
/// answer (a card can be out before the request subscription), at most 10 s.
async fn wait_serving(caller: &async_nats::Client, ns: &str, workflow: &str) -> Result<()> {
    let probe = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": "bench-probe"}
    }))?;
    let subject = subjects::agent_request(ns, workflow);
    for _ in 0..200 {
        if caller
            .request(subject.clone(), probe.clone().into())
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{workflow} in {ns} never took requests")
}

/// A directory of ours under the temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A scratch dir with the workflow file (node logs go there too).
fn workflow_dir(tag: &str, yaml: &str) -> Result<(Scratch, PathBuf)> {
    let dir =
        Scratch(std::env::temp_dir().join(format!("mesh-bench-{}-{tag}", std::process::id())));
    std::fs::create_dir_all(dir.path())?;
    let file = dir.path().join("bench.yaml");
    std::fs::write(&file, yaml)?;
    Ok((dir, file))
}

/// `replicas`: `throughput` with 1, 2 and 3 node processes; with 1, also 1,000 runs in
/// flight for the resident memory.
pub(crate) async fn replicas(env: &Env) -> Result<Report> {
    let floor = floor::measure(env, "replicas").await?;
    let (dir, file) = workflow_dir("replicas", &env::fork_join_yaml("ForkJoin"))?;
    let caller = env.connect().await?;
    let mut runs_per_s = BTreeMap::new();
    let mut nodes_per_s = BTreeMap::new();
    let mut rows = Vec::new();
    let mut rss = f64::NAN;
    for k in 1..=3usize {
        let ns = env::namespace(&format!("rep{k}"));
        let probe = Arc::new(AgentProbe::default());
        let agent =
            env::echo_agent(env.connect().await?, &ns, "Echo", Duration::ZERO, probe).await?;
        let mut cards = caller.subscribe(subjects::agent_cards(&ns)).await?;
        caller.flush().await?;
        let mut procs = Vec::new();
        for i in 0..k {
            procs.push(NodeProcess::spawn(
                env,
                &ns,
                &file,
                &dir.path().join(format!("node-{k}-{i}.log")),
            )?);
        }
        wait_cards(&mut cards, "ForkJoin", k).await?;
        wait_serving(&caller, &ns, "ForkJoin").await?;
        batch(&caller, &ns, "ForkJoin", 128, 64, Duration::from_secs(30)).await?;
        let (rps_k, nps_k, k_rows, _) = fork_join_throughput(&caller, &ns, |in_flight, _| {
            format!("{k} replica(s), {in_flight} in flight")
        })
        .await?;
        rows.extend(k_rows);
        if k == 1 {
            let node = &procs[0];
            let peak = Arc::new(Mutex::new(0f64));
            let (done, secs) = {
                let run = batch(
                    &caller,
                    &ns,
                    "ForkJoin",
                    3_000,
                    1_000,
                    Duration::from_secs(120),
                );
                let sample = async {
                    loop {
                        let (now, _) = node.rss_mb();
                        if let Ok(mut p) = peak.lock() {
                            *p = p.max(now);
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                };
                tokio::select! { r = run => r?, _ = sample => unreachable!("sampling never ends") }
            };
            let (_, hwm) = node.rss_mb();
            rss = peak.lock().map(|p| *p).unwrap_or(f64::NAN).max(hwm);
            rows.push((
                "1 replica, 1,000 in flight".into(),
                format!(
                    "{:.0} runs/s; node RSS peak {rss:.1} MB",
                    done as f64 / secs
                ),
            ));
        }
        runs_per_s.insert(k.to_string(), rps_k);
        nodes_per_s.insert(k.to_string(), nps_k);
        drop(procs);
        agent.stop().await;
    }
    let json = json!({
        "floor": floor.json(),
        "runs_per_s": runs_per_s,
        "node_executions_per_s": nodes_per_s,
        "rss_mb": round(rss),
    });
    Ok(Report {
        name: "replicas",
        floor,
        json,
        rows,
    })
}

/// Agent time per chain node in `resume`.
const RESUME_AGENT_DELAY: Duration = Duration::from_millis(30);
/// Kill offsets after the 4th node's dispatch, spread over the agent's work and its reply.
const KILL_OFFSETS_MS: [u64; 6] = [5, 15, 25, 29, 31, 35];

/// `resume`: two replicas; a chain of 10 nodes whose agent takes 30 ms; `kill -9` one
/// replica at various instants after the 4th dispatch; time to the next dispatch.
pub(crate) async fn resume(env: &Env) -> Result<Report> {
    let floor = floor::measure(env, "resume").await?;
    let ns = env::namespace("resume");
    let (dir, file) = workflow_dir("resume", &env::chain_yaml("Chain", "Slow", 10))?;
    let caller = env.connect().await?;
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let a = arrivals.clone();
    let handler = agent_sdk::handler_fn(move |req: agent_sdk::NodeRequest| {
        if let Ok(mut v) = a.lock() {
            v.push(Instant::now());
        }
        async move {
            tokio::time::sleep(RESUME_AGENT_DELAY).await;
            Ok(req.input)
        }
    });
    let agent = agent_sdk::AgentBuilder::new("Slow")
        .namespace(&ns)
        .handler(handler)
        .serve(env.connect().await?)
        .await?;
    let mut cards = caller.subscribe(subjects::agent_cards(&ns)).await?;
    caller.flush().await?;
    let log = |i: usize| dir.path().join(format!("node-{i}.log"));
    let mut procs = vec![
        NodeProcess::spawn(env, &ns, &file, &log(0))?,
        NodeProcess::spawn(env, &ns, &file, &log(1))?,
    ];
    wait_cards(&mut cards, "Chain", 2).await?;
    wait_serving(&caller, &ns, "Chain").await?;
    let input = json!({"v": 1});
    run_once(&caller, &ns, "Chain", &input, Duration::from_secs(30)).await?;
    let mut trials = Vec::new();
    for (t, offset) in KILL_OFFSETS_MS.iter().enumerate() {
        if let Ok(mut v) = arrivals.lock() {
            v.clear();
        }
        let run = tokio::spawn({
            let (caller, ns, input) = (caller.clone(), ns.clone(), input.clone());
            async move { run_once(&caller, &ns, "Chain", &input, Duration::from_secs(60)).await }
        });
        let nth = |n: usize| arrivals.lock().ok().and_then(|v| v.get(n).copied());
        let fourth = wait_for(|| nth(3), Duration::from_secs(20))
            .await
            .context("the 4th node was not dispatched")?;
        tokio::time::sleep_until((fourth + Duration::from_millis(*offset)).into()).await;
        let victim = t % 2;
        let killed_at = Instant::now();
        procs[victim].kill9();
        let after = || {
            arrivals
                .lock()
                .ok()
                .and_then(|v| v.iter().copied().find(|at| *at > killed_at))
        };
        let next = wait_for(after, Duration::from_secs(30))
            .await
            .context("no node was dispatched after the kill")?;
        let ms = next.saturating_duration_since(killed_at).as_secs_f64() * 1e3;
        trials.push(ms);
        run.await??;
        procs[victim] = NodeProcess::spawn(env, &ns, &file, &log(victim + 2 * (t + 1)))?;
        wait_cards(&mut cards, "Chain", 1).await?;
        wait_serving(&caller, &ns, "Chain").await?;
    }
    drop(procs);
    agent.stop().await;
    let median = env::median(trials.clone());
    let max = trials.iter().copied().fold(0f64, f64::max);
    let rows = vec![
        (
            "kill -9 to next dispatch, median / max".into(),
            format!("{median:.0} ms / {max:.0} ms"),
        ),
        (
            "  trials (kill at +ms after dispatch)".into(),
            KILL_OFFSETS_MS
                .iter()
                .zip(&trials)
                .map(|(o, ms)| format!("+{o}: {ms:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "  agent time / ack_wait".into(),
            format!("{} ms / 1 s", RESUME_AGENT_DELAY.as_millis()),
        ),
    ];
    let json = json!({
        "floor": floor.json(),
        "resume_ms": round(median),
        "resume_max_ms": round(max),
        "resume_trials_ms": trials.iter().map(|t| round(*t)).collect::<Vec<_>>(),
        "ack_wait_ms": 1000,
        "agent_time_ms": RESUME_AGENT_DELAY.as_millis() as u64,
    });
    Ok(Report {
        name: "resume",
        floor,
        json,
        rows,
    })
}

/// Polls `f` every millisecond until it yields, at most `limit`.
async fn wait_for<T>(f: impl Fn() -> Option<T>, limit: Duration) -> Option<T> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(v) = f() {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}
