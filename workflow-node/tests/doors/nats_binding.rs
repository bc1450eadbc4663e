//! The A2A binding over NATS keeps the cards' word (`docs/protocol.md`, "A2A over NATS"):
//! a card claims streaming, so `message/stream` on a workflow's or an agent's request
//! subject streams (status updates to `Mesh-Status-To`, then the final reply), and
//! `tasks/resubscribe`, which NATS does not serve, says how a stream is rejoined instead
//! of "method not found".

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
