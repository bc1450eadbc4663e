//! Triggers under the shipped least-privilege config: an operator replays a dead letter
//! whose subject is outside `mesh.>` (a trigger on an existing stream of the
//! organisation's own), which no mesh user may publish on.

use async_nats::HeaderMap;
use serde_json::Value;

use crate::support::security::{cli, node_serving, Secure, WAIT};

const ORDERS: &str = r#"
name: Orders
workflow:
  description: a run per order
  input_schema: {type: object, required: [order], properties: {order: {type: string}}}
  triggers:
    - name: large
      stream: ORDERS
      subject: orders.created
      input: {order: "{{event.payload.id}}"}
      dedup_key: "{{event.payload.id}}"
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {order: "{{workflow.input.order}}"}}
  output_mapping: {order: "{{echo.output.order}}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_replays_a_dead_letter_from_outside_the_mesh_subjects() {
    let secure = Secure::start();
    let node_conn = secure.connect("node").await;
    let js = async_nats::jetstream::new(node_conn.client.clone());
    // The organisation's stream, on subjects of its own (no mesh user publishes there).
    js.get_or_create_stream(async_nats::jetstream::stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let wf = workflow_node::definition::parse_str(ORDERS, "orders.yaml").unwrap();
    let (_node, _watched) = node_serving(&secure, vec![wf]).await;
    // A message the trigger parked (its workflow since fixed, say): as the node parks
    // one, with its original subject.
    let mut h = HeaderMap::new();
    h.insert("Mesh-Dead-Subject", "orders.created");
    h.insert("Mesh-Dead-Reason", "the input fails on it");
    h.insert("Mesh-Dead-Trigger", "Orders.large");
    let parked = js
        .publish_with_headers("mesh.dead.wf.Orders.large", h, r#"{"id": "o-7"}"#.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let seq = parked.sequence.to_string();
    let seed = secure.pki.join("ops.nk");
    let replay = ["triggers", "replay", "Orders", &seq, "--nkey-seed-file"];
    let mut args = replay.to_vec();
    args.push(seed.to_str().unwrap());
    let out = cli(&secure, "ops", &args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The run the trigger would have started, under the trigger's caller name.
    let give_up = tokio::time::Instant::now() + WAIT;
    loop {
        let listed = cli(&secure, "ops", &["runs", "list", "--json"]);
        assert_eq!(listed.status.code(), Some(0), "{listed:?}");
        let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
        let runs = runs.as_array().cloned().unwrap_or_default();
        let started = |r: &Value| r["workflow"] == "Orders" && r["caller"] == "trigger:large";
        if runs.iter().any(started) {
            break;
        }
        assert!(tokio::time::Instant::now() < give_up, "no run: {runs:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Replayed once: it is no longer a dead letter, and a second replay is refused.
    let letters = cli(&secure, "ops", &["triggers", "dead-letters", "--json"]);
    let letters: Value = serde_json::from_slice(&letters.stdout).unwrap();
    assert_eq!(letters.as_array().map(Vec::len), Some(0), "{letters}");
    let again = cli(&secure, "ops", &args);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
}
