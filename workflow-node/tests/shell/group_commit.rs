//! Group commit, over a real nats-server: the results of a map that
//! arrive together are committed with fewer compare-and-swaps than there are results, and
//! the run's outcome and history are those of one event at a time.

use std::time::Duration;

use agent_sdk::workflow::invoke;
use futures::StreamExt;
use serde_json::json;
use workflow_node::core::ExecutionId;
use workflow_node::shell::Inspector;
use workflow_node::shell::{run::names, Config};

use crate::support;

const STUBS: &str = support::fixtures::ECHO_STUBS;

const MAP: &str = r#"
name: Wide
workflow:
  description: a map whose calls all go out at once
  nodes:
    - {id: each, type: map, items: "{{workflow.input.items}}", node: one, concurrency_limit: 100}
    - {id: one, type: agent, agent_name: Echo, input: {value: "{{_map_item}}"}}
  output_mapping: {results: "{{each.output.results}}"}
"#;

#[tokio::test]
async fn a_maps_results_are_committed_with_fewer_compare_and_swaps_than_results() {
    const ITEMS: usize = 100;
    let m = support::mesh::mesh(STUBS, &[MAP], support::mesh::trusting(Config::default())).await;
    let js = async_nats::jetstream::new(m.client.clone());
    let runs = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("the runs bucket");
    // Every revision of every run entry of the workflow (`Wide.{execution}`: keys beside
    // an entry have more tokens).
    let mut watch = runs.watch("Wide.*").await.expect("watch");
    let items: Vec<usize> = (0..ITEMS).collect();
    let r = invoke(
        &m.client,
        "mesh",
        "Wide",
        &json!({ "items": items }),
        Duration::from_secs(60),
        |_| {},
    )
    .await
    .expect("a result");
    assert_eq!(r.status, "success", "{:?}", r.error);
    let results = r.output.expect("an output")["results"].clone();
    let expected: Vec<_> = (0..ITEMS).map(|i| json!({ "value": i })).collect();
    assert_eq!(results, json!(expected), "every result, in item order");
    let execution = r.execution_id.expect("an execution id");
    let key = names::run_key("Wide", &ExecutionId(execution.clone()));

    // The run's entry ends terminal; count its revisions up to that one.
    let mut commits = 0;
    loop {
        let entry = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .expect("the run's entry changes until it ends")
            .expect("the watch goes on")
            .expect("an entry");
        if entry.key != key {
            continue;
        }
        commits += 1;
        let record =
            workflow_node::shell::RunRecord::from_entry(&entry.value).expect("a run record");
        if record.state.status.is_terminal() {
            break;
        }
    }
    eprintln!("{commits} commits of the run's entry for {ITEMS} results");
    assert!(
        commits < ITEMS,
        "{commits} commits for {ITEMS} results: none was committed with another"
    );

    // The history still has one entry per event, numbered without gaps.
    let inspector = Inspector::open(m.client.clone(), "mesh").await.unwrap();
    let entries = inspector
        .history("Wide", &ExecutionId(execution.clone()))
        .await
        .expect("the history");
    let numbers: Vec<u64> = entries.iter().map(|e| e.n).collect();
    let want: Vec<u64> = (1..=numbers.len() as u64).collect();
    assert_eq!(numbers, want);
    let results = entries
        .iter()
        .filter(|e| e.event == "call_succeeded")
        .count();
    assert_eq!(results, ITEMS, "one history entry per result");
}
