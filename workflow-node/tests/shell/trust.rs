//! What the node trusts, over a real nats-server: a call's result only from whoever
//! received the call (proven with its call token), a run's events only from a replica (event MACs),
//! replies and status updates only to inboxes and mesh response subjects, and artifacts
//! only from the mesh's bucket, within a size limit. Each test plays the forger.

use std::time::Duration;

use agent_sdk::workflow::{get_run, invoke_as, RunState};
use messages::a2a::{AgentReply, Message, Part, Role};
use messages::jsonrpc::{Request, Response};
use messages::payload::{object_uri, wrap, JSON_MIME};
use messages::workflow::{NodePhase, RunPhase};
use messages::{call_proof, headers, subjects};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Mutex};
use workflow_node::core::{Event, TimerId};
use workflow_node::shell::{run::names, Config, Envelope};

use crate::support;
use crate::support::mesh::Mesh;

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = support::fixtures::ECHO_STUBS;

const SLOW: &str = r#"
name: Slow
workflow:
  description: one call to an agent the test holds
  nodes:
    - {id: work, type: agent, agent_name: Holder, input: {}}
  output_mapping: {answer: "{{work.output}}"}
"#;

const GATE: &str = r#"
name: Gate
max_workflow_execution_time_seconds: 3600
workflow:
  description: an approval that waits, then an agent
  nodes:
    - {id: gate, type: approval, timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: true}}
  output_mapping: {went: "{{go.output.went}}"}
"#;

/// Serves agent `Holder`: each call's sub-task id goes to `calls`, and the call answers
/// `{"truth": true}` once the test sends on `release`.
async fn holder(
    client: &async_nats::Client,
) -> (
    agent_sdk::AgentHandle,
    mpsc::UnboundedReceiver<String>,
    mpsc::UnboundedSender<()>,
) {
    let (calls_tx, calls) = mpsc::unbounded_channel();
    let (release, release_rx) = mpsc::unbounded_channel::<()>();
    let release_rx = std::sync::Arc::new(Mutex::new(release_rx));
    let handle = agent_sdk::AgentBuilder::new("Holder")
        .handler(agent_sdk::handler_fn(move |req: agent_sdk::NodeRequest| {
            let (calls_tx, release_rx) = (calls_tx.clone(), release_rx.clone());
            async move {
                let id = req.workflow.map(|w| w.sub_task_id).unwrap_or_default();
                let _ = calls_tx.send(id);
                release_rx.lock().await.recv().await;
                Ok(json!({"truth": true}))
            }
        }))
        .serve(client.clone())
        .await
        .expect("holder agent");
    (handle, calls, release)
}

/// A complete reply carrying `output`, as an agent would send it.
fn reply_bytes(output: Value) -> Vec<u8> {
    let message = Message::new("forged", Role::Agent, vec![wrap(output)]);
    let response = Response::result("forged".into(), AgentReply::Message(message));
    serde_json::to_vec(&response).unwrap()
}

/// Publishes into JetStream and waits for the stream to store it.
async fn store(
    js: &async_nats::jetstream::Context,
    subject: String,
    h: async_nats::HeaderMap,
    body: Vec<u8>,
) {
    js.publish_with_headers(subject, h, body.into())
        .await
        .expect("publish")
        .await
        .expect("stored");
}

#[tokio::test]
async fn a_forged_result_is_dropped_and_cannot_pre_empt_the_real_one() {
    let m = support::mesh::mesh(STUBS, &[SLOW], Config::default()).await;
    let (_holder, mut calls, release) = holder(&m.client).await;
    let task = "forge-me";
    let run = tokio::spawn({
        let client = m.client.clone();
        async move { invoke_as(&client, "mesh", "Slow", &json!({}), TIMEOUT, task, |_| {}).await }
    });
    let id = tokio::time::timeout(TIMEOUT, calls.recv())
        .await
        .expect("the call in time")
        .expect("a call");
    // The sub-task id is predictable from the execution id, which every agent the run
    // calls sees; only the call's token, which no forger has, proves a reply.
    let execution = names::execution_id("Slow", task);
    assert!(id.starts_with(&execution.0), "{id}");
    let made_up = "0".repeat(32);
    let js = async_nats::jetstream::new(m.client.clone());
    let subject = subjects::agent_response("mesh", "Slow", &id);
    let body = reply_bytes(json!({"forged": true}));
    let wrong_mac = call_proof::mac(&made_up, &subject, &body);
    for (msg_id, mac) in [
        (id.clone(), None),
        (format!("{id}.final"), None),
        (call_proof::reply_msg_id(&made_up), Some(wrong_mac.as_str())),
        (id.clone(), Some("not hex")),
    ] {
        let mut h = async_nats::HeaderMap::new();
        h.insert(headers::MSG_ID, msg_id.as_str());
        if let Some(mac) = mac {
            h.insert(call_proof::CALL_MAC, mac);
        }
        store(&js, subject.clone(), h, body.clone()).await;
        // A status update is not forwarded either (nothing to assert on but the run's
        // answer below; it must not crash or stall anything).
        m.client
            .publish(
                subjects::agent_status("mesh", "Slow", &id),
                reply_bytes(json!(1)).into(),
            )
            .await
            .unwrap();
    }
    support::mesh::settled(&m.client, "Slow").await;
    let record = run_state(&m, "Slow", &execution.0).await.expect("the run");
    assert_eq!(
        record.run.status,
        RunPhase::Running,
        "a forged result ended the call: {record:?}"
    );
    release.send(()).unwrap();
    let result = run.await.unwrap().expect("an answer");
    assert_eq!(result.status, "success", "{:?}", result.error);
    assert_eq!(result.output, Some(json!({"answer": {"truth": true}})));
}

#[tokio::test]
async fn events_not_published_by_a_replica_are_refused() {
    let m = support::mesh::mesh(STUBS, &[GATE], Config::default()).await;
    let task = "gated";
    let run = tokio::spawn({
        let client = m.client.clone();
        async move { invoke_as(&client, "mesh", "Gate", &json!({}), TIMEOUT, task, |_| {}).await }
    });
    let execution = names::execution_id("Gate", task);
    wait_for_node(&m, "Gate", &execution.0, "gate", NodePhase::Waiting).await;
    let js = async_nats::jetstream::new(m.client.clone());
    let forged = [
        Event::CancelRequested {
            reason: Some("forged".into()),
        },
        Event::TimerFired {
            timer: TimerId::Deadline,
        },
        Event::TimerFired {
            timer: TimerId::ApprovalTimeout {
                node: "gate".into(),
            },
        },
        Event::ApprovalDecided {
            node: "gate".into(),
            approved: false,
            by: Some("mallory".into()),
            comment: None,
        },
    ];
    for (n, event) in forged.into_iter().enumerate() {
        let body = serde_json::to_vec(&Envelope::event(event)).unwrap();
        let subject = subjects::run_events("mesh", "Gate", &execution.0);
        let mut h = async_nats::HeaderMap::new();
        h.insert(headers::MSG_ID, format!("forged-{n}").as_str());
        if n % 2 == 1 {
            h.insert("Mesh-Event-Mac", "00".repeat(32).as_str());
        }
        store(&js, subject, h, body).await;
    }
    support::mesh::settled(&m.client, "Gate").await;
    let record = run_state(&m, "Gate", &execution.0).await.expect("the run");
    assert_eq!(
        record.run.status,
        RunPhase::Running,
        "a forged event changed the run: {record:?}"
    );
    assert_eq!(record.run.nodes["gate"], NodePhase::Waiting, "{record:?}");
    // The run is alive: its caller's own cancel (through the node) still ends it.
    let cancel = Request::tasks_cancel("c", task);
    let answer = m
        .client
        .request(
            subjects::agent_request("mesh", "Gate"),
            serde_json::to_vec(&cancel).unwrap().into(),
        )
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert!(answer.get("result").is_some(), "{answer}");
    let result = run.await.unwrap().expect("an answer");
    assert_eq!(result.status, "cancelled", "{result:?}");
}

async fn run_state(m: &Mesh, workflow: &str, execution: &str) -> Option<RunState> {
    get_run(&m.client, "mesh", workflow, execution, None)
        .await
        .ok()
}

async fn wait_for_node(m: &Mesh, workflow: &str, execution: &str, node: &str, phase: NodePhase) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(state) = run_state(m, workflow, execution).await {
            if state.run.nodes.get(node) == Some(&phase) {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{node} never {phase:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `body` to `Gate` with the NATS reply `_INBOX…` and `extra` headers; its answer.
async fn ask_with(m: &Mesh, extra: &[(&str, &str)], body: &Request) -> Value {
    let mut h = async_nats::HeaderMap::new();
    for (k, v) in extra {
        h.insert(*k, *v);
    }
    let reply = m
        .client
        .request_with_headers(
            subjects::agent_request("mesh", "Gate"),
            h,
            serde_json::to_vec(body).unwrap().into(),
        )
        .await
        .expect("an answer");
    serde_json::from_slice(&reply.payload).unwrap()
}

#[tokio::test]
async fn replies_go_only_to_inboxes_and_mesh_response_subjects() {
    let m = support::mesh::mesh(STUBS, &[GATE], Config::default()).await;
    let runs_bucket = names::runs_bucket("mesh");
    let key = "Gate.hijacked";
    let mut kv_writes = m
        .client
        .subscribe(subjects::kv_all(&runs_bucket))
        .await
        .unwrap();
    let start = |id: &str| {
        let mut message = Message::new(id, Role::User, vec![wrap(json!({}))]);
        message.task_id = Some(id.into());
        Request::message_send(id, message)
    };
    let runs_key = subjects::kv_key(&runs_bucket, key);
    let cases = [
        (headers::REPLY_TO, runs_key.as_str()),
        (
            headers::STATUS_TO,
            "mesh.wf.Gate.events.0123456789abcdef0123456789abcdef",
        ),
        (headers::REPLY_TO, "$JS.API.STREAM.DELETE.mesh_WF_Gate"),
        (headers::STATUS_TO, "mesh.a2a.v1.agent.request.Echo"),
    ];
    for (n, (header, subject)) in cases.into_iter().enumerate() {
        let answer = ask_with(&m, &[(header, subject)], &start(&format!("t{n}"))).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert!(
            message.contains(subject) && message.contains("is refused"),
            "{message}"
        );
    }
    // None of them started a run or wrote into the runs bucket.
    let kv = async_nats::jetstream::new(m.client.clone())
        .get_key_value(&runs_bucket)
        .await
        .unwrap();
    assert_eq!(kv.get(key).await.unwrap(), None);
    for n in 0..4 {
        let execution = names::execution_id("Gate", &format!("t{n}"));
        assert!(
            run_state(&m, "Gate", &execution.0).await.is_none(),
            "run t{n} started"
        );
    }
    assert!(
        kv_writes.try_next_now().is_none(),
        "something was written to the runs bucket"
    );
}

trait TryNextNow {
    fn try_next_now(&mut self) -> Option<async_nats::Message>;
}

impl TryNextNow for async_nats::Subscriber {
    /// A message already received, without waiting for one.
    fn try_next_now(&mut self) -> Option<async_nats::Message> {
        use futures::FutureExt;
        futures::StreamExt::next(self).now_or_never().flatten()
    }
}

#[tokio::test]
async fn artifacts_are_read_only_from_the_mesh_bucket_and_within_the_limit() {
    let config = Config {
        max_artifact_bytes: 1024,
        ..Config::default()
    };
    let m = support::mesh::mesh(STUBS, &[GATE], config).await;
    let js = async_nats::jetstream::new(m.client.clone());
    let bucket = subjects::artifact_bucket("mesh");
    let store = js
        .create_object_store(async_nats::jetstream::object_store::Config {
            bucket: bucket.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let big = serde_json::to_vec(&json!({"blob": "x".repeat(4096)})).unwrap();
    store.put("big.json", &mut big.as_slice()).await.unwrap();
    let cases = [
        (
            object_uri("mesh_wf_cards", "x.json"),
            "only the mesh's artifact bucket",
        ),
        (
            object_uri(&bucket, "big.json"),
            "over the limit of 1024 bytes",
        ),
    ];
    for (n, (uri, why)) in cases.into_iter().enumerate() {
        let part = Part::file_uri(uri.clone(), None, Some(JSON_MIME.into()));
        let mut message = Message::new(format!("m{n}"), Role::User, vec![part]);
        message.task_id = Some(format!("a{n}"));
        let answer = ask_with(&m, &[], &Request::message_send(format!("a{n}"), message)).await;
        assert_eq!(answer["result"]["status"]["state"], "failed", "{answer}");
        assert!(answer.to_string().contains(why), "{uri}: {answer}");
    }
}
