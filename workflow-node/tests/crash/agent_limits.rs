//! Flow control per agent through `kill -9`: three `workflow-node serve` replicas, one
//! killed every 300–700 ms and replaced, while runs fan out against an agent capped at 4.
//! Calls wait in the agent's gate while replicas die: none is lost (every run ends with
//! every item's output), and the agent, counting its own calls in flight, never has more
//! than 4 at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::workflow::invoke;
use serde_json::json;

use crate::support::crash::rig::{Killer, Rig};
use crate::support::crash::STUBS;

const WORKFLOW: &str = r#"
name: Gated
workflow:
  description: a wide map against an agent capped at 4
  agents: {Capped: {max_in_flight: 4}}
  nodes:
    - {id: each, type: map, items: "{{workflow.input.items}}", node: one, concurrency_limit: 40}
    - {id: one, type: agent, agent_name: Capped, timeout: 120s, input: {i: "{{_map_item}}", run: "{{workflow.input.run}}"}}
  output_mapping: {results: "{{each.output.results}}"}
"#;

const RUNS: usize = 4;
const ITEMS: u32 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_agent_keeps_its_cap_and_loses_no_call_while_replicas_are_killed() {
    let rig = Rig::start(STUBS, "gated.yaml", WORKFLOW).await;
    let client = rig.client.clone();
    let (now, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (now.clone(), max.clone());
    let _agent = agent_sdk::AgentBuilder::new("Capped")
        .max_in_flight(256)
        .handler(agent_sdk::handler_fn(move |req: agent_sdk::NodeRequest| {
            let (n, m) = (n.clone(), m.clone());
            async move {
                let in_flight = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(in_flight, Ordering::SeqCst);
                // The agent's work: long enough for calls to overlap and replicas to die
                // while calls wait.
                tokio::time::sleep(Duration::from_millis(150)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok(req.input)
            }
        }))
        .serve(client.clone())
        .await
        .expect("agent");
    let fleet = rig.fleet(3).await;
    let killer = Killer::start(&fleet);
    let runs: Vec<_> = (0..RUNS)
        .map(|run| {
            let client = client.clone();
            tokio::spawn(async move {
                let items: Vec<u32> = (0..ITEMS).collect();
                let input = json!({"items": items, "run": run});
                let r = invoke(
                    &client,
                    "mesh",
                    "Gated",
                    &input,
                    Duration::from_secs(240),
                    |_| {},
                )
                .await
                .expect("a final reply");
                (run, r)
            })
        })
        .collect();
    let mut problems = Vec::new();
    for handle in runs {
        let (run, r) = handle.await.expect("run task");
        let expected: Vec<serde_json::Value> =
            (0..ITEMS).map(|i| json!({"i": i, "run": run})).collect();
        let got = r
            .output
            .as_ref()
            .and_then(|o| o["results"].as_array().cloned());
        if got != Some(expected) {
            problems.push(format!("run {run}: {:?} {:?}", r.status, r.error));
        }
    }
    killer.stop().await;
    let kills = fleet.kill_count();
    fleet.kill_all();
    assert!(problems.is_empty(), "{problems:#?}\n{}", rig.logs.tail());
    assert!(kills >= 1, "no replica was killed: the test proved nothing");
    let max = max.load(Ordering::SeqCst);
    assert!(max <= 4, "the agent had {max} calls in flight at once");
    assert!(max >= 2, "the calls never overlapped ({max})");
}
