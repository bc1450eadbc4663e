//! Crash test with real processes: three `workflow-node serve` replicas on one nats-server,
//! a few hundred runs of a workflow with a map, a fork/join, retries, a loop with a delay
//! and an approval, and a killer that `kill -9`s a random replica every 300–700 ms and
//! starts a new one. Every run must complete with the expected output, with exactly one
//! final reply, and leave a terminal record in KV.

use std::time::Duration;

use crate::support;
use crate::support::crash::load::{drive, Plan};
use crate::support::crash::rig::{Killer, Rig};
use crate::support::crash::{
    assert_clean, check_records, check_replies, report, NAME, RUN_DEADLINE, STUBS, WORKFLOW,
};

/// Runs in the test (bounded); more finds more, but the machine has two cores.
const RUNS: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_once_while_replicas_are_killed() {
    let rig = Rig::start(STUBS, "crash.yaml", WORKFLOW).await;
    let fleet = rig.fleet(3).await;
    let killer = Killer::start(&fleet);

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
    let outcome = drive(&rig.client, &plan, completed).await;
    killer.stop().await;
    report(
        "kill -9 every 300-700 ms, 3 replicas, 1 server",
        &outcome,
        fleet.kill_count(),
    );

    let mut problems = check_replies(&outcome, RUNS);
    problems.extend(check_records(&rig.client, RUNS).await);
    fleet.kill_all();
    assert_clean(&problems, &rig.logs);
}
