//! Every fault a deployment meets, once each, under load, on a 3-node cluster with three
//! replicas, in a workflow with no node timeout (the 300 s default): a replica frozen
//! (SIGSTOP) well past the ack wait and woken with its work in hand, a replica's connection
//! reset, swallowed (a black hole) and slowed, a replica cut off from its server, the
//! JetStream leaders of the workflow's stream and of the runs and wakes buckets stepped down,
//! the agents' process killed mid-call and started again. Faults are timed by progress
//! (every few runs ended) and last a fixed time; no assertion is on time.
//!
//! Checked from outside afterwards: every run ends once with the output its definition
//! gives and each caller gets one final reply (`check_replies`); every record is terminal,
//! its history without gap or duplicate, its outbox bounded (`check_records`); no agent
//! call for a run later than its end (beyond an allowance for calls in flight); each
//! replica's memory bounded.

use std::time::Duration;

use test_harness::proxy::{Fault, Proxy};
use workflow_node::shell::run::names;

use crate::support;
use crate::support::crash::invariants::{check_no_call_after_end, rss_kb, spy_calls};
use crate::support::crash::load::{drive, Plan};
use crate::support::crash::replicas::{write_file, Logs, Replica, Spawner};
use crate::support::crash::{
    assert_clean, check_records, check_replies, report, stubs, NAME, RUN_DEADLINE, WORKFLOW,
};

/// Runs in the test.
const RUNS: usize = 90;
/// A fault every this many runs ended.
const EVERY: usize = 9;
/// How long a fault holds (a frozen replica: three ack waits).
const HOLD: Duration = Duration::from_secs(3);
/// The most memory a replica may hold at the end.
const MAX_RSS_KB: u64 = 1 << 20;

/// The faults, in the order they are applied.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Pause,
    Cut,
    BlackHole,
    Delay,
    Partition,
    StepDownStream,
    StepDownBuckets,
    AgentsDie,
}

const KINDS: [Kind; 8] = [
    Kind::Pause,
    Kind::Cut,
    Kind::StepDownStream,
    Kind::BlackHole,
    Kind::AgentsDie,
    Kind::Delay,
    Kind::StepDownBuckets,
    Kind::Partition,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_end_right_under_every_fault_kind_once() {
    let _machine = support::process::alone().await;
    let cluster = tokio::task::spawn_blocking(test_harness::cluster)
        .await
        .expect("cluster");
    let urls = cluster.urls();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(urls[0].as_str())
        .await
        .expect("connect");
    let agents_proxy = Proxy::for_url(&urls[1]).await.expect("proxy");
    let agents_client = async_nats::connect(agents_proxy.url())
        .await
        .expect("agents connect");
    let doomed_agents = stubs(&agents_client, dir.path()).await;
    let calls = spy_calls(&client).await;

    let logs = Logs::default();
    // No node timeout: only the liveness check recovers a lost call.
    let workflow = WORKFLOW.replace("default_node_timeout_seconds: 8\n", "");
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "faults.yaml", &workflow),
        ack_wait: 1.0,
        stream_replicas: 3,
        logs: logs.clone(),
    };
    let mut proxies = Vec::new();
    let mut replicas: Vec<Replica> = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let proxy = Proxy::for_url(url).await.expect("proxy");
        replicas.push(spawner.spawn_with(i, &proxy.url(), &["--call-check", "2"]));
        proxies.push(proxy);
    }
    for r in &mut replicas {
        r.wait_ready(Duration::from_secs(30)).await;
    }

    let (completed, mut progress) = tokio::sync::watch::channel(0);
    let injector = tokio::spawn(async move {
        let mut doomed = Some((doomed_agents, agents_client));
        let mut fresh = None;
        let mut applied = Vec::new();
        for (n, kind) in KINDS.iter().enumerate() {
            if progress.wait_for(|d| *d >= (n + 1) * EVERY).await.is_err() {
                break;
            }
            let victim = n % replicas.len();
            match kind {
                Kind::Pause => {
                    replicas[victim].pause();
                    tokio::time::sleep(HOLD).await;
                    replicas[victim].resume();
                }
                Kind::Cut => proxies[victim].cut(),
                Kind::BlackHole => {
                    proxies[victim].set(Fault::BlackHole);
                    tokio::time::sleep(HOLD).await;
                    proxies[victim].set(Fault::Pass);
                    proxies[victim].cut();
                }
                Kind::Delay => {
                    proxies[victim].set(Fault::Delay(Duration::from_millis(40)));
                    tokio::time::sleep(HOLD).await;
                    proxies[victim].set(Fault::Pass);
                }
                Kind::Partition => {
                    proxies[victim].set(Fault::Refuse);
                    tokio::time::sleep(HOLD).await;
                    proxies[victim].set(Fault::Pass);
                }
                Kind::StepDownStream => {
                    let stream = names::event_stream("mesh", NAME);
                    let answer = test_harness::step_down(&client_for(&urls[2]).await, &stream)
                        .await
                        .expect("step down");
                    eprintln!("step down {stream}: {answer}");
                }
                Kind::StepDownBuckets => {
                    let c = client_for(&urls[2]).await;
                    for bucket in [names::runs_bucket("mesh"), names::wakes_bucket("mesh")] {
                        let stream = format!("KV_{bucket}");
                        let answer = test_harness::step_down(&c, &stream)
                            .await
                            .expect("step down");
                        eprintln!("step down {stream}: {answer}");
                    }
                }
                Kind::AgentsDie => {
                    agents_proxy.set(Fault::Refuse);
                    drop(doomed.take());
                    let c = client_for(&urls[0]).await;
                    let dir = tempfile::tempdir().expect("tempdir");
                    fresh = Some((stubs(&c, dir.path()).await, c, dir));
                }
            }
            eprintln!(
                "fault {kind:?} on replica {victim} after {} runs",
                *progress.borrow()
            );
            applied.push(*kind);
        }
        (applied, replicas, fresh)
    });

    let plan = Plan {
        ns: "mesh".into(),
        workflow: NAME.into(),
        first: 0,
        runs: RUNS,
        concurrency: 24,
        input: support::crash::input,
        deadline: RUN_DEADLINE,
        quiet: Duration::from_secs(3),
        resend_after: Duration::from_secs(3),
    };
    let outcome = drive(&client, &plan, completed).await;
    let (applied, mut replicas, _fresh) = injector.await.expect("injector");
    report("every fault kind once, 3 servers, 3 replicas", &outcome, 0);
    eprintln!("faults applied: {applied:?}");

    let mut problems = check_replies(&outcome, RUNS);
    problems.extend(check_records(&client, RUNS).await);
    problems.extend(check_no_call_after_end(&client, &calls, HOLD).await);
    if applied.len() != KINDS.len() {
        problems.push(format!("only {applied:?} of {KINDS:?} were applied"));
    }
    for r in &replicas {
        match rss_kb(r.pid()) {
            Some(kb) if kb > MAX_RSS_KB => {
                problems.push(format!("replica {} holds {kb} KiB", r.id))
            }
            Some(kb) => eprintln!("replica {}: {kb} KiB resident", r.id),
            None => problems.push(format!("replica {} is gone", r.id)),
        }
    }
    for r in &mut replicas {
        r.kill();
    }
    drop(cluster);
    assert_clean(&problems, &logs);
}

/// A connection of its own to `url`.
async fn client_for(url: &str) -> async_nats::Client {
    async_nats::connect(url).await.expect("connect")
}
