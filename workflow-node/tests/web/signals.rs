//! A run waiting for a signal in the web view (`docs/http.md`) against a real nats-server:
//! the run's JSON says what it waits for (signal, key, since, deadline); `POST
//! /api/runs/{id}/signal` refuses a payload the wait node's schema refuses (400, the
//! schema's words) and a signal no wait node takes (400), then delivers a good one (200)
//! and the run ends with it; an ended run refuses (409). Signed by the web view's key, as
//! its starts are, so the node checks it as it checks the CLI's.

use std::net::SocketAddr;
use std::time::Duration;

use agent_sdk::Signer;
use serde_json::{json, Value};
use test_harness::http::{get, post, TIMEOUT};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, Web};

const PAID: &str = r#"
name: Paid
workflow:
  description: waits for the payment of an order
  input_schema:
    type: object
    properties: {order: {type: string}}
    required: [order]
  nodes:
    - id: paid
      type: wait
      signal: payment
      correlation: "{{workflow.input.order}}"
      schema: {type: object, required: [amount], properties: {amount: {type: number}}}
      timeout: 1h
  output_mapping: {amount: "{{paid.output.data.amount}}"}
"#;

/// Asks `GET path` until `done` holds of its JSON; fails after [`TIMEOUT`].
async fn get_until(addr: SocketAddr, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let give_up = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let a = get(addr, path).await;
        assert_eq!(a.status, 200, "GET {path}: {}", a.body);
        let v = a.json();
        if done(&v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "GET {path} never got there: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_run_shows_its_wait_and_takes_a_signal_over_http() {
    let server = test_harness::nats();
    let operator = Signer::generate();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let workflows = vec![workflow_node::definition::parse_str(PAID, "t.yaml").unwrap()];
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(
        client.clone(),
        "mesh",
        Some(operator),
        Access::default(),
        addr,
    )
    .await
    .unwrap();
    let addr = web.addr();
    let a = post(
        addr,
        "/api/workflows/Paid/runs",
        &json!({"input": {"order": "o-3"}}),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let id = a.json()["execution_id"].as_str().unwrap().to_string();
    let path = format!("/api/runs/{id}");
    let run = get_until(addr, &path, |v| {
        v["signals"]["waiting"]
            .as_array()
            .is_some_and(|w| !w.is_empty())
    })
    .await;
    let waiting = &run["signals"]["waiting"][0];
    assert_eq!(waiting["node"], "paid", "{run}");
    assert_eq!(waiting["signal"], "payment", "{run}");
    assert_eq!(waiting["key"], "o-3", "{run}");
    assert!(
        waiting["since"].is_string() && waiting["deadline"].is_string(),
        "{run}"
    );

    let signal = format!("/api/runs/{id}/signal");
    let a = post(
        addr,
        &signal,
        &json!({"signal": "payment", "data": {"amount": "x"}}),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("does not match its schema"), "{}", a.body);
    let a = post(addr, &signal, &json!({"signal": "refund", "data": {}})).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.body.contains("no wait node for signal 'refund'"),
        "{}",
        a.body
    );
    let a = post(addr, &signal, &json!({"data": {}})).await;
    assert_eq!(a.status, 400, "{}", a.body);

    let a = post(
        addr,
        &signal,
        &json!({"signal": "payment", "data": {"amount": 4}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let ended = get_until(addr, &path, |v| v["status"] == "success").await;
    assert_eq!(ended["output"], json!({"amount": 4}), "{ended}");
    let a = post(
        addr,
        &signal,
        &json!({"signal": "payment", "data": {"amount": 5}}),
    )
    .await;
    assert_eq!(a.status, 409, "{}", a.body);
}
