//! Push notifications survive the door replica that claimed them: a replica dies while its
//! POST hangs, and another, once the claim's lease lapsed, sends the notification and
//! marks it delivered. And a task that reaches `input-required` twice is notified twice.
//! The receiver is a webhook of the test's own that holds or answers each POST.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use agent_sdk::Signer;
use workflow_node::ops::approvals::{self, Decided};
use workflow_node::ops::runs::{RunRef, Runs};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, AccessArgs, Web};

use super::a2a::card_seen;

const TWO_GATES: &str = r#"
name: TwoGates
workflow:
  description: two approvals, one after the other
  nodes:
    - {id: first, type: approval, message: "first?", timeout: 1h}
    - {id: second, type: approval, depends_on: [first], message: "second?", timeout: 1h}
  output_mapping: {done: "yes"}
"#;

/// One POST the webhook received: its body, and where to say how to answer it.
pub(super) struct Post {
    pub(super) body: Value,
    /// Its `Mesh-Push-Id`.
    pub(super) id: String,
    pub(super) answer: oneshot::Sender<StatusCode>,
}

impl Post {
    /// The notified task's state.
    pub(super) fn state(&self) -> &str {
        self.body["status"]["state"].as_str().unwrap_or_default()
    }
}

/// A webhook on loopback whose POSTs the test receives and answers (or holds).
async fn webhook() -> (String, mpsc::UnboundedReceiver<Post>) {
    let (app, rx) = hook_app();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), rx)
}

/// The webhook's routes (`POST /hook`), to serve over http or https.
pub(super) fn hook_app() -> (axum::Router, mpsc::UnboundedReceiver<Post>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route(
            "/hook",
            post(
                |State(tx): State<mpsc::UnboundedSender<Post>>,
                 headers: axum::http::HeaderMap,
                 body: axum::body::Bytes| async move {
                    let (answer, verdict) = oneshot::channel();
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let id = headers
                        .get("mesh-push-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    if tx.send(Post { body, id, answer }).is_err() {
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    // A dropped answer holds the POST until its sender gives up.
                    verdict.await.unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
                },
            ),
        )
        .with_state(tx);
    (app, rx)
}

/// The next POST, within the harness's time.
pub(super) async fn next_post(posts: &mut mpsc::UnboundedReceiver<Post>) -> Post {
    tokio::time::timeout(test_harness::http::TIMEOUT, posts.recv())
        .await
        .expect("a push notification in time")
        .expect("the webhook runs")
}

/// A door replica whose claims lapse after 300 ms of silence.
async fn door(client: &async_nats::Client, operator: &Signer) -> Web {
    let args = AccessArgs {
        push_allow_private: true,
        push_lease_ms: Some(300),
        ..AccessArgs::default()
    };
    door_with(client, operator, &args).await
}

/// A door replica with `args`, once it serves `TwoGates`.
pub(super) async fn door_with(
    client: &async_nats::Client,
    operator: &Signer,
    args: &AccessArgs,
) -> Web {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(
        client.clone(),
        "mesh",
        Some(operator.clone()),
        Access::new(args).unwrap(),
        addr,
    )
    .await
    .unwrap();
    card_seen(web.addr(), "TwoGates").await;
    web
}

/// Starts a `TwoGates` task through `web` with a push config to `url`: its id.
pub(super) async fn start_task(web: &Web, url: &str) -> String {
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": uuid::Uuid::new_v4().to_string(),
                    "role": "user", "parts": [{"kind": "data", "data": {}}]},
        "configuration": {"blocking": false,
                          "pushNotificationConfig": {"id": "hook", "url": url, "token": "t"}}}});
    let answer = test_harness::http::post(web.addr(), "/a2a/TwoGates", &send).await;
    let body = answer.json();
    body["result"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {body}"))
        .to_owned()
}

/// Approves `node` of task `task`, signed by the operator.
async fn approve(client: &async_nats::Client, operator: &Signer, task: &str, node: &str) {
    let runs = Runs::open(client.clone(), "mesh").await.unwrap();
    let which = RunRef {
        id: task,
        workflow: Some("TwoGates"),
        caller: None,
    };
    let run = runs.find(which).await.unwrap();
    let decided = Decided {
        node,
        approve: true,
        by: None,
        comment: None,
    };
    approvals::decide(&runs, &run, decided, Some(operator))
        .await
        .unwrap();
}

/// A mesh with the workflow node serving `TwoGates`; its operator's key.
pub(super) async fn mesh(client: &async_nats::Client) -> (WorkflowNode, Signer) {
    let operator = Signer::generate();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let workflows = vec![workflow_node::definition::parse_str(TWO_GATES, "t.yaml").unwrap()];
    let node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    (node, operator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_whose_claimant_dies_is_sent_by_another_replica() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let (_node, operator) = mesh(&client).await;
    let (url, mut posts) = webhook().await;
    let first = door(&client, &operator).await;
    let task = start_task(&first, &url).await;
    // The first replica claims the notification and POSTs it; the POST hangs.
    let held = next_post(&mut posts).await;
    assert_eq!(held.state(), "input-required", "{}", held.body);
    // It dies with its claim held.
    drop(first);
    let second = door(&client, &operator).await;
    let taken = next_post(&mut posts).await;
    assert_eq!(taken.body["id"], json!(task), "{}", taken.body);
    assert_eq!(taken.state(), "input-required", "{}", taken.body);
    assert!(!held.id.is_empty(), "a notification names itself");
    assert_eq!(
        taken.id, held.id,
        "both copies carry one id to de-duplicate on"
    );
    taken.answer.send(StatusCode::OK).unwrap();
    // The claim is marked delivered: no replica sends it again.
    let bucket = async_nats::jetstream::new(client.clone())
        .get_key_value("mesh_a2a_push")
        .await
        .unwrap();
    let mut claims = bucket.watch_with_history("sent.>").await.unwrap();
    loop {
        let entry = tokio::time::timeout(test_harness::http::TIMEOUT, claims.next())
            .await
            .expect("the claim settles in time")
            .unwrap()
            .unwrap();
        if String::from_utf8_lossy(&entry.value).contains("\"delivered\"") {
            assert_eq!(entry.key, format!("sent.{}", held.id));
            break;
        }
    }
    drop((held, second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_time_a_task_reaches_input_required_is_notified() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let (_node, operator) = mesh(&client).await;
    let (url, mut posts) = webhook().await;
    let web = door(&client, &operator).await;
    let task = start_task(&web, &url).await;
    let mut seen = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for (gate, then) in [
        (Some("first"), "input-required"),
        (Some("second"), "input-required"),
        (None, "completed"),
    ] {
        let post = next_post(&mut posts).await;
        seen.push(post.state().to_owned());
        assert!(
            ids.insert(post.id.clone()),
            "a new notification: {}",
            post.id
        );
        assert_eq!(post.state(), then, "notified so far: {seen:?}");
        post.answer.send(StatusCode::OK).unwrap();
        if let Some(gate) = gate {
            approve(&client, &operator, &task, gate).await;
        }
    }
}
