//! Runs whose agents return large outputs over a real nats-server: the run's KV entry
//! keeps control state only (large outputs live beside it, the outbox copies no payload),
//! so none of these runs outgrows a message, and each ends with the right output.

use std::time::Duration;

use agent_sdk::workflow::{invoke, RunResult};
use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

/// How long a run may take before it counts as hung: 50 MB through a debug build on a
/// loaded 2-core machine has taken 120 s, so the bound is generous; it catches a hang, it
/// does not time anything.
const TIMEOUT: Duration = Duration::from_secs(400);

/// `Blob`: `{kb, i}` → `{i, blob}` with a blob of `kb` kilobytes.
fn blob_agent() -> AgentBuilder {
    AgentBuilder::new("Blob")
        .description("returns a blob of the size asked")
        .handler(handler_fn(|req: NodeRequest| async move {
            let kb = req.input["kb"].as_u64().unwrap_or(1) as usize;
            Ok(json!({"i": req.input["i"].clone(), "blob": "b".repeat(kb * 1024)}))
        }))
}

struct Mesh {
    _server: test_harness::NatsServer,
    client: async_nats::Client,
    _node: WorkflowNode,
    _agent: agent_sdk::AgentHandle,
}

async fn mesh(yaml: &str) -> Mesh {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let agent = blob_agent().serve(client.clone()).await.expect("agent");
    let wf = parse_str(yaml, "test.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    let node = WorkflowNode::start(client.clone(), vec![wf], Config::default())
        .await
        .expect("node");
    Mesh {
        _server: server,
        client,
        _node: node,
        _agent: agent,
    }
}

async fn run(m: &Mesh, workflow: &str, input: Value) -> RunResult {
    let r = invoke(&m.client, "mesh", workflow, &input, TIMEOUT, |_| {})
        .await
        .expect("a result");
    assert_eq!(r.status, "success", "{:?}", r.error);
    r
}

fn blob_len(v: &Value) -> usize {
    v.as_str().map_or(0, str::len)
}

#[tokio::test]
async fn an_agent_returning_900_kb_succeeds() {
    let m = mesh(
        r#"
name: Big
workflow:
  description: one agent with a large output
  nodes:
    - {id: big, type: agent, agent_name: Blob, input: {kb: 900, i: 1}}
    - {id: after, type: agent, agent_name: Blob, depends_on: [big], input: {kb: 1, i: "{{big.output.i}}"}}
  output_mapping: {blob: "{{big.output.blob}}", i: "{{after.output.i}}"}
"#,
    )
    .await;
    let r = run(&m, "Big", json!({})).await;
    let out = r.output.expect("output");
    assert_eq!(blob_len(&out["blob"]), 900 * 1024);
    assert_eq!(out["i"], json!(1));
}

#[tokio::test]
async fn a_chain_of_20_nodes_each_returning_400_kb_succeeds() {
    let mut yaml = String::from(
        "name: Chain20\nworkflow:\n  description: twenty large outputs in a row\n  nodes:\n    - {id: n0, type: agent, agent_name: Blob, input: {kb: 400, i: 0}}\n",
    );
    for k in 1..20 {
        yaml.push_str(&format!(
            "    - {{id: n{k}, type: agent, agent_name: Blob, depends_on: [n{}], input: {{kb: 400, i: \"{{{{n{}.output.i}}}}\"}}}}\n",
            k - 1,
            k - 1
        ));
    }
    yaml.push_str("  output_mapping: {i: \"{{n19.output.i}}\", first: \"{{n0.output.blob}}\"}\n");
    let m = mesh(&yaml).await;
    let r = run(&m, "Chain20", json!({})).await;
    let out = r.output.expect("output");
    assert_eq!(out["i"], json!(0), "each node passed the first i on");
    assert_eq!(blob_len(&out["first"]), 400 * 1024);
}

#[tokio::test]
async fn a_map_of_1000_items_each_returning_50_kb_succeeds() {
    let m = mesh(
        r#"
name: BigMap
workflow:
  description: a thousand large results
  nodes:
    - {id: each, type: map, items: "{{workflow.input.items}}", node: one, concurrency_limit: 100, max_items: 1000}
    - {id: one, type: agent, agent_name: Blob, input: {kb: 50, i: "{{_map_item}}"}}
  output_mapping: {results: "{{each.output.results}}"}
"#,
    )
    .await;
    let items: Vec<u32> = (0..1000).collect();
    let r = run(&m, "BigMap", json!({"items": items})).await;
    let out = r
        .output
        .unwrap_or_else(|| panic!("no output: {:?} {:?}", r.error, r.nodes.get("each")));
    let results = out["results"].as_array().unwrap_or_else(|| {
        let text = out.to_string();
        panic!("not an array of results: {}", &text[..text.len().min(300)])
    });
    assert_eq!(results.len(), 1000);
    for (k, result) in results.iter().enumerate() {
        assert_eq!(result["i"], json!(k), "item {k}");
        assert_eq!(blob_len(&result["blob"]), 50 * 1024, "item {k}");
    }
}
