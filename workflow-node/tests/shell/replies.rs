//! Final replies over a real nats-server: a claim on a run's final reply is final (no
//! replica takes it over, so no caller gets two), and a caller that sends its request
//! again is answered: from the record once the run has ended, or by joining the run
//! while it goes on.

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use messages::a2a::{Message, Role, TaskState};
use messages::jsonrpc::Request;
use messages::payload::wrap;
use messages::reply::{decode_reply, final_task};
use messages::{headers, subjects};
use serde_json::{json, Value};
use test_harness::proxy::{Fault, Proxy};
use workflow_node::shell::{run::names, Caller, Config, WorkflowNode};

use crate::support;
use crate::support::fixtures::echo;
use crate::support::mesh::{settled, Mesh};

const WAIT: Duration = Duration::from_secs(30);

const STUBS: &str = concat!(
    "agents:",
    echo!(),
    r#"
  - name: Slow
    delay: 300ms
    rules: [{output: "{{input}}"}]
"#,
);

const ECHO: &str = r#"
name: Echo1
workflow:
  description: one agent
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
  output_mapping: {n: "{{echo.output.n}}"}
"#;

const SLOW: &str = r#"
name: Slow1
workflow:
  description: one slow agent
  nodes:
    - {id: slow, type: agent, agent_name: Slow, input: {n: "{{workflow.input.n}}"}}
  output_mapping: {n: "{{slow.output.n}}"}
"#;

async fn mesh() -> Mesh {
    support::mesh::mesh(STUBS, &[ECHO, SLOW], Config::default()).await
}

/// A caller with its own reply and status inboxes.
struct Caller_ {
    replies: async_nats::Subscriber,
    status: async_nats::Subscriber,
    reply_to: String,
    status_to: String,
}

async fn caller(client: &async_nats::Client) -> Caller_ {
    let reply_to = client.new_inbox();
    let status_to = client.new_inbox();
    let replies = client.subscribe(reply_to.clone()).await.expect("subscribe");
    let status = client
        .subscribe(status_to.clone())
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");
    Caller_ {
        replies,
        status,
        reply_to,
        status_to,
    }
}

impl Caller_ {
    /// Sends the request of task `task` to `workflow`.
    async fn send(&self, client: &async_nats::Client, workflow: &str, task: &str, n: i64) {
        self.send_input(client, workflow, task, json!({"n": n}))
            .await;
    }

    /// Sends the request of task `task` to `workflow`, with `input`.
    async fn send_input(
        &self,
        client: &async_nats::Client,
        workflow: &str,
        task: &str,
        input: Value,
    ) {
        let message = Message::new(task, Role::User, vec![wrap(input)]);
        let body = serde_json::to_vec(&Request::message_send(task, message)).expect("encode");
        let mut h = async_nats::HeaderMap::new();
        h.insert(headers::STATUS_TO, self.status_to.as_str());
        client
            .publish_with_reply_and_headers(
                subjects::agent_request("mesh", workflow),
                self.reply_to.clone(),
                h,
                body.into(),
            )
            .await
            .expect("publish");
        client.flush().await.expect("flush");
    }

    /// The next final reply: its state and output.
    async fn reply(&mut self) -> (TaskState, Value) {
        let msg = tokio::time::timeout(WAIT, self.replies.next())
            .await
            .expect("a final reply in time")
            .expect("subscription open");
        let task = final_task(decode_reply(&msg.payload).expect("JSON-RPC")).expect("a task");
        let output = task
            .status
            .message
            .and_then(|m| m.parts.iter().find_map(|p| p.as_data().cloned()))
            .map(Value::Object)
            .unwrap_or(Value::Null);
        (task.status.state, output)
    }

    /// The next final reply, as it came.
    async fn raw_reply(&mut self) -> Value {
        let msg = tokio::time::timeout(WAIT, self.replies.next())
            .await
            .expect("a final reply in time")
            .expect("subscription open");
        serde_json::from_slice(&msg.payload).expect("JSON")
    }

    /// Final replies already received, without waiting.
    fn pending_replies(&mut self) -> usize {
        let mut n = 0;
        while let Some(Some(_)) = self.replies.next().now_or_never() {
            n += 1;
        }
        n
    }

    /// Waits for a progress update carrying a DataPart of type `kind`.
    async fn wait_progress(&mut self, kind: &str) {
        tokio::time::timeout(WAIT, async {
            while let Some(msg) = self.status.next().await {
                let v: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                let parts = &v["result"]["status"]["message"]["parts"];
                let found = parts
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["data"]["type"] == kind));
                if found {
                    return;
                }
            }
        })
        .await
        .expect("the progress update in time");
    }

    /// Waits for a status update in `state`.
    async fn wait_status(&mut self, state: &str) {
        tokio::time::timeout(WAIT, async {
            while let Some(msg) = self.status.next().await {
                let v: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                if v["result"]["status"]["state"] == state {
                    return;
                }
            }
        })
        .await
        .expect("the status update in time");
    }
}

#[tokio::test]
async fn a_claimed_final_reply_is_never_sent_by_another_replica_and_a_resend_is_answered() {
    // A claim counts as old at once (the reply it promised is not in flight any more).
    let config = Config {
        reply_in_flight: std::time::Duration::ZERO,
        ..Config::default()
    };
    let m = support::mesh::mesh(STUBS, &[ECHO, SLOW], config).await;
    let task = "claimed-elsewhere";
    // A replica claimed this run's final reply long ago and died before sending it.
    let execution = names::execution_id("Echo1", task);
    let js = async_nats::jetstream::new(m.client.clone());
    let runs = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("runs bucket");
    let marker = names::final_marker("Echo1", &execution, &Caller::default());
    runs.create(&marker, "claimed@1".into())
        .await
        .expect("an old claim");

    let mut c = caller(&m.client).await;
    c.send(&m.client, "Echo1", task, 7).await;
    c.wait_progress("workflow_execution_result").await;
    settled(&m.client, "Echo1").await;
    assert_eq!(
        c.pending_replies(),
        0,
        "the claim is another replica's: nobody else sends this reply"
    );

    // The caller heard nothing and asks again: the ended run answers it.
    c.send(&m.client, "Echo1", task, 7).await;
    assert_eq!(c.reply().await, (TaskState::Completed, json!({"n": 7})));
    settled(&m.client, "Echo1").await;
    assert_eq!(c.pending_replies(), 0, "one answer to the one resend");
}

#[tokio::test]
async fn a_request_is_accepted_and_answered_once_and_a_late_resend_from_the_record() {
    let m = mesh().await;
    let mut first = caller(&m.client).await;
    first.send(&m.client, "Echo1", "once", 3).await;
    first.wait_status("submitted").await;
    assert_eq!(first.reply().await, (TaskState::Completed, json!({"n": 3})));

    // Another process of the same caller (another inbox) asks for the same task later.
    let mut later = caller(&m.client).await;
    later.send(&m.client, "Echo1", "once", 3).await;
    assert_eq!(later.reply().await, (TaskState::Completed, json!({"n": 3})));
    settled(&m.client, "Echo1").await;
    assert_eq!(first.pending_replies(), 0);
    assert_eq!(later.pending_replies(), 0);
}

#[tokio::test]
async fn a_caller_resending_from_another_address_joins_the_running_run() {
    let m = mesh().await;
    let mut first = caller(&m.client).await;
    let mut second = caller(&m.client).await;
    first.send(&m.client, "Slow1", "joined", 5).await;
    first.wait_status("submitted").await;
    second.send(&m.client, "Slow1", "joined", 5).await;
    second.wait_status("submitted").await;
    // Both hear of the run's end, each once.
    assert_eq!(first.reply().await, (TaskState::Completed, json!({"n": 5})));
    assert_eq!(
        second.reply().await,
        (TaskState::Completed, json!({"n": 5}))
    );
    // The same caller again from its own address, right after its reply (a resend that
    // crossed it): told that the reply was just sent, not answered a second time.
    first.send(&m.client, "Slow1", "joined", 5).await;
    first.wait_status("working").await;
    settled(&m.client, "Slow1").await;
    assert_eq!(first.pending_replies() + second.pending_replies(), 0);
}

#[tokio::test]
async fn a_resend_from_the_same_address_after_the_reply_was_lost_is_answered_from_the_record() {
    // No grace: every resend after the reply counts as one whose reply was lost.
    let config = Config {
        reply_in_flight: std::time::Duration::ZERO,
        ..Config::default()
    };
    let m = support::mesh::mesh(STUBS, &[ECHO, SLOW], config).await;
    let mut first = caller(&m.client).await;
    first.send(&m.client, "Echo1", "lost", 4).await;
    assert_eq!(first.reply().await, (TaskState::Completed, json!({"n": 4})));
    first.send(&m.client, "Echo1", "lost", 4).await;
    assert_eq!(first.reply().await, (TaskState::Completed, json!({"n": 4})));
    settled(&m.client, "Echo1").await;
    assert_eq!(first.pending_replies(), 0);
}

/// Every `nats-object://` URI in `v`.
fn object_uris(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) if s.starts_with("nats-object://") => vec![s.clone()],
        Value::Array(a) => a.iter().flat_map(object_uris).collect(),
        Value::Object(o) => o.values().flat_map(object_uris).collect(),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn resent_requests_to_an_ended_run_from_two_replicas_name_its_output_stored_once() {
    // No grace: every resend counts as one whose reply was lost, and is answered in full.
    let config = Config {
        reply_in_flight: std::time::Duration::ZERO,
        ..Config::default()
    };
    let m = support::mesh::mesh(STUBS, &[ECHO, SLOW], config.clone()).await;
    let other = async_nats::connect(m.server.url()).await.expect("connect");
    let _second =
        workflow_node::shell::WorkflowNode::start(other, support::mesh::workflows(&[ECHO]), config)
            .await
            .expect("a second replica");
    // Every object written to the artifact bucket writes its metadata message: heard here.
    let mut metadata = m
        .client
        .subscribe("$O.mesh_artifacts.M.>")
        .await
        .expect("subscribe");
    m.client.flush().await.expect("flush");

    // An output over the inline limit (256 KiB): the run's artifact.
    let big = "o".repeat(300 * 1024);
    let task = "large-output";
    let mut first = caller(&m.client).await;
    first
        .send_input(&m.client, "Echo1", task, json!({"n": big}))
        .await;
    let uris = object_uris(&first.raw_reply().await);
    assert_eq!(uris.len(), 1, "the output named by one artifact: {uris:?}");
    let uri = &uris[0];
    assert!(uri.contains(".output.json@v1"), "{uri}");
    settled(&m.client, "Echo1").await;

    // The caller asks again, from its address and from others, and for the task's state:
    // each is answered, from either replica, naming the same object.
    for k in 0..6 {
        let mut again = caller(&m.client).await;
        let resend = if k % 2 == 0 { &first } else { &again };
        resend
            .send_input(&m.client, "Echo1", task, json!({"n": big}))
            .await;
        let answer = if k % 2 == 0 {
            first.raw_reply().await
        } else {
            again.raw_reply().await
        };
        assert_eq!(object_uris(&answer), uris, "resend {k}: {answer}");
        let get = Request::tasks_get(format!("get-{k}"), task);
        let body = serde_json::to_vec(&get).expect("encode");
        let state = m
            .client
            .request(subjects::agent_request("mesh", "Echo1"), body.into())
            .await
            .expect("tasks/get answered");
        let state: Value = serde_json::from_slice(&state.payload).expect("JSON");
        assert_eq!(state["result"]["status"]["state"], "completed", "{state}");
        assert!(object_uris(&state).contains(uri), "tasks/get {k}: {state}");
    }
    settled(&m.client, "Echo1").await;

    // The output's object was written once, and so was the link to it.
    let key = uri.rsplit_once('/').expect("a name").1;
    let link = key.strip_suffix("@v1").expect("version 1");
    m.client.flush().await.expect("flush");
    let mut writes = std::collections::BTreeMap::<String, usize>::new();
    while let Some(Some(msg)) = metadata.next().now_or_never() {
        let info: Value = serde_json::from_slice(&msg.payload).expect("object metadata");
        if let Some(name) = info["name"].as_str() {
            *writes.entry(name.to_owned()).or_default() += 1;
        }
    }
    assert_eq!(writes.get(key), Some(&1), "writes of {key}: {writes:?}");
    assert_eq!(writes.get(link), Some(&1), "writes of {link}: {writes:?}");
}

#[tokio::test]
async fn a_resend_held_up_in_its_replica_past_the_in_flight_window_gets_no_second_reply() {
    // A sent reply counts as on its way for 2 s; the resend is held up for longer.
    let config = Config {
        reply_in_flight: Duration::from_secs(2),
        ..Config::default()
    };
    let mut m = support::mesh::mesh(STUBS, &[ECHO], config.clone()).await;
    // The replica is one whose connection runs through a proxy.
    let proxy = Proxy::for_url(&m.server.url()).await.expect("proxy");
    let behind = async_nats::connect(proxy.url()).await.expect("connect");
    let replica = WorkflowNode::start(behind, support::mesh::workflows(&[ECHO]), config)
        .await
        .expect("the replica behind the proxy");
    m.replace_node(replica).shutdown().await;

    let task = "held-resend";
    let mut c = caller(&m.client).await;
    c.send(&m.client, "Echo1", task, 6).await;
    assert_eq!(c.reply().await, (TaskState::Completed, json!({"n": 6})));
    settled(&m.client, "Echo1").await;
    while let Some(Some(_)) = c.status.next().now_or_never() {} // the run's progress

    // A resend that crossed the reply reaches the replica, whose store is then out of
    // reach (everything it sends held up, as behind a partition) past the window.
    proxy.set_up(Fault::Hold);
    c.send(&m.client, "Echo1", task, 6).await;
    let execution = names::execution_id("Echo1", task);
    proxy.until_held(execution.0.as_bytes()).await;
    tokio::time::sleep(HELD).await;
    proxy.set_up(Fault::Pass);

    // It is answered as one that crossed the reply (the reply is on its way), not with a
    // second reply.
    let first = tokio::time::timeout(WAIT, async {
        loop {
            tokio::select! {
                Some(msg) = c.replies.next() => {
                    let v: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                    return format!("a second final reply: {v}");
                }
                Some(msg) = c.status.next() => {
                    let v: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                    if v["result"]["status"]["state"] == "working" {
                        return "working".to_string();
                    }
                }
            }
        }
    })
    .await
    .expect("an answer to the resend in time");
    assert_eq!(first, "working");
    assert_eq!(c.pending_replies(), 0);
}

/// How long a resend is held up in its replica: longer than the reply's in-flight window.
const HELD: Duration = Duration::from_secs(3);
