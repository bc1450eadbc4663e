//! The A2A binding over NATS keeps the cards' word (`docs/protocol.md`, "A2A over NATS"):
//! a card claims streaming, so `message/stream` on a workflow's or an agent's request
//! subject streams (status updates to `Mesh-Status-To`, then the final reply), and
//! `tasks/resubscribe`, which NATS does not serve, says how a stream is rejoined instead
//! of "method not found"; and a caller that lost its stream rejoins it by resending the
//! request (`docs/protocol.md`, "Resending"): the rest of the updates and the final reply
//! come to the resend's subjects, all of one task.

use std::sync::Arc;
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use workflow_node::shell::{Config, WorkflowNode};

const GREET: &str = r#"
name: Greet
workflow:
  description: says hello through an agent that talks on the way
  nodes:
    - {id: say, type: agent, agent_name: Talker, input: {text: "{{workflow.input.text}}"}}
  output_mapping: {said: "{{say.output.text}}"}
"#;

/// Sends `body` to `name`'s request subject with a status inbox; the status updates seen
/// before the final reply, and the reply.
/// The agent's words release it (see `talker`).
async fn exchange(
    client: &async_nats::Client,
    name: &str,
    body: &Value,
    said: &Semaphore,
) -> (Vec<Value>, Value) {
    let (reply, status) = (client.new_inbox(), client.new_inbox());
    let mut replies = client.subscribe(reply.clone()).await.unwrap();
    let mut updates = client.subscribe(status.clone()).await.unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(messages::headers::STATUS_TO, status.as_str());
    let subject = messages::subjects::agent_request("mesh", name);
    client
        .publish_with_reply_and_headers(subject, reply, headers, body.to_string().into())
        .await
        .unwrap();
    let wait = async {
        let mut seen = Vec::new();
        loop {
            tokio::select! {
                biased;
                Some(m) = updates.next() => {
                    if String::from_utf8_lossy(&m.payload).contains("thinking about it") {
                        said.add_permits(1);
                    }
                    seen.push(serde_json::from_slice(&m.payload).unwrap());
                }
                Some(m) = replies.next() => {
                    while let Some(Some(m)) = futures::FutureExt::now_or_never(updates.next()) {
                        seen.push(serde_json::from_slice(&m.payload).unwrap());
                    }
                    return (seen, serde_json::from_slice(&m.payload).unwrap());
                }
            }
        }
    };
    tokio::time::timeout(test_harness::http::TIMEOUT, wait)
        .await
        .expect("a final reply")
}

fn stream_request(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "message/stream", "params": {"message": {
        "kind": "message", "messageId": id, "taskId": id, "role": "user",
        "parts": [{"kind": "data", "data": {"text": "hi"}}]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_stream_streams_on_nats_and_resubscribe_says_how_to_rejoin() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    // The agent answers once its words reached the caller: they are then in the stream.
    let said = Arc::new(Semaphore::new(0));
    let gate = said.clone();
    let talker = AgentBuilder::new("Talker")
        .description("talks, then echoes")
        .heartbeat_interval(Duration::from_secs(3600))
        .handler(handler_fn(move |req: NodeRequest| {
            let gate = gate.clone();
            async move {
                req.send_status("thinking about it").await.ok();
                gate.acquire().await.expect("never closed").forget();
                Ok(req.input)
            }
        }));
    let _talker = talker.serve(client.clone()).await.unwrap();
    let greet = workflow_node::definition::parse_str(GREET, "t.yaml").unwrap();
    let _node = WorkflowNode::start(client.clone(), vec![greet], Config::default())
        .await
        .unwrap();

    // A workflow: its progress, then the final reply.
    let (updates, reply) = exchange(&client, "Greet", &stream_request("s-1"), &said).await;
    assert_eq!(reply["result"]["status"]["state"], "completed", "{reply}");
    assert!(
        updates
            .iter()
            .all(|u| u["id"] == "s-1" && u["result"]["kind"] == "status-update"),
        "{updates:?}"
    );
    let text = json!(updates).to_string();
    assert!(text.contains("workflow_execution_start"), "{text}");
    assert!(text.contains("thinking about it"), "{text}");

    // An agent: its words, then its reply.
    let (updates, reply) = exchange(&client, "Talker", &stream_request("s-2"), &said).await;
    assert_eq!(reply["result"]["status"]["state"], "completed", "{reply}");
    assert!(
        json!(updates).to_string().contains("thinking about it"),
        "{updates:?}"
    );

    // Resubscribing is answered with what to do instead, by both.
    for name in ["Greet", "Talker"] {
        let body = json!({"jsonrpc": "2.0", "id": "r", "method": "tasks/resubscribe",
            "params": {"id": "s-1"}});
        let subject = messages::subjects::agent_request("mesh", name);
        let answer = client
            .request(subject, body.to_string().into())
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&answer.payload).unwrap();
        assert_eq!(v["error"]["code"], -32004, "{name}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("resending"),
            "{v}"
        );
    }
}

const TWO_STEPS: &str = r#"
name: TwoSteps
workflow:
  description: two calls of one agent, one after the other
  nodes:
    - {id: one, type: agent, agent_name: Stepper, input: {step: "one"}}
    - {id: two, type: agent, agent_name: Stepper, depends_on: [one], input: {step: "two"}}
  output_mapping: {last: "{{two.output.step}}"}
"#;

/// The next message of `sub` as JSON, within the harness's time.
async fn next_json(sub: &mut async_nats::Subscriber) -> Value {
    let m = tokio::time::timeout(test_harness::http::TIMEOUT, sub.next())
        .await
        .expect("a message in time")
        .expect("the subscription is open");
    serde_json::from_slice(&m.payload).unwrap()
}

/// Reads `updates` until one mentions `words`; all read, in order.
async fn until_said(updates: &mut async_nats::Subscriber, words: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let u = next_json(updates).await;
        let said = u.to_string().contains(words);
        seen.push(u);
        if said {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_lost_its_stream_rejoins_by_resending_the_request() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    // Each call says which step it is, then waits for the test's go.
    let go = Arc::new(Semaphore::new(0));
    let permits = go.clone();
    let stepper = AgentBuilder::new("Stepper")
        .description("says its step, then echoes")
        .heartbeat_interval(Duration::from_secs(3600))
        .handler(handler_fn(move |req: NodeRequest| {
            let permits = permits.clone();
            async move {
                let step = req.input["step"].as_str().unwrap_or_default().to_owned();
                req.send_status(format!("step {step} under way")).await.ok();
                permits.acquire().await.expect("never closed").forget();
                Ok(req.input)
            }
        }));
    let _stepper = stepper.serve(client.clone()).await.unwrap();
    let steps = workflow_node::definition::parse_str(TWO_STEPS, "t.yaml").unwrap();
    let _node = WorkflowNode::start(client.clone(), vec![steps], Config::default())
        .await
        .unwrap();

    let body = stream_request("rejoin-1").to_string();
    let subject = messages::subjects::agent_request("mesh", "TwoSteps");
    let send = |reply: String, status: String| {
        let (client, subject, body) = (client.clone(), subject.clone(), body.clone());
        async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(messages::headers::STATUS_TO, status.as_str());
            client
                .publish_with_reply_and_headers(subject, reply, headers, body.into())
                .await
                .unwrap();
        }
    };
    // The first stream, until the first step is under way; then it is lost.
    let (reply, status) = (client.new_inbox(), client.new_inbox());
    let mut lost_replies = client.subscribe(reply.clone()).await.unwrap();
    let mut lost = client.subscribe(status.clone()).await.unwrap();
    send(reply, status).await;
    let before = until_said(&mut lost, "step one under way").await;
    assert!(json!(before)
        .to_string()
        .contains("workflow_execution_start"));
    lost.unsubscribe().await.unwrap();
    lost_replies.unsubscribe().await.unwrap();

    // The same request again, with a new reply subject and stream.
    let (reply, status) = (client.new_inbox(), client.new_inbox());
    let mut replies = client.subscribe(reply.clone()).await.unwrap();
    let mut updates = client.subscribe(status.clone()).await.unwrap();
    send(reply, status).await;
    // A sign of life says the run took the resend: the rest of the run comes here.
    let mut after = vec![next_json(&mut updates).await];
    go.add_permits(1);
    after.extend(until_said(&mut updates, "step two under way").await);
    go.add_permits(1);
    let reply = next_json(&mut replies).await;
    assert_eq!(reply["id"], "rejoin-1", "{reply}");
    assert_eq!(reply["result"]["status"]["state"], "completed", "{reply}");
    assert!(reply.to_string().contains(r#""last":"two""#), "{reply}");
    assert!(
        after
            .iter()
            .all(|u| u["id"] == "rejoin-1" && u["result"]["kind"] == "status-update"),
        "{after:?}"
    );
    let text = json!(after).to_string();
    assert!(
        text.contains("workflow_node_execution_result"),
        "the first step's end reaches the rejoined stream: {text}"
    );
    assert!(!text.contains("step one under way"), "{text}");
    // One task throughout: the lost stream's, the rejoined one's and the reply's.
    let task = &before[0]["result"]["taskId"];
    assert!(task.is_string(), "{}", before[0]);
    for u in before.iter().chain(&after) {
        assert_eq!(&u["result"]["taskId"], task, "{u}");
    }
    assert_eq!(&reply["result"]["id"], task, "{reply}");
}
