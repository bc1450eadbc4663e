//! The soak: the crash workflow (a map, a fork joined with a retried call, a loop with a
//! delay, an approval decided by a script) from many callers at once, on a 3-node cluster
//! with three replicas, while faults drawn at random every few seconds hit it: a replica
//! killed (`kill -9`) and started again, frozen past the ack wait, its connection reset,
//! swallowed, slowed or refused; a JetStream leader stepped down; the agents killed
//! mid-call; a NATS server stopped and started again, or cut from the other two (its
//! routes run through proxies: `test_harness::partition`) and healed; a replica replaced by
//! one whose clock is five minutes ahead or behind (libfaketime), which stays so until it
//! is next replaced. No node has a timeout: only the node's liveness check recovers a lost
//! call.
//!
//! It drives rounds of runs until `SOAK_MINUTES` (default 2) have passed, and checks every
//! round from outside as the crash tests do (one right reply per run, terminal records,
//! whole histories, bounded outboxes, each replica's memory under a bound, no agent call
//! after a run's end). It prints, per round, the runs right, the latency p50/p99 and each process's memory, and at the end
//! the faults by kind, and the seed of its draws (`SOAK_SEED` repeats them; the timings
//! differ). An hour: `SOAK_MINUTES=60 cargo test --release -p workflow-node --test crash
//! soak -- --nocapture`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use test_harness::partition::Partitionable;
use test_harness::proxy::{Fault, Proxy};
use workflow_node::shell::run::names;

use crate::support;
use crate::support::crash::invariants::{check_no_call_after_end, rss_kb, spy_calls};
use crate::support::crash::load::{drive, percentile, Plan};
use crate::support::crash::replicas::{write_file, Logs, Replica, Rng, Spawner};
use crate::support::crash::{
    assert_clean, check_records_of, check_replies_of, stubs, NAME, RUN_DEADLINE, WORKFLOW,
};

/// Runs per round.
const ROUND: usize = 30;
/// How long a fault that holds (a pause, a black hole, a partition, a server down) lasts.
const HOLD: Duration = Duration::from_secs(3);
/// Between two faults: a random time in this range (load, not synchronisation). Two
/// minutes see about twenty faults: every kind at least once.
const BETWEEN_MS: (u64, u64) = (2_000, 6_000);

/// The resident memory no replica may exceed (they use 40–65 MiB in a debug build).
const REPLICA_MIB: u64 = 256;

/// libfaketime as Debian installs it (`.ci/run` installs it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The fault kinds drawn.
const KINDS: [&str; 12] = [
    "kill",
    "pause",
    "cut",
    "black-hole",
    "delay",
    "partition",
    "step-down-stream",
    "step-down-buckets",
    "agents-die",
    "server-restart",
    "server-partition",
    "skewed-replica",
];

/// The processes faults are injected into.
struct Targets {
    cluster: Option<Partitionable>,
    replicas: Vec<Replica>,
    proxies: Vec<Proxy>,
    spawner: Spawner,
    next_id: usize,
    agents: Option<(Proxy, async_nats::Client, Vec<agent_sdk::AgentHandle>)>,
    dir: std::path::PathBuf,
}

impl Targets {
    async fn agents(
        url: &str,
        dir: &std::path::Path,
    ) -> (Proxy, async_nats::Client, Vec<agent_sdk::AgentHandle>) {
        let proxy = Proxy::for_url(url).await.expect("proxy");
        let client = async_nats::connect(proxy.url())
            .await
            .expect("agents connect");
        let handles = stubs(&client, dir).await;
        (proxy, client, handles)
    }

    /// Applies fault `kind` to `victim` (a replica's slot), holding it for [`HOLD`].
    async fn apply(&mut self, kind: &str, victim: usize, urls: &[String]) {
        let proxy = &self.proxies[victim];
        match kind {
            "kill" | "skewed-replica" => {
                self.replicas[victim].kill();
                let url = proxy.url();
                self.next_id += 1;
                // Ahead and behind in turn.
                let skew = if self.next_id.is_multiple_of(2) {
                    "+5m"
                } else {
                    "-5m"
                };
                let env: &[(&str, &str)] = match kind {
                    "kill" => &[],
                    _ => &[
                        ("LD_PRELOAD", LIBFAKETIME),
                        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
                        ("FAKETIME", skew),
                    ],
                };
                self.replicas[victim] =
                    self.spawner
                        .spawn_full(self.next_id, &url, &["--call-check", "2"], env);
            }
            "server-partition" => {
                // Never server 0: the callers and the checks use it.
                let node = 1 + victim % 2;
                let Some(cluster) = &self.cluster else { return };
                cluster.isolate(node);
                let others: Vec<usize> = (0..3).filter(|&i| i != node).collect();
                if let Err(e) = cluster.wait_leader_among(&others).await {
                    eprintln!("after cutting server {node}: {e}");
                }
                tokio::time::sleep(HOLD).await;
                cluster.heal();
                if let Err(e) = cluster.wait_leader_among(&[0, 1, 2]).await {
                    eprintln!("after healing server {node}: {e}");
                }
            }
            "pause" => {
                self.replicas[victim].pause();
                tokio::time::sleep(HOLD).await;
                self.replicas[victim].resume();
            }
            "cut" => proxy.cut(),
            "black-hole" | "delay" | "partition" => {
                let fault = match kind {
                    "black-hole" => Fault::BlackHole,
                    "delay" => Fault::Delay(Duration::from_millis(40)),
                    _ => Fault::Refuse,
                };
                proxy.set(fault);
                tokio::time::sleep(HOLD).await;
                proxy.set(Fault::Pass);
                proxy.cut();
            }
            "step-down-stream" | "step-down-buckets" => {
                let streams = match kind {
                    "step-down-stream" => vec![names::event_stream("mesh", NAME)],
                    _ => vec![
                        format!("KV_{}", names::runs_bucket("mesh")),
                        format!("KV_{}", names::wakes_bucket("mesh")),
                    ],
                };
                let client = async_nats::connect(urls[0].as_str())
                    .await
                    .expect("connect");
                for stream in streams {
                    if let Err(e) = test_harness::step_down(&client, &stream).await {
                        eprintln!("step down {stream}: {e}");
                    }
                }
            }
            "agents-die" => {
                if let Some((proxy, _, _)) = self.agents.take() {
                    proxy.set(Fault::Refuse);
                }
                self.agents = Some(Targets::agents(&urls[1], &self.dir).await);
            }
            "server-restart" => {
                // Never server 0: the callers and the checks use it.
                let node = 1 + victim % 2;
                let Some(mut cluster) = self.cluster.take() else {
                    return;
                };
                cluster = tokio::task::spawn_blocking(move || {
                    cluster
                        .cluster_mut()
                        .kill_node(node)
                        .expect("killing a server");
                    cluster
                })
                .await
                .expect("kill task");
                tokio::time::sleep(HOLD * 2).await;
                cluster = tokio::task::spawn_blocking(move || {
                    cluster
                        .cluster_mut()
                        .start_node(node)
                        .expect("starting the server again");
                    cluster
                })
                .await
                .expect("start task");
                self.cluster = Some(cluster);
            }
            other => unreachable!("no fault {other}"),
        }
    }

    /// The replicas whose resident memory is over [`REPLICA_MIB`]: a replica keeps no
    /// more than its runs in flight and bounded caches, so growth past it is a leak.
    fn over_bound(&self) -> Vec<String> {
        self.replicas
            .iter()
            .filter_map(|r| {
                let mib = rss_kb(r.pid())? / 1024;
                (mib > REPLICA_MIB).then(|| {
                    format!(
                        "replica r{} uses {mib} MiB, over the bound of {REPLICA_MIB}",
                        r.id
                    )
                })
            })
            .collect()
    }

    /// Each replica's and server's resident memory, in MiB.
    fn memory(&self) -> String {
        let mut parts = Vec::new();
        for r in &self.replicas {
            let mib = rss_kb(r.pid()).map_or(0, |kb| kb / 1024);
            parts.push(format!("r{} {mib}", r.id));
        }
        if let Some(cluster) = &self.cluster {
            let cluster = cluster.cluster();
            for i in 0..cluster.len() {
                let mib = cluster
                    .node(i)
                    .pid()
                    .and_then(rss_kb)
                    .map_or(0, |kb| kb / 1024);
                parts.push(format!("n{i} {mib}"));
            }
        }
        parts.join(", ")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soak_ends_every_run_right_under_random_faults() {
    let minutes: f64 = std::env::var("SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(2.0);
    let _machine = support::process::alone().await;
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime"
    );
    let cluster = Partitionable::start(3).await.expect("cluster");
    let urls = cluster.urls();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(urls[0].as_str())
        .await
        .expect("connect");
    let calls = spy_calls(&client).await;
    let logs = Logs::default();
    let workflow = WORKFLOW.replace("default_node_timeout_seconds: 8\n", "");
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "soak.yaml", &workflow),
        ack_wait: 1.0,
        stream_replicas: 3,
        logs: logs.clone(),
    };
    let mut proxies = Vec::new();
    let mut replicas = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let proxy = Proxy::for_url(url).await.expect("proxy");
        replicas.push(spawner.spawn_with(i, &proxy.url(), &["--call-check", "2"]));
        proxies.push(proxy);
    }
    for r in &mut replicas {
        r.wait_ready(Duration::from_secs(30)).await;
    }
    let agents = Targets::agents(&urls[1], dir.path()).await;
    let targets = Arc::new(tokio::sync::Mutex::new(Targets {
        cluster: Some(cluster),
        replicas,
        proxies,
        spawner,
        next_id: 3,
        agents: Some(agents),
        dir: dir.path().to_path_buf(),
    }));

    let counts: Arc<Mutex<BTreeMap<&'static str, usize>>> = Arc::default();
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let injector = {
        let (targets, counts, urls) = (targets.clone(), counts.clone(), urls.clone());
        tokio::spawn(async move {
            let mut rng = match std::env::var("SOAK_SEED").ok().and_then(|s| s.parse().ok()) {
                Some(seed) => Rng::seeded(seed),
                None => Rng::from_clock(),
            };
            eprintln!(
                "fault seed: {0} (SOAK_SEED={0} draws the same faults)",
                rng.seed()
            );
            // Kinds are dealt from a shuffled deck: each comes once in every twelve faults.
            let mut deck: Vec<&str> = Vec::new();
            loop {
                let wait = Duration::from_millis(rng.range(BETWEEN_MS.0, BETWEEN_MS.1));
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                if deck.is_empty() {
                    deck = KINDS.to_vec();
                    for i in (1..deck.len()).rev() {
                        deck.swap(i, rng.range(0, i as u64 + 1) as usize);
                    }
                }
                let kind = deck.pop().expect("dealt above");
                let victim = rng.range(0, 3) as usize;
                targets.lock().await.apply(kind, victim, &urls).await;
                *counts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(kind)
                    .or_default() += 1;
            }
        })
    };

    let begin = Instant::now();
    let mut problems = Vec::new();
    let (mut started, mut right) = (0, 0);
    let mut round = 0;
    while begin.elapsed().as_secs_f64() < minutes * 60.0 {
        let first = round * ROUND;
        let plan = Plan {
            ns: "mesh".into(),
            workflow: NAME.into(),
            first,
            runs: ROUND,
            concurrency: 12,
            input: support::crash::input,
            deadline: RUN_DEADLINE,
            quiet: Duration::from_secs(1),
            resend_after: Duration::from_secs(3),
        };
        let (completed, _) = tokio::sync::watch::channel(0);
        let outcome = drive(&client, &plan, completed).await;
        // No fault while the round is checked (the injector holds the targets while one
        // lasts); the checker's own reads are not what is under test.
        let quiet = targets.lock().await;
        let mut found = check_replies_of(&outcome, first..first + ROUND);
        found.extend(check_records_of(&client, first..first + ROUND).await);
        started += ROUND;
        right += ROUND - found.len().min(ROUND);
        eprintln!(
            "soak {:>5.0} s: {right}/{started} runs right; latency p50 {:?} p99 {:?}; MiB {}",
            begin.elapsed().as_secs_f64(),
            percentile(&outcome.durations, 50),
            percentile(&outcome.durations, 99),
            quiet.memory(),
        );
        problems.extend(quiet.over_bound());
        drop(quiet);
        problems.extend(found);
        round += 1;
    }
    let _ = stop_tx.send(true);
    injector.await.expect("injector");
    problems.extend(check_no_call_after_end(&client, &calls, HOLD * 2).await);
    let counts = counts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if counts.values().sum::<usize>() >= KINDS.len() && counts.len() < KINDS.len() {
        problems.push(format!(
            "a full deck of faults was dealt, yet only {counts:?} came"
        ));
    }
    eprintln!(
        "soak: {right}/{started} runs right in {:.0} s; faults {counts:?}",
        begin.elapsed().as_secs_f64()
    );
    let mut targets = targets.lock().await;
    for r in &mut targets.replicas {
        r.kill();
    }
    assert_clean(&problems, &logs);
}
