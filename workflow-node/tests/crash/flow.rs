//! Crash test of flow control with real processes: three `workflow-node serve` replicas of
//! a workflow with `concurrency_key: {max: 1}`, runs queued over three keys, and a killer
//! that `kill -9`s a random replica every 300–700 ms (between a commit and its `Admit` or
//! `Release`, between a gate's swap and its `Admitted`) and starts a new one. Every run must
//! end right, once (none lost, none started twice), and the agent must never see two runs
//! of one key in flight at once (no slot handed out twice, none leaked: a leak leaves runs
//! queued for ever, which the deadline below catches).

use std::time::Duration;

use agent_sdk::workflow::invoke;
use serde_json::json;

use crate::support::crash::rig::{Killer, Rig};
use crate::support::crash::STUBS;
use crate::support::flow::Recorder;

const KEYED: &str = r#"
name: Keyed
workflow:
  description: one run per customer at a time, through crashes
  concurrency_key: {key: "{{workflow.input.customer}}", max: 1}
  nodes:
    - {id: a, type: agent, agent_name: Rec, input: {customer: "{{workflow.input.customer}}", label: "{{workflow.input.label}}"}}
  output_mapping: {label: "{{a.output.label}}"}
"#;

/// Runs in the test, over three keys.
const RUNS: usize = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_runs_are_neither_lost_nor_doubled_and_no_key_overlaps_while_replicas_die() {
    let rig = Rig::start(STUBS, "keyed.yaml", KEYED).await;
    let client = rig.client.clone();
    let rec = Recorder::new();
    let _agent = rec.serve(client.clone()).await;
    let fleet = rig.fleet(3).await;
    let killer = Killer::start(&fleet);
    let runs = (0..RUNS).map(|i| {
        let input = json!({"customer": format!("c{}", i % 3), "label": format!("r{i}")});
        let client = client.clone();
        async move {
            let r = invoke(
                &client,
                "mesh",
                "Keyed",
                &input,
                Duration::from_secs(300),
                |_| {},
            )
            .await;
            (i, r)
        }
    });
    let results = futures::future::join_all(runs).await;
    killer.stop().await;
    eprintln!("flow crash test: {} kills", fleet.kill_count());
    let mut problems = Vec::new();
    for (i, r) in results {
        match r {
            Ok(r)
                if r.status == "success" && r.output == Some(json!({"label": format!("r{i}")})) => {
            }
            Ok(r) => problems.push(format!(
                "run {i}: {} {:?} {:?}",
                r.status, r.output, r.error
            )),
            Err(e) => problems.push(format!("run {i}: {e}")),
        }
    }
    let seen = rec.seen.lock().unwrap();
    for key in ["c0", "c1", "c2"] {
        let max = seen.max_per_key.get(key).copied().unwrap_or(0);
        if max != 1 {
            problems.push(format!("{max} runs of key {key} were in flight at once"));
        }
    }
    // Each run reached the agent (a copy of a call sent again after a crash is allowed).
    for i in 0..RUNS {
        if !seen.order.contains(&format!("r{i}")) {
            problems.push(format!("run {i} never reached the agent"));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\nlogs:\n{}",
        problems.join("\n"),
        rig.logs.tail()
    );
}
