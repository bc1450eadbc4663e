//! The reference implementation's dialect over a real nats-server and a real workflow
//! node: a hand-written agent (a raw NATS subscriber, not agent-sdk) that speaks only the
//! reference's words (`structured_invocation_result`, status `error`, its output as an
//! `output_artifact_ref`) works with a node in either dialect; a node serving the
//! reference's dialect sends its names and `error` to agents and callers; garbage from an
//! agent fails only the run it answers. The agent proves its replies with the call token as
//! the protocol document describes, byte for byte, computed here by hand.

use std::time::Duration;

use agent_sdk::workflow::invoke;
use async_nats::jetstream::{self, object_store};
use futures::StreamExt;
use messages::card::AgentCard;
use messages::workflow::Dialect;
use messages::{headers, subjects};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

const TIMEOUT: Duration = Duration::from_secs(60);
const NS: &str = "mesh";

const WORKFLOW: &str = r#"
name: Doubler
workflow:
  description: asks the reference agent to double a number
  nodes:
    - {id: a, type: agent, agent_name: RefAgent}
  output_mapping: {result: "{{a.output}}"}
"#;

/// The reference agent: publishes its card (at start and on every discovery ping) and
/// answers each request by its input's `mode`, reporting the request's DataPart `type`.
async fn reference_agent(client: async_nats::Client) -> mpsc::UnboundedReceiver<String> {
    let (seen_tx, seen_rx) = mpsc::unbounded_channel();
    let card = serde_json::to_vec(&AgentCard::new("RefAgent", "doubles", "nats:x", "1")).unwrap();
    let mut pings = client
        .subscribe(subjects::discovery_ping(NS))
        .await
        .unwrap();
    let cards = client.clone();
    let card_copy = card.clone();
    tokio::spawn(async move {
        while pings.next().await.is_some() {
            let _ = cards
                .publish(subjects::agent_cards(NS), card_copy.clone().into())
                .await;
        }
    });
    let mut requests = client
        .subscribe(subjects::agent_request(NS, "RefAgent"))
        .await
        .unwrap();
    client
        .publish(subjects::agent_cards(NS), card.into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let js = jetstream::new(client.clone());
    tokio::spawn(async move {
        while let Some(msg) = requests.next().await {
            let Some(reply) = msg.reply.clone() else {
                continue;
            };
            let req: Value = serde_json::from_slice(&msg.payload).unwrap();
            let parts = req["params"]["message"]["parts"]
                .as_array()
                .unwrap()
                .clone();
            let request = parts
                .iter()
                .find(|p| {
                    p["data"]["type"]
                        .as_str()
                        .is_some_and(|t| t.ends_with("_request"))
                })
                .expect("a node request")["data"]
                .clone();
            let _ = seen_tx.send(request["type"].as_str().unwrap().to_owned());
            let input = parts
                .iter()
                .find(|p| p["kind"] == "data" && p["data"].get("type").is_none())
                .map(|p| p["data"].clone())
                .unwrap_or(Value::Null);
            let file = request["suggested_output_filename"]
                .as_str()
                .unwrap_or("out.json")
                .to_owned();
            let doubled = json!({"doubled": input["n"].as_i64().unwrap_or(0) * 2});
            let (state, result) = match input["mode"].as_str() {
                Some("garbage") => {
                    let bytes = b"}{ not json at all".to_vec();
                    let h = proof(&msg, &reply, &bytes);
                    client
                        .publish_with_headers(reply, h, bytes.into())
                        .await
                        .unwrap();
                    continue;
                }
                Some("error") => (
                    "failed",
                    json!({"type": "structured_invocation_result", "status": "error",
                           "error_message": "the reference agent refused",
                           "validation_errors": [], "retry_count": 0}),
                ),
                mode => {
                    // Its artifact service: the object store. "stored" writes the plain
                    // name (version 1 by its count); "versioned" writes our layout, v2.
                    let (key, version) = match mode {
                        Some("versioned") => (format!("{file}@v2"), 2),
                        _ => (file.clone(), 1),
                    };
                    let bucket = subjects::artifact_bucket(NS);
                    let store = match js.get_object_store(&bucket).await {
                        Ok(s) => s,
                        Err(_) => js
                            .create_object_store(object_store::Config {
                                bucket: bucket.clone(),
                                ..Default::default()
                            })
                            .await
                            .unwrap(),
                    };
                    let bytes = serde_json::to_vec(&doubled).unwrap();
                    store
                        .put(key.as_str(), &mut bytes.as_slice())
                        .await
                        .unwrap();
                    (
                        "completed",
                        json!({"type": "structured_invocation_result", "status": "success",
                               "output_artifact_ref": {"name": file, "version": version},
                               "retry_count": 0}),
                    )
                }
            };
            let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {
                "kind": "task", "id": req["params"]["message"]["taskId"], "contextId": "c",
                "status": {"state": state, "message": {"kind": "message", "messageId": "m",
                    "role": "agent", "parts": [{"kind": "data", "data": result},
                        {"kind": "text", "text": "result:artifact=x status=success"}]}}}});
            let bytes = serde_json::to_vec(&answer).unwrap();
            let h = proof(&msg, &reply, &bytes);
            client
                .publish_with_headers(reply, h, bytes.into())
                .await
                .unwrap();
        }
    });
    seen_rx
}

/// The `Mesh-Call-Mac` of a reply to `request` published to `subject`, made by hand as
/// `docs/protocol.md` ("Call tokens") says: HMAC-SHA256 keyed by the request's
/// `Mesh-Call-Token`, over `mesh-call-v1\n{subject}\n{hex sha256 of the payload}`.
fn proof(request: &async_nats::Message, subject: &str, payload: &[u8]) -> async_nats::HeaderMap {
    use hmac::Mac;
    use sha2::Digest;
    let token = request
        .headers
        .as_ref()
        .and_then(|h| h.get("Mesh-Call-Token"))
        .expect("a workflow's call carries its token");
    let input = format!(
        "mesh-call-v1\n{subject}\n{}",
        hex::encode(sha2::Sha256::digest(payload))
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_str().as_bytes()).unwrap();
    mac.update(input.as_bytes());
    let mut h = async_nats::HeaderMap::new();
    h.insert(
        "Mesh-Call-Mac",
        hex::encode(mac.finalize().into_bytes()).as_str(),
    );
    h
}

struct Mesh {
    _server: test_harness::NatsServer,
    client: async_nats::Client,
    _node: WorkflowNode,
    seen: mpsc::UnboundedReceiver<String>,
}

async fn mesh(dialect: Dialect) -> Mesh {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let seen = reference_agent(client.clone()).await;
    let wf = parse_str(WORKFLOW, "doubler.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    let config = Config {
        dialect,
        card_wait: Duration::from_secs(10),
        ..Config::default()
    };
    let node = WorkflowNode::start(client.clone(), vec![wf], config)
        .await
        .expect("node");
    Mesh {
        _server: server,
        client,
        _node: node,
        seen,
    }
}

#[tokio::test]
async fn a_reference_agent_works_unchanged_with_a_node_in_either_dialect() {
    for (dialect, sent) in [
        (Dialect::Mesh, "workflow_node_request"),
        (Dialect::Reference, "structured_invocation_request"),
    ] {
        let mut m = mesh(dialect).await;
        for mode in ["stored", "versioned"] {
            let r = invoke(
                &m.client,
                NS,
                "Doubler",
                &json!({"n": 21, "mode": mode}),
                TIMEOUT,
                |_| {},
            )
            .await
            .expect("a result");
            assert_eq!(r.status, "success", "{dialect:?} {mode}: {:?}", r.error);
            assert_eq!(
                r.output,
                Some(json!({"result": {"doubled": 42}})),
                "{dialect:?} {mode}"
            );
            assert_eq!(m.seen.recv().await.as_deref(), Some(sent), "{dialect:?}");
        }
        let r = invoke(
            &m.client,
            NS,
            "Doubler",
            &json!({"n": 1, "mode": "error"}),
            TIMEOUT,
            |_| {},
        )
        .await
        .expect("a result");
        assert_eq!(r.status, "failure");
        let error = r.error.unwrap_or_default();
        assert!(error.contains("the reference agent refused"), "{error}");
    }
}

/// Calls Doubler as a reference workflow would (a `structured_invocation_request` first),
/// and returns the final reply's parts and every progress DataPart.
async fn call_as_reference(client: &async_nats::Client, input: Value) -> (Vec<Value>, Vec<Value>) {
    let reply = client.new_inbox();
    let status = client.new_inbox();
    let mut replies = client.subscribe(reply.clone()).await.unwrap();
    let mut statuses = client.subscribe(status.clone()).await.unwrap();
    let task = format!("t-{}", uuid::Uuid::new_v4().simple());
    let request = json!({"jsonrpc": "2.0", "id": task, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": task, "taskId": task, "role": "user",
            "parts": [
                {"kind": "data", "data": {"type": "structured_invocation_request",
                    "workflow_name": "Outer", "node_id": "call", "input_schema": null,
                    "output_schema": null, "suggested_output_filename": "o.json"}},
                {"kind": "data", "data": input}]}}});
    let mut h = async_nats::HeaderMap::new();
    h.insert(headers::STATUS_TO, status.as_str());
    client
        .publish_with_reply_and_headers(
            subjects::agent_request(NS, "Doubler"),
            reply,
            h,
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    let parts = tokio::time::timeout(TIMEOUT, async {
        loop {
            let msg = replies.next().await.expect("replies");
            let v: Value = serde_json::from_slice(&msg.payload).unwrap();
            if v["result"]["kind"] == "task" {
                return v["result"]["status"]["message"]["parts"]
                    .as_array()
                    .unwrap()
                    .clone();
            }
        }
    })
    .await
    .expect("a final reply");
    // The final progress update went out before the final reply.
    let mut progress = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(0), statuses.next()).await
    {
        let v: Value = serde_json::from_slice(&msg.payload).unwrap();
        for p in v["result"]["status"]["message"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            progress.push(p["data"].clone());
        }
    }
    (parts, progress)
}

#[tokio::test]
async fn a_node_serving_the_reference_dialect_answers_callers_in_its_words() {
    let m = mesh(Dialect::Reference).await;
    let (parts, _) = call_as_reference(&m.client, json!({"n": 2, "mode": "stored"})).await;
    assert_eq!(parts[0]["data"]["type"], "structured_invocation_result");
    assert_eq!(parts[0]["data"]["status"], "success");
    assert_eq!(
        parts[0]["data"]["output"],
        json!({"result": {"doubled": 4}})
    );

    let (parts, progress) = call_as_reference(&m.client, json!({"n": 2, "mode": "error"})).await;
    assert_eq!(parts[0]["data"]["type"], "structured_invocation_result");
    assert_eq!(parts[0]["data"]["status"], "error", "{parts:?}");
    let end = progress
        .iter()
        .find(|d| d["type"] == "workflow_execution_result")
        .unwrap_or_else(|| panic!("no execution result in {progress:?}"));
    assert_eq!(end["status"], "error");

    // Ours, from a node in our dialect, for the same failure.
    let ours = mesh(Dialect::Mesh).await;
    let (parts, _) = call_as_reference(&ours.client, json!({"n": 2, "mode": "error"})).await;
    assert_eq!(parts[0]["data"]["type"], "workflow_node_result");
    assert_eq!(parts[0]["data"]["status"], "failure");
}

#[tokio::test]
async fn garbage_from_an_agent_fails_only_the_run_it_answers() {
    let m = mesh(Dialect::Reference).await;
    let (bad, good) = (
        json!({"n": 1, "mode": "garbage"}),
        json!({"n": 5, "mode": "stored"}),
    );
    let garbage = invoke(&m.client, NS, "Doubler", &bad, TIMEOUT, |_| {});
    let fine = invoke(&m.client, NS, "Doubler", &good, TIMEOUT, |_| {});
    let (garbage, fine) = tokio::join!(garbage, fine);
    let garbage = garbage.expect("a result");
    assert_eq!(garbage.status, "failure");
    let error = garbage.error.unwrap_or_default();
    assert!(error.contains("not a JSON-RPC response"), "{error}");
    let fine = fine.expect("a result");
    assert_eq!(fine.status, "success", "{:?}", fine.error);
    assert_eq!(fine.output, Some(json!({"result": {"doubled": 10}})));
}

/// A `workflow-node serve` child, killed on drop.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_serve_command_with_dialect_reference_speaks_the_references_words() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut seen = reference_agent(client.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("doubler.yaml"), WORKFLOW).expect("workflow");
    let bin = env!("CARGO_BIN_EXE_workflow-node");

    let bad = std::process::Command::new(bin)
        .arg("serve")
        .arg(dir.path())
        .args(["--nats-url", &server.url(), "--dialect", "klingon"])
        .output()
        .expect("serve ran");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(stderr.contains("unknown dialect 'klingon'"), "{stderr}");

    let _serve = Serve(
        std::process::Command::new(bin)
            .arg("serve")
            .arg(dir.path())
            .args(["--nats-url", &server.url(), "--dialect", "reference"])
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve started"),
    );
    // Serving: a probe (`{}`, not a JSON-RPC request) finds a responder, is refused at
    // once and starts no run.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let subject = subjects::agent_request(NS, "Doubler");
    while let Err(e) = client.request(subject.clone(), "{}".into()).await {
        assert!(
            e.kind() == async_nats::RequestErrorKind::NoResponders
                && tokio::time::Instant::now() < deadline,
            "serve never took requests: {e}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let r = invoke(
        &client,
        NS,
        "Doubler",
        &json!({"n": 4, "mode": "stored"}),
        TIMEOUT,
        |_| {},
    )
    .await
    .expect("a result");
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"result": {"doubled": 8}})));
    assert_eq!(
        seen.recv().await.as_deref(),
        Some("structured_invocation_request"),
        "the agent got the reference's request"
    );

    let (parts, progress) = call_as_reference(&client, json!({"n": 2, "mode": "error"})).await;
    assert_eq!(parts[0]["data"]["type"], "structured_invocation_result");
    assert_eq!(parts[0]["data"]["status"], "error", "{parts:?}");
    let end = progress
        .iter()
        .find(|d| d["type"] == "workflow_execution_result")
        .unwrap_or_else(|| panic!("no execution result in {progress:?}"));
    assert_eq!(end["status"], "error");
}
