//! Retention over a real nats-server: everything an ended run leaves behind (its record,
//! the keys beside it, its final-reply marker, its output artifact) expires after the
//! retention, while a run still going keeps all of its own.

use std::time::Duration;

use agent_sdk::workflow::invoke;
use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use futures::StreamExt;
use messages::a2a::{Message, Role};
use messages::jsonrpc::Request;
use messages::payload::wrap;
use messages::subjects;
use serde_json::json;
use workflow_node::definition::parse_str;
use workflow_node::shell::{run::names, Config, WorkflowNode};

const WAIT: Duration = Duration::from_secs(60);

const QUICK: &str = r#"
name: Quick
workflow:
  description: one agent with an output too large to keep inline or send inline
  nodes:
    - {id: big, type: agent, agent_name: Blob, input: {kb: 300}}
  output_mapping: {blob: "{{big.output.blob}}"}
"#;

const GATE: &str = r#"
name: Gate
workflow:
  description: a large output, then an approval nobody gives
  nodes:
    - {id: big, type: agent, agent_name: Blob, input: {kb: 20}}
    - {id: gate, type: approval, depends_on: [big], approvers: [alice]}
  output_mapping: {by: "{{gate.output.by}}"}
"#;

/// Keys of the runs bucket that belong to run `prefix` (`{workflow}.{execution}`).
async fn keys_of(runs: &async_nats::jetstream::kv::Store, prefix: &str) -> Vec<String> {
    let mut keys = runs.keys().await.expect("keys");
    let mut found = Vec::new();
    while let Some(Ok(key)) = keys.next().await {
        if key == prefix || key.starts_with(&format!("{prefix}.")) {
            found.push(key);
        }
    }
    found
}

#[tokio::test]
async fn an_ended_runs_keys_expire_and_a_running_runs_stay() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let _agent = AgentBuilder::new("Blob")
        .handler(handler_fn(|req: NodeRequest| async move {
            let kb = req.input["kb"].as_u64().unwrap_or(1) as usize;
            Ok(json!({"blob": "b".repeat(kb * 1024)}))
        }))
        .serve(client.clone())
        .await
        .expect("agent");
    let workflows = [QUICK, GATE]
        .iter()
        .map(|y| parse_str(y, "test.yaml").expect("valid"))
        .collect();
    // The gate's approver alice must be bound to a key; nobody decides in this test.
    let alice = agent_sdk::Signer::generate().public_key().to_string();
    let config = Config {
        retention: Duration::from_secs(2),
        approvers: [("alice".to_string(), alice)].into(),
        ..Config::default()
    };
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .expect("node");
    let js = async_nats::jetstream::new(client.clone());
    let runs = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("runs bucket");

    // A run that stays: it waits for an approval, with a large output kept apart.
    let gate = names::execution_id("Gate", "stays");
    let message = Message::new("stays", Role::User, vec![wrap(json!({}))]);
    let body = serde_json::to_vec(&Request::message_send("stays", message)).expect("encode");
    let inbox = client.new_inbox();
    client
        .publish_with_reply(subjects::agent_request("mesh", "Gate"), inbox, body.into())
        .await
        .expect("publish");
    let gate_prefix = names::run_key("Gate", &gate);
    let deadline = tokio::time::Instant::now() + WAIT;
    while keys_of(&runs, &gate_prefix).await.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gate never waited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A run that ends, leaving a record, a large output beside it, a final marker and an
    // output artifact.
    let r = invoke(&client, "mesh", "Quick", &json!({}), WAIT, |_| {})
        .await
        .expect("a result");
    assert_eq!(r.status, "success", "{:?}", r.error);
    let quick = r.execution_id.expect("an execution id");
    let quick_prefix = format!("Quick.{quick}");
    let left = keys_of(&runs, &quick_prefix).await;
    assert!(left.len() >= 3, "record, output and marker: {left:?}");
    let artifacts = js
        .get_object_store(subjects::artifact_bucket("mesh"))
        .await
        .expect("artifacts");
    // Its name is the run's id, a secret tag and the suffix (nobody derives it from the id).
    let mut names = artifacts.list().await.expect("listing the bucket");
    let mut artifact = None;
    while let Some(info) = names.next().await {
        let name = info.expect("an object's info").name;
        if name.starts_with(&format!("{quick}.")) && name.ends_with(".output.json") {
            artifact = Some(name);
        }
    }
    let artifact = artifact.expect("the output artifact");

    // After the retention they are gone: a bounded poll.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = keys_of(&runs, &quick_prefix).await;
        let artifact_left = artifacts.info(&artifact).await.is_ok();
        if left.is_empty() && !artifact_left {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still there after the retention: {left:?}, artifact: {artifact_left}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The run still going keeps its record and its output.
    let kept = keys_of(&runs, &gate_prefix).await;
    assert!(kept.contains(&gate_prefix), "{kept:?}");
    assert!(kept.iter().any(|k| k.contains(".out.")), "{kept:?}");
}
