//! Network partitions under load, on a 3-node cluster whose routes run through proxies
//! (`test_harness::partition`), with three replicas (one per server) and the crash
//! workflow with no node timeout: each server in turn cut from the other two and healed
//! (the stream and bucket leaders move to the majority; the minority server's clients,
//! the replica, the agents or the caller behind it, are stranded), then a replica cut
//! from its server while the others go on. Faults are timed by progress (every few runs
//! ended); a cut holds until the majority has a leader for the workflow's stream and the
//! runs bucket outside the cut server, then a fixed time; no assertion is on time.
//!
//! What is promised without quorum is checked as written (`docs/architecture.md`, under
//! faults): nothing is stored on the minority side, requests there go unanswered (the
//! caller resends) and its runs wait; once healed, every run accepted ends once with the
//! output its definition gives, each caller has one final reply, every record is terminal
//! with its whole history and a bounded outbox, and no agent call goes out for a run after
//! its end.

use std::time::Duration;

use test_harness::partition::Partitionable;
use test_harness::proxy::{Fault, Proxy};
use workflow_node::shell::run::names;

use crate::support;
use crate::support::crash::invariants::{check_no_call_after_end, spy_calls};
use crate::support::crash::load::{drive, Plan};
use crate::support::crash::replicas::{write_file, Logs, Replica, Spawner};
use crate::support::crash::{
    assert_clean, check_records, check_replies, report, stubs, NAME, RUN_DEADLINE, WORKFLOW,
};

/// Runs in the test.
const RUNS: usize = 60;
/// A fault every this many runs ended.
const EVERY: usize = 10;
/// How long a cut holds once the majority has its leaders.
const HOLD: Duration = Duration::from_secs(3);

/// The faults, in order: a server cut from the others (by index), or a replica cut from
/// its server.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// This server cut from the other two, with the replica (and caller or agents) on it.
    Server(usize),
    /// This replica's connection to its server refused.
    Replica(usize),
}

/// Server 2 (a replica), server 1 (a replica and the agents), server 0 (a replica and the
/// caller), then a replica alone.
const CUTS: [Cut; 4] = [
    Cut::Server(2),
    Cut::Server(1),
    Cut::Server(0),
    Cut::Replica(0),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_in_flight_through_partitions_and_heals_all_end_right() {
    let _machine = support::process::alone().await;
    let cluster = Partitionable::start(3).await.expect("cluster");
    let urls = cluster.urls();
    let dir = tempfile::tempdir().expect("tempdir");
    // The caller lives on server 0, the agents on server 1: each is stranded in turn.
    let client = async_nats::connect(urls[0].as_str())
        .await
        .expect("connect");
    let agents_client = async_nats::connect(urls[1].as_str())
        .await
        .expect("agents connect");
    let _agents = stubs(&agents_client, dir.path()).await;
    let calls = spy_calls(&agents_client).await;

    let logs = Logs::default();
    let workflow = WORKFLOW.replace("default_node_timeout_seconds: 8\n", "");
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "partitions.yaml", &workflow),
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
        let mut applied = Vec::new();
        for (n, cut) in CUTS.iter().enumerate() {
            if progress.wait_for(|d| *d >= (n + 1) * EVERY).await.is_err() {
                break;
            }
            match *cut {
                Cut::Server(k) => {
                    cluster.isolate(k);
                    let others: Vec<usize> = (0..3).filter(|&i| i != k).collect();
                    cluster
                        .wait_leader_among(&others)
                        .await
                        .expect("the majority elects a meta leader");
                    let moved = leaders_leave(&urls[others[0]], k).await;
                    eprintln!("server {k} cut; leaders now {moved:?}");
                    tokio::time::sleep(HOLD).await;
                    cluster.heal();
                    cluster
                        .wait_leader_among(&[0, 1, 2])
                        .await
                        .expect("one meta leader again");
                }
                Cut::Replica(r) => {
                    proxies[r].set(Fault::Refuse);
                    tokio::time::sleep(HOLD).await;
                    proxies[r].set(Fault::Pass);
                }
            }
            eprintln!("{cut:?} healed after {} runs", *progress.borrow());
            applied.push(*cut);
        }
        (applied, replicas, cluster, proxies)
    });

    let plan = Plan {
        ns: "mesh".into(),
        workflow: NAME.into(),
        first: 0,
        runs: RUNS,
        concurrency: 12,
        input: support::crash::input,
        deadline: RUN_DEADLINE,
        quiet: Duration::from_secs(3),
        resend_after: Duration::from_secs(3),
    };
    let outcome = drive(&client, &plan, completed).await;
    let (applied, mut replicas, cluster, _proxies) = injector.await.expect("injector");
    report("partitions, 3 servers, 3 replicas", &outcome, 0);
    eprintln!("cuts applied: {applied:?}");

    let mut problems = check_replies(&outcome, RUNS);
    problems.extend(check_records(&client, RUNS).await);
    problems.extend(check_no_call_after_end(&client, &calls, HOLD).await);
    if applied.len() != CUTS.len() {
        problems.push(format!("only {applied:?} of {CUTS:?} were applied"));
    }
    for r in &mut replicas {
        r.kill();
    }
    drop(cluster);
    assert_clean(&problems, &logs);
}

/// Waits until the workflow's stream and the runs bucket are led by a server other than
/// `cut`, as seen from `url` (on the majority side); returns their leaders. Panics if they
/// never move: a cut that moves nothing tests nothing.
async fn leaders_leave(url: &str, cut: usize) -> Vec<String> {
    let client = async_nats::ConnectOptions::new()
        .request_timeout(Some(Duration::from_secs(1)))
        .connect(url)
        .await
        .expect("connect");
    let js = async_nats::jetstream::new(client);
    let streams = [
        names::event_stream("mesh", NAME),
        format!("KV_{}", names::runs_bucket("mesh")),
    ];
    let cut_name = format!("n{cut}");
    let mut last = Vec::new();
    for _ in 0..100 {
        last.clear();
        for stream in &streams {
            let leader = match js.get_stream(stream).await {
                Ok(mut s) => match s.info().await {
                    Ok(info) => info.cluster.as_ref().and_then(|c| c.leader.clone()),
                    Err(_) => None,
                },
                Err(_) => None,
            };
            last.push(leader.unwrap_or_default());
        }
        if last.iter().all(|l| !l.is_empty() && *l != cut_name) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the leaders of {streams:?} did not leave server {cut}: {last:?}");
}
