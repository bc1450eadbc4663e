//! Large payloads through the object store, workflow input as an artifact, and trace
//! context reaching agents — over a real nats-server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sdk::workflow::invoke;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::payload::wrap;
use messages::{headers, subjects};
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

const ECHO_WF: &str = r#"
name: Big
workflow:
  description: echoes its input through an agent
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {blob: "{{workflow.input.blob}}"}}
  output_mapping: {blob: "{{echo.output.blob}}", size: "{{echo.output.size}}"}
"#;

type Seen = Arc<Mutex<Vec<(Value, Option<String>)>>>;

async fn setup(
    inline_limit: usize,
) -> (
    test_harness::NatsServer,
    async_nats::Client,
    WorkflowNode,
    agent_sdk::AgentHandle,
    Seen,
) {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let agent = agent_sdk::AgentBuilder::new("Echo")
        .handler(agent_sdk::handler_fn(move |req: agent_sdk::NodeRequest| {
            let log = log.clone();
            async move {
                let trace = req
                    .headers
                    .get(headers::TRACEPARENT)
                    .map(|v| v.as_str().to_string());
                log.lock().unwrap().push((req.input.clone(), trace));
                let size = req.input["blob"].as_str().map_or(0, str::len);
                Ok(json!({"blob": req.input["blob"], "size": size}))
            }
        }))
        .serve(client.clone())
        .await
        .unwrap();
    let workflow = parse_str(ECHO_WF, "big.yaml").unwrap();
    let config = Config {
        inline_limit,
        ..Config::default()
    };
    let node = WorkflowNode::start(client.clone(), vec![workflow], config)
        .await
        .unwrap();
    (server, client, node, agent, seen)
}

#[tokio::test]
async fn large_inputs_and_outputs_travel_through_the_object_store() {
    let (_server, client, _node, _agent, seen) = setup(1024).await;
    let blob = "x".repeat(10_000);
    let r = invoke(
        &client,
        "mesh",
        "Big",
        &json!({"blob": blob}),
        Duration::from_secs(30),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(
        r.output,
        Some(json!({"blob": blob, "size": 10_000})),
        "the output came back through an artifact"
    );
    let first = seen.lock().unwrap()[0].0.clone();
    assert_eq!(
        first["blob"].as_str().map(str::len),
        Some(10_000),
        "the agent read the input artifact"
    );
    // The artifacts are really there.
    let js = async_nats::jetstream::new(client.clone());
    let store = js
        .get_object_store(subjects::artifact_bucket("mesh"))
        .await
        .unwrap();
    let mut names = Vec::new();
    let mut list = store.list().await.unwrap();
    use futures::StreamExt;
    while let Some(Ok(info)) = list.next().await {
        names.push(info.name);
    }
    assert!(
        names.iter().any(|n| n.ends_with(".input.json")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.ends_with(".output.json")),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_workflow_input_can_be_an_object_store_artifact_and_trace_context_reaches_agents() {
    let (_server, client, _node, _agent, seen) = setup(256 * 1024).await;
    let artifacts = agent_sdk::ArtifactStore::new(client.clone(), "mesh");
    artifacts
        .put_json("my-input.json", &json!({"blob": "from the store"}))
        .await
        .unwrap();
    let part =
        messages::payload::artifact_part(&subjects::artifact_bucket("mesh"), "my-input.json");
    let message = Message::new("with-artifact", Role::User, vec![part]);
    let request = Request::message_send("req-1", message);
    let mut h = async_nats::HeaderMap::new();
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    h.insert(headers::TRACEPARENT, traceparent);
    let reply = client
        .request_with_headers(
            subjects::agent_request("mesh", "Big"),
            h,
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, json!({"blob": "from the store"}));
    assert_eq!(seen[0].1.as_deref(), Some(traceparent));
}

#[tokio::test]
async fn a_missing_input_artifact_is_refused_with_its_name() {
    let (_server, client, _node, _agent, _seen) = setup(256 * 1024).await;
    let part = Part::file_uri("nats-object://nowhere/missing.json", None, None);
    let request = Request::message_send("req-2", Message::new("m2", Role::User, vec![part]));
    let reply = client
        .request(
            subjects::agent_request("mesh", "Big"),
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["result"]["status"]["state"], "failed", "{v}");
    assert!(v.to_string().contains("missing.json"), "{v}");
}

/// A `traceparent` that is not W3C's grammar (here with a newline and a forged tail) is
/// dropped at the door: the agent gets a trace context the node made, never the caller's
/// text as it came.
#[tokio::test]
async fn a_traceparent_that_is_not_w3c_grammar_is_not_forwarded() {
    let (_server, client, _node, _agent, seen) = setup(256 * 1024).await;
    let bad = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-FORGED";
    let message = Message::new("bad-trace", Role::User, vec![wrap(json!({"blob": "x"}))]);
    let request = Request::message_send("req-3", message);
    let mut h = async_nats::HeaderMap::new();
    h.insert(headers::TRACEPARENT, bad);
    let reply = client
        .request_with_headers(
            subjects::agent_request("mesh", "Big"),
            h,
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    let seen = seen.lock().unwrap();
    let forwarded = seen[0].1.as_deref();
    assert_ne!(
        forwarded,
        Some(bad),
        "the malformed traceparent was forwarded"
    );
    assert!(
        forwarded.is_none_or(|tp| messages::inbound::traceparent(tp).is_some()),
        "{forwarded:?}"
    );
}
