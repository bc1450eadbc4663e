//! The node's limits over a real nats-server: a request too large or
//! nested too deep, a call depth that is not a number or too large, an agent's output
//! nested too deep, an input a template would nest too deep, a map with too many items.
//! Each is refused or fails its node with an error that names the limit, and a refused
//! request starts nothing.

use std::time::Duration;

use agent_sdk::workflow::invoke;
use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use messages::a2a::{Message, Role};
use messages::jsonrpc::{codes, Request};
use messages::{headers, subjects};
use serde_json::{json, Value};
use workflow_node::limits::{Limits, MAX_JSON_DEPTH};
use workflow_node::shell::{run::names, Config, WorkflowNode};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request the node of these tests takes.
const MAX_REQUEST: usize = 300 * 1024;

const ECHO: &str = r#"
name: EchoFlow
workflow:
  description: one agent
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {v: "{{workflow.input.v}}"}}
  output_mapping: {v: "{{echo.output.v}}"}
"#;

const WRAP: &str = r#"
name: Wrap
workflow:
  description: nests its input two levels deeper
  nodes:
    - {id: wrap, type: agent, agent_name: Echo, input: {a: {b: "{{workflow.input.v}}"}}}
  output_mapping: {v: "{{wrap.output}}"}
"#;

const DEEP: &str = r#"
name: DeepCall
workflow:
  description: calls an agent that answers too deep
  nodes:
    - {id: deep, type: agent, agent_name: Deep}
  output_mapping: {v: "{{deep.output}}"}
"#;

const EACH: &str = r#"
name: Each
workflow:
  description: a map of at most three items
  nodes:
    - {id: each, type: map, items: "{{workflow.input.items}}", node: one, max_items: 3}
    - {id: one, type: agent, agent_name: Echo, input: {v: "{{_map_item}}"}}
  output_mapping: {results: "{{each.output.results}}"}
"#;

fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = json!([v]);
    }
    v
}

struct Mesh {
    _server: test_harness::NatsServer,
    client: async_nats::Client,
    _node: WorkflowNode,
    _agents: Vec<agent_sdk::AgentHandle>,
}

async fn mesh() -> Mesh {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let echo = AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let deep = AgentBuilder::new("Deep")
        .description("answers with a value nested too deep")
        .handler(handler_fn(|_req: NodeRequest| async move {
            Ok(nested(MAX_JSON_DEPTH + 6))
        }));
    let mut agents = Vec::new();
    for a in [echo, deep] {
        agents.push(a.serve(client.clone()).await.expect("agent"));
    }
    let workflows = [ECHO, WRAP, DEEP, EACH]
        .iter()
        .map(|y| workflow_node::definition::parse_str(y, "t.yaml").expect("valid"))
        .collect();
    let config = Config {
        limits: Limits {
            max_request_bytes: MAX_REQUEST,
        },
        ..Config::default()
    };
    let node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .expect("node");
    Mesh {
        _server: server,
        client,
        _node: node,
        _agents: agents,
    }
}

impl Mesh {
    /// Sends `payload` to `workflow` with `headers`; the node's immediate answer.
    async fn request(&self, workflow: &str, payload: Vec<u8>, h: async_nats::HeaderMap) -> Value {
        let reply = tokio::time::timeout(
            TIMEOUT,
            self.client.request_with_headers(
                subjects::agent_request("mesh", workflow),
                h,
                payload.into(),
            ),
        )
        .await
        .expect("answered in time")
        .expect("answered");
        serde_json::from_slice(&reply.payload).expect("a JSON answer")
    }

    /// Events stored in `workflow`'s stream: a refused request stores none.
    async fn events(&self, workflow: &str) -> u64 {
        let js = async_nats::jetstream::new(self.client.clone());
        let mut stream = js
            .get_stream(names::event_stream("mesh", workflow))
            .await
            .expect("stream");
        stream.info().await.expect("info").state.messages
    }
}

/// A `message/send` with `input`, as bytes.
fn start(input: Value) -> Vec<u8> {
    let message = Message::new("m-1", Role::User, vec![messages::payload::wrap(input)]);
    serde_json::to_vec(&Request::message_send("r-1", message)).unwrap()
}

/// The text of a failed task's status message, or of a JSON-RPC error.
fn refusal(answer: &Value) -> String {
    if let Some(e) = answer.get("error") {
        return e["message"].as_str().unwrap_or_default().to_string();
    }
    assert_eq!(answer["result"]["status"]["state"], "failed", "{answer}");
    answer["result"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn requests_over_a_limit_are_refused_and_start_nothing() {
    let m = mesh().await;
    let none = async_nats::HeaderMap::new;

    // Larger than max_request_bytes: refused before it is read.
    let big = start(json!({"v": "x".repeat(MAX_REQUEST)}));
    let answer = m.request("EchoFlow", big.clone(), none()).await;
    assert_eq!(answer["error"]["code"], codes::INVALID_REQUEST, "{answer}");
    assert_eq!(
        refusal(&answer),
        format!(
            "a request of {} bytes exceeds max_request_bytes ({MAX_REQUEST})",
            big.len()
        )
    );

    // An input nested deeper than max_json_depth.
    let answer = m
        .request(
            "EchoFlow",
            start(json!({"v": nested(MAX_JSON_DEPTH)})),
            none(),
        )
        .await;
    assert_eq!(
        refusal(&answer),
        "the nesting depth of the input exceeds max_json_depth (64)"
    );

    // 100 000 levels: more than the JSON reader takes.
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let answer = m.request("EchoFlow", deep.into_bytes(), none()).await;
    assert_eq!(answer["error"]["code"], codes::PARSE_ERROR, "{answer}");
    assert!(
        refusal(&answer).contains("the JSON nests deeper than 128 levels"),
        "{answer}"
    );

    // A call depth that is not a number, or too large.
    for (depth, says) in [
        ("abc", "Mesh-Call-Depth 'abc' is not a call depth"),
        (
            "99999999999",
            "Mesh-Call-Depth '99999999999' is not a call depth",
        ),
        (
            "11",
            "call depth 11 exceeds max_call_depth (10) of EchoFlow",
        ),
    ] {
        let mut h = async_nats::HeaderMap::new();
        h.insert(headers::CALL_DEPTH, depth);
        let answer = m.request("EchoFlow", start(json!({"v": 1})), h).await;
        assert_eq!(refusal(&answer), says);
    }

    assert_eq!(
        m.events("EchoFlow").await,
        0,
        "a refused request stored an event"
    );

    // Within every limit, the same workflow runs.
    let r = invoke(
        &m.client,
        "mesh",
        "EchoFlow",
        &json!({"v": nested(MAX_JSON_DEPTH - 2)}),
        TIMEOUT,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"v": nested(MAX_JSON_DEPTH - 2)})));
}

#[tokio::test]
async fn values_nested_too_deep_fail_their_node_with_the_limit_named() {
    let m = mesh().await;
    let r = invoke(&m.client, "mesh", "DeepCall", &json!({}), TIMEOUT, |_| {})
        .await
        .unwrap();
    assert_eq!(r.status, "failure");
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("the nesting depth of the output exceeds max_json_depth (64)"),
        "{error}"
    );

    // The input is within the limit; the template nests it two levels deeper.
    let input = json!({"v": nested(MAX_JSON_DEPTH - 1)});
    let r = invoke(&m.client, "mesh", "Wrap", &input, TIMEOUT, |_| {})
        .await
        .unwrap();
    assert_eq!(r.status, "failure");
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("nesting depth of the value a template resolves to exceeds the limit of 64"),
        "{error}"
    );
}

#[tokio::test]
async fn a_map_with_more_items_than_its_limit_fails_with_the_count() {
    let m = mesh().await;
    let r = invoke(
        &m.client,
        "mesh",
        "Each",
        &json!({"items": [1, 2, 3]}),
        TIMEOUT,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.status, "success", "{:?}", r.error);
    let r = invoke(
        &m.client,
        "mesh",
        "Each",
        &json!({"items": [1, 2, 3, 4]}),
        TIMEOUT,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.status, "failure");
    let error = r.error.unwrap_or_default();
    assert!(error.contains("4 items exceed max_items (3)"), "{error}");
}
