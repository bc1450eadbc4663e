//! Three replicas of the workflow node on one real nats-server, all working on one run: the
//! run's outbox stays small, because an entry goes at the next commit once its event is
//! acked, whichever replica committed it.

use std::path::PathBuf;
use std::time::Duration;

use agent_sdk::workflow::invoke;
use futures::StreamExt;
use serde_json::json;
use workflow_node::definition::parse_str;
use workflow_node::shell::{run::names, Config, RunRecord, WorkflowNode};

use crate::support::fixtures::echo;

const STUBS: &str = concat!("agents:", echo!(),);

const MAP: &str = r#"
name: Wide
workflow:
  description: two thousand items through three replicas
  nodes:
    - {id: each, type: map, items: "{{workflow.input.items}}", node: one, concurrency_limit: 50, max_items: 2000}
    - {id: one, type: agent, agent_name: Echo, input: {i: "{{_map_item}}"}}
  output_mapping: {results: "{{each.output.results}}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_stays_small_with_three_replicas_on_one_run() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let dir = tempfile::tempdir().expect("tempdir");
    let stub_path: PathBuf = dir.path().join("stubs.yaml");
    std::fs::write(&stub_path, STUBS).expect("write stubs");
    let file = agent_sdk::stub::load_stub_file(&stub_path).expect("stub file");
    let _stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", file)
        .await
        .expect("stubs");
    let mut nodes = Vec::new();
    for _ in 0..3 {
        // Each replica on a connection of its own, as separate processes would be.
        let own = async_nats::connect(server.url()).await.expect("connect");
        let wf = parse_str(MAP, "map.yaml").expect("valid");
        nodes.push(
            WorkflowNode::start(own, vec![wf], Config::default())
                .await
                .expect("node"),
        );
    }
    // Watch every version of the run's entry (keys `Wide.{execution}`: one token).
    let js = async_nats::jetstream::new(client.clone());
    let runs = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("runs bucket");
    let mut watch = runs.watch("Wide.*").await.expect("watch");
    let largest = tokio::spawn(async move {
        let (mut entries, mut bytes) = (0, 0);
        while let Some(Ok(entry)) = watch.next().await {
            let Ok(record) = RunRecord::from_entry(&entry.value) else {
                continue;
            };
            entries = entries.max(record.outbox.len());
            bytes = bytes.max(entry.value.len());
            if record.state.status.is_terminal() {
                break;
            }
        }
        (entries, bytes)
    });
    let items: Vec<u32> = (0..2000).collect();
    let r = invoke(
        &client,
        "mesh",
        "Wide",
        &json!({"items": items}),
        Duration::from_secs(180),
        |_| {},
    )
    .await
    .expect("a result");
    assert_eq!(r.status, "success", "{:?}", r.error);
    let results = r.output.expect("output")["results"].clone();
    assert_eq!(results.as_array().map(Vec::len), Some(2000));
    assert_eq!(results[1999], json!({"i": 1999}));
    let (entries, bytes) = largest.await.expect("watcher");
    assert!(
        entries <= 8,
        "the outbox held {entries} entries at once (largest entry {bytes} bytes)"
    );
}
