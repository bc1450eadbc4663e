//! Large maps over a real nats-server: items and results kept beside the run's KV entry,
//! and a large input kept apart, with two node instances sharing the event consumer (so
//! runs move between them and each reloads the other's writes).

use std::time::Duration;

use agent_sdk::workflow::invoke;
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::shell::{run::names, Config, RunRecord, WorkflowNode};

const MAP: &str = r#"
name: BigMap
default_max_map_items: 5000
workflow:
  description: a map large enough to be kept apart
  nodes:
    - {id: each, type: map, items: "{{workflow.input.items}}", node: one, concurrency_limit: 7}
    - {id: one, type: agent, agent_name: Echo, input: {value: "{{_map_item}}"}}
  output_mapping: {results: "{{each.output.results}}", pad: "{{workflow.input.pad}}"}
"#;

#[tokio::test]
async fn large_maps_and_inputs_are_kept_apart_and_reassembled_across_replicas() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let echo = agent_sdk::AgentBuilder::new("Echo")
        .handler(agent_sdk::handler_fn(
            |req: agent_sdk::NodeRequest| async move { Ok(req.input) },
        ))
        .serve(client.clone())
        .await
        .expect("agent");
    let wf = || parse_str(MAP, "map.yaml").expect("valid");
    let config = Config {
        workers: 2,
        ..Config::default()
    };
    let a = WorkflowNode::start(
        async_nats::connect(server.url()).await.expect("connect"),
        vec![wf()],
        config.clone(),
    )
    .await
    .expect("node a");
    let b = WorkflowNode::start(
        async_nats::connect(server.url()).await.expect("connect"),
        vec![wf()],
        config,
    )
    .await
    .expect("node b");
    // Both nodes take requests once a cancel for an unknown run gets an answer.
    let probe = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": "none"}}),
    )
    .expect("json");
    let subject = messages::subjects::agent_request("mesh", "BigMap");
    let mut ready = false;
    for _ in 0..100 {
        if client
            .request(subject.clone(), probe.clone().into())
            .await
            .is_ok()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "the nodes never took requests");
    let n = 600;
    let pad = "x".repeat(40_000);
    let input = json!({"items": (0..n).collect::<Vec<_>>(), "pad": pad});
    let r = invoke(
        &client,
        "mesh",
        "BigMap",
        &input,
        Duration::from_secs(60),
        |_| {},
    )
    .await
    .expect("a result");
    assert_eq!(r.status, "success", "{:?}", r.error);
    let output = r.output.expect("output");
    let expected: Vec<Value> = (0..n).map(|i| json!({"value": i})).collect();
    assert_eq!(output["results"], Value::Array(expected));
    assert_eq!(output["pad"], json!(pad));

    // The run's entry holds neither the items, nor the results, nor the input.
    let js = async_nats::jetstream::new(client.clone());
    let runs = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("bucket");
    let execution = workflow_node::core::ExecutionId(r.execution_id.expect("execution id"));
    let entry = runs
        .get(names::run_key("BigMap", &execution))
        .await
        .expect("get")
        .expect("entry");
    let record = RunRecord::from_entry(&entry).expect("record");
    assert!(record.input_apart);
    assert_eq!(record.state.input, Value::Null);
    assert!(record.maps.is_empty(), "the map ended");
    a.shutdown().await;
    b.shutdown().await;
    echo.stop().await;
}
