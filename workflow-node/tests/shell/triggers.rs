//! Event triggers on a real nats-server: events published to an existing stream before
//! any replica runs start their runs once the node comes up; a re-published event (same
//! de-duplication key) starts no second run; the condition filters; an event whose input
//! the schema refuses is parked as a dead letter, with its subject and reason, not
//! retried.

use std::time::Duration;

use async_nats::jetstream::stream;
use futures::StreamExt;
use workflow_node::shell::{run::names, Config, RunRecord, WorkflowNode};

use crate::support::fixtures::echo;
use crate::support::mesh::workflows;

const STUBS: &str = concat!("agents:", echo!(),);

const ORDERS: &str = r#"
name: Orders
workflow:
  description: a run per large order
  input_schema: {type: object, required: [order], properties: {order: {type: string}}}
  triggers:
    - name: large
      stream: ORDERS
      subject: orders.created
      condition: "{{event.payload.amount}} > 100"
      input: {order: "{{event.payload.id}}", user: "{{event.headers.X-User}}"}
      dedup_key: "{{event.payload.id}}"
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {order: "{{workflow.input.order}}", user: "{{workflow.input.user}}"}}
  output_mapping: {order: "{{echo.output.order}}", user: "{{echo.output.user}}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_start_one_run_each_and_poison_is_parked() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
        ..Default::default()
    })
    .await
    .expect("the orders stream");
    // Published while no replica runs.
    let publish = |id: Option<&str>, amount: u32| {
        let js = js.clone();
        let body = match id {
            Some(id) => format!(r#"{{"id": "{id}", "amount": {amount}}}"#),
            None => format!(r#"{{"id": 7, "amount": {amount}}}"#),
        };
        async move {
            let mut h = async_nats::HeaderMap::new();
            h.insert("X-User", "ann");
            js.publish_with_headers("orders.created", h, body.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    };
    publish(Some("o-1"), 150).await;
    publish(Some("o-1"), 150).await; // the same order, published again
    publish(Some("o-2"), 50).await; // too small
    publish(None, 500).await; // a number for an id: the schema refuses its input
    publish(Some("o-3"), 101).await;
    let dir = tempfile::tempdir().unwrap();
    let stub_path = dir.path().join("stubs.yaml");
    std::fs::write(&stub_path, STUBS).unwrap();
    let file = agent_sdk::stub::load_stub_file(&stub_path).unwrap();
    let _stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", file)
        .await
        .unwrap();
    let node = WorkflowNode::start(client.clone(), workflows(&[ORDERS]), Config::default())
        .await
        .expect("node");
    // The poison event is parked with its subject and reason.
    let dead = js
        .get_stream(names::dead_letter_stream("mesh"))
        .await
        .expect("the dead-letter stream");
    let mut dead_sub = client.subscribe("mesh.dead.wf.>").await.unwrap();
    let parked = match dead
        .get_last_raw_message_by_subject("mesh.dead.wf.Orders.large")
        .await
    {
        Ok(m) => (m.payload, m.headers),
        Err(_) => {
            let m = tokio::time::timeout(Duration::from_secs(30), dead_sub.next())
                .await
                .expect("a dead letter")
                .unwrap();
            (m.payload, m.headers.unwrap_or_default())
        }
    };
    assert_eq!(&parked.0[..], br#"{"id": 7, "amount": 500}"#);
    assert_eq!(
        parked.1.get("Mesh-Dead-Subject").map(|v| v.as_str()),
        Some("orders.created")
    );
    let reason = parked
        .1
        .get("Mesh-Dead-Reason")
        .expect("a reason")
        .to_string();
    assert!(reason.contains("input_schema"), "{reason}");
    // o-1 and o-3 run, each once, with input from payload and headers.
    let runs = js.get_key_value(names::runs_bucket("mesh")).await.unwrap();
    let mut watch = runs.watch_with_history("Orders.*").await.unwrap();
    let mut ended = std::collections::BTreeMap::new();
    let watching = async {
        while let Some(Ok(entry)) = watch.next().await {
            let Ok(record) = RunRecord::from_entry(&entry.value) else {
                continue;
            };
            if record.state.status.is_terminal() {
                ended.insert(entry.key.clone(), record);
            }
            if ended.len() >= 2 {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), watching)
        .await
        .expect("two runs end");
    // Every message has been taken: nothing pending, nothing in hand.
    let mut consumer = js
        .get_stream("ORDERS")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("wf_Orders_large")
        .await
        .unwrap();
    for _ in 0..300 {
        let info = consumer.info().await.unwrap();
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // a bounded poll of the server's count
    }
    let info = consumer.info().await.unwrap();
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0));
    // An operator sees the dead letter and replays it: the node takes it as the trigger
    // would, it still starts no run, so the refusal says why and the letter is kept.
    let letters = workflow_node::ops::triggers::list(&client, "mesh", Some("Orders"))
        .await
        .unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        (letters[0].trigger.as_str(), letters[0].subject.as_str()),
        ("large", "orders.created")
    );
    let first = letters[0].sequence;
    let refused = workflow_node::ops::triggers::replay(&client, "mesh", "Orders", first, None)
        .await
        .expect_err("it still starts no run");
    assert!(
        refused.message.contains("input_schema") && refused.message.contains("kept"),
        "{refused:?}"
    );
    let letters = workflow_node::ops::triggers::list(&client, "mesh", None)
        .await
        .unwrap();
    assert_eq!(letters.len(), 1, "the letter is kept: {letters:?}");
    assert_eq!(letters[0].sequence, first);
    let gone =
        workflow_node::ops::triggers::replay(&client, "mesh", "Orders", first + 100, None).await;
    assert!(gone
        .expect_err("no such letter")
        .message
        .contains("no dead letter"));
    node.shutdown().await;
    let keys: Vec<String> = runs
        .keys()
        .await
        .unwrap()
        .map(|k| k.unwrap())
        .collect()
        .await;
    let started: Vec<&String> = keys
        .iter()
        .filter(|k| k.starts_with("Orders.") && k.matches('.').count() == 1)
        .collect();
    assert_eq!(started.len(), 2, "one run per order: {started:?}");
    for id in ["o-1", "o-3"] {
        let execution = names::caller_execution_id("Orders", Some("trigger:large"), id);
        let record = &ended[&format!("Orders.{}", execution.0)];
        assert_eq!(record.state.status.as_str(), "success");
        assert_eq!(record.state.input["order"], id);
        assert_eq!(record.state.input["user"], "ann");
        assert_eq!(record.caller.name.as_deref(), Some("trigger:large"));
    }
}
