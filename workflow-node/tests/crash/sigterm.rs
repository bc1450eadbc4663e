//! `SIGTERM` drains: three `workflow-node serve` replicas share runs; once some have
//! completed, one replica gets SIGTERM. It must exit with status 0 within a bound (it stops
//! taking events and finishes the ones in hand), and every run must still complete, once,
//! on the other two.

use std::time::Duration;

use crate::support;
use crate::support::crash::load::{drive, Plan};
use crate::support::crash::rig::Rig;
use crate::support::crash::{
    assert_clean, check_records, check_replies, report, NAME, RUN_DEADLINE, STUBS, WORKFLOW,
};

const RUNS: usize = 60;

/// A bound on the drain, far above what it takes (the figure is printed).
const DRAIN_BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_replica_drains_and_exits_zero_while_runs_complete_elsewhere() {
    let rig = Rig::start(STUBS, "crash.yaml", WORKFLOW).await;
    let mut replicas: Vec<_> = (0..3).map(|i| rig.spawner.spawn(i, &rig.url())).collect();
    for r in &mut replicas {
        r.wait_ready(Duration::from_secs(30)).await;
    }
    let victim = replicas.remove(0);

    // Terminate once a few runs have completed: the others are mid-way, spread over all
    // three replicas.
    let (completed, mut progress) = tokio::sync::watch::channel(0);
    let drain = tokio::spawn(async move {
        if progress.wait_for(|n| *n >= 5).await.is_err() {
            return None;
        }
        victim.terminate();
        victim.wait_exit(DRAIN_BOUND).await
    });
    let plan = Plan {
        ns: "mesh".into(),
        workflow: NAME.into(),
        first: 0,
        runs: RUNS,
        concurrency: 30,
        input: support::crash::input,
        deadline: RUN_DEADLINE,
        quiet: Duration::from_secs(2),
        resend_after: Duration::from_secs(3),
    };
    let outcome = drive(&rig.client, &plan, completed).await;
    report("SIGTERM to one of 3 replicas", &outcome, 0);
    let exit = drain.await.expect("drain task");

    let mut problems = check_replies(&outcome, RUNS);
    problems.extend(check_records(&rig.client, RUNS).await);
    match exit {
        Some((status, took)) => {
            eprintln!("the terminated replica exited with {status} after {took:?}");
            if !status.success() {
                problems.push(format!("the terminated replica exited with {status}"));
            }
        }
        None => problems.push(format!(
            "the terminated replica did not exit within {DRAIN_BOUND:?}"
        )),
    }
    drop(replicas);
    assert_clean(&problems, &rig.logs);
}
