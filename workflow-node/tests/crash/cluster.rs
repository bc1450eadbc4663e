//! Crash test on a 3-node JetStream cluster: streams and buckets replicated three times
//! (`--replicas 3`), three `workflow-node serve` replicas (one connected to every node by a
//! comma-separated URL list, the others each to one node), a killer that `kill -9`s a
//! random replica every 300–700 ms, and one NATS server stopped once a third of the runs
//! have completed and started again a quarter of the runs later. Every run must complete
//! with the expected output, with exactly one final reply, and leave a terminal record.

use std::time::Duration;

use crate::support;
use crate::support::crash::load::{drive, Plan};
use crate::support::crash::replicas::{write_file, Fleet, Logs, Spawner};
use crate::support::crash::{
    assert_clean, check_records, check_replies, report, stubs, NAME, RUN_DEADLINE, WORKFLOW,
};

/// Runs in the test (bounded).
const RUNS: usize = 200;
/// The node stopped and started again; the test's own client (callers, approver, stub
/// agents) is on node 0, so only replicas see the outage.
const STOPPED: usize = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_once_while_a_server_restarts_and_replicas_are_killed() {
    let _machine = support::process::alone().await;
    let cluster = tokio::task::spawn_blocking(test_harness::cluster)
        .await
        .expect("cluster");
    let urls = cluster.urls();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(urls[0].as_str())
        .await
        .expect("connect");
    let _stubs = stubs(&client, dir.path()).await;
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "crash.yaml", WORKFLOW),
        ack_wait: 1.0,
        stream_replicas: 3,
        logs: logs.clone(),
    };
    let replica_urls = vec![urls.join(","), urls[1].clone(), urls[2].clone()];
    let fleet = Fleet::start(spawner, replica_urls, 3).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let killer = tokio::spawn(fleet.clone().run_killer(
        (Duration::from_millis(300), Duration::from_millis(700)),
        stop_rx,
    ));

    // The outage, timed by progress: stop a node after a third of the runs, start it
    // again after another quarter.
    let (completed, mut progress) = tokio::sync::watch::channel(0);
    let outage = tokio::spawn(async move {
        let mut cluster = cluster;
        if progress.wait_for(|n| *n >= RUNS / 3).await.is_err() {
            return cluster;
        }
        cluster = tokio::task::spawn_blocking(move || {
            cluster.stop_node(STOPPED).expect("stopping a node");
            cluster
        })
        .await
        .expect("stop task");
        eprintln!("node {STOPPED} stopped after {} runs", *progress.borrow());
        let _ = progress.wait_for(|n| *n >= RUNS / 3 + RUNS / 4).await;
        cluster = tokio::task::spawn_blocking(move || {
            cluster
                .start_node(STOPPED)
                .expect("starting the node again");
            cluster
        })
        .await
        .expect("start task");
        eprintln!(
            "node {STOPPED} started again after {} runs",
            *progress.borrow()
        );
        cluster
    });

    let plan = Plan {
        ns: "mesh".into(),
        workflow: NAME.into(),
        first: 0,
        runs: RUNS,
        concurrency: 40,
        input: support::crash::input,
        deadline: RUN_DEADLINE,
        quiet: Duration::from_secs(3),
        resend_after: Duration::from_secs(3),
    };
    let outcome = drive(&client, &plan, completed).await;
    let _ = stop_tx.send(true);
    let _ = killer.await;
    let _cluster = outage.await.expect("outage task");
    report(
        "cluster of 3, one server stopped and started, kill -9 every 300-700 ms",
        &outcome,
        fleet.kill_count(),
    );

    let mut problems = check_replies(&outcome, RUNS);
    problems.extend(check_records(&client, RUNS).await);
    fleet.kill_all();
    assert_clean(&problems, &logs);
}
