//! The A2A door's push notifications under the shipped secure config: the door keeps its
//! configs and claims in the `mesh_a2a_push` bucket, which both users a door runs as (the
//! operators' user for `ui`, the node's for `serve --http`) must be able to make and write.

use std::time::Duration;

use axum::routing::post;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use workflow_node::web::{Access, AccessArgs, Web};

use crate::support::security::{node_serving, Secure};

const GATE: &str = r#"
name: Gate
workflow:
  description: an approval that waits
  nodes:
    - {id: gate, type: approval, message: "ok to go?", timeout: 1h}
  output_mapping: {by: "{{gate.output.by}}"}
"#;

/// A webhook receiver on loopback: each POST's body, answered 200.
async fn receiver() -> (String, mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: axum::body::Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_door_as_ops_keeps_a_push_config_and_sends_the_notification() {
    let secure = Secure::start();
    let wf = workflow_node::definition::parse_str(GATE, "gate.yaml").unwrap();
    let (_node, mut node_conn) = node_serving(&secure, vec![wf]).await;
    let mut ops = secure.connect("ops").await;
    let args = AccessArgs {
        push_allow_private: true,
        ..AccessArgs::default()
    };
    let access = Access::new(&args).unwrap();
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(ops.client.clone(), "mesh", None, access, addr)
        .await
        .unwrap();
    test_harness::http::card_seen(web.addr(), "Gate").await;
    let (url, mut posts) = receiver().await;
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": "m1", "role": "user",
                    "parts": [{"kind": "data", "data": {}}]},
        "configuration": {"blocking": false,
                          "pushNotificationConfig": {"id": "p1", "url": url, "token": "t1"}}}});
    let answer: Value = reqwest::Client::new()
        .post(format!("http://{}/a2a/Gate", web.addr()))
        .json(&request)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    let task = answer["result"]["id"]
        .as_str()
        .expect("a task id")
        .to_owned();
    // The run waits on its approval: input-required is notified.
    let posted = tokio::time::timeout(Duration::from_secs(60), posts.recv())
        .await
        .expect("a push notification within a minute")
        .expect("the receiver runs");
    assert_eq!(posted["id"], json!(task), "{posted}");
    assert_eq!(
        posted["status"]["state"],
        json!("input-required"),
        "{posted}"
    );
    let errors = ops.errors().await;
    assert!(errors.is_empty(), "{errors:?}");
    assert!(node_conn.errors().await.is_empty());
}
