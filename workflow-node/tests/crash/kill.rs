//! Crash test with real processes: three `workflow-node serve` replicas on one nats-server,
//! a few hundred runs of a workflow with a map, a fork/join, retries, a loop with a delay
//! and an approval, and a killer that `kill -9`s a random replica every 300–700 ms and
//! starts a new one. Every run must complete with the expected output, with exactly one
//! final reply, and leave a terminal record in KV.

use std::time::Duration;

use crate::support;
use crate::support::crash::load::{drive, Plan};
use crate::support::crash::replicas::{write_file, Fleet, Logs, Spawner};
use crate::support::crash::{
    assert_clean, check_records, check_replies, report, stubs, NAME, RUN_DEADLINE, WORKFLOW,
};

/// Runs in the test (bounded); more finds more, but the machine has two cores.
const RUNS: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_once_while_replicas_are_killed() {
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let _stubs = stubs(&client, dir.path()).await;
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "crash.yaml", WORKFLOW),
        ack_wait: 1.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let fleet = Fleet::start(spawner, vec![server.url()], 3).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let killer = tokio::spawn(fleet.clone().run_killer(
        (Duration::from_millis(300), Duration::from_millis(700)),
        stop_rx,
    ));

    let plan = Plan {
        ns: "mesh".into(),
        workflow: NAME.into(),
        first: 0,
        runs: RUNS,
        concurrency: 60,
        input: support::crash::input,
        deadline: RUN_DEADLINE,
        quiet: Duration::from_secs(3),
        resend_after: Duration::from_secs(3),
    };
    let (completed, _) = tokio::sync::watch::channel(0);
    let outcome = drive(&client, &plan, completed).await;
    let _ = stop_tx.send(true);
    let _ = killer.await;
    report(
        "kill -9 every 300-700 ms, 3 replicas, 1 server",
        &outcome,
        fleet.kill_count(),
    );

    let mut problems = check_replies(&outcome, RUNS);
    problems.extend(check_records(&client, RUNS).await);
    fleet.kill_all();
    assert_clean(&problems, &logs);
}
