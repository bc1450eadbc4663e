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

/// A workflow with a GitHub webhook whose secret is in `file`.
fn hooked(file: &std::path::Path) -> String {
    format!(
        "name: Pushes\nworkflow:\n  description: a run per push\n  triggers:\n    - {{name: gh, webhook: github, secret_file: {}, dedup_key: '{{{{event.headers.x-github-delivery}}}}'}}\n  nodes:\n    - {{id: echo, type: agent, agent_name: Echo, input: {{push: '{{{{workflow.input}}}}'}}}}\n  output_mapping: {{push: '{{{{echo.output.push}}}}'}}\n",
        file.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_door_as_ops_forwards_a_webhook_to_the_node() {
    use hmac::Mac;
    let secure = Secure::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gh.secret");
    std::fs::write(&file, "s3cret").unwrap();
    let wf = workflow_node::definition::parse_str(&hooked(&file), "hooks.yaml").unwrap();
    let (_node, mut node_conn) = node_serving(&secure, vec![wf]).await;
    let mut ops = secure.connect("ops").await;
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let access = workflow_node::web::Access::default();
    let web = workflow_node::web::Web::start(ops.client.clone(), "mesh", None, access, addr)
        .await
        .unwrap();
    let body = br#"{"ref": "refs/heads/main"}"#;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
    mac.update(body);
    let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let answer = reqwest::Client::new()
        .post(format!("http://{}/hooks/gh", web.addr()))
        .header("content-type", "application/json")
        .header("x-github-delivery", "d-1")
        .header("x-hub-signature-256", signature)
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    assert_eq!(status, 202, "{text}");
    let errors = ops.errors().await;
    assert!(!errors.iter().any(|e| e.contains("hook")), "{errors:?}");
    assert!(node_conn.errors().await.is_empty());
}
