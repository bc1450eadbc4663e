//! A2A over HTTP (`docs/a2a.md`) with the official Python SDK's client (`a2a-sdk` 1.x:
//! A2A 1.0, and 0.3 through its compatibility transport) and raw JSON-RPC for what the
//! SDK would never send: discovery by card, send, stream, get, cancel, resubscribe after
//! dropping a stream, list, and hostile input (a body too large, bad JSON, an unknown
//! method, a read token that sends, no token, a task of another workflow) answered with
//! A2A's errors. The script asserts; this test checks it ran every check.

use std::net::SocketAddr;
use std::path::PathBuf;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest, Signer};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, AccessArgs, Web};

const GREET: &str = r#"
name: Greet
workflow:
  description: says hello through an agent that talks on the way
  input_schema:
    type: object
    properties: {text: {type: string}}
    required: [text]
  nodes:
    - {id: say, type: agent, agent_name: Talker, input: {text: "{{workflow.input.text}}"}}
  output_mapping: {said: "{{say.output.text}}"}
"#;

const GATE: &str = r#"
name: Gate
workflow:
  description: an agent, then an approval that waits
  input_schema:
    type: object
    properties: {text: {type: string}}
    required: [text]
  nodes:
    - {id: first, type: agent, agent_name: Talker, input: {text: "{{workflow.input.text}}"}}
    - {id: gate, type: approval, depends_on: [first], message: "ok to go?", timeout: 1h}
  output_mapping: {went: "{{first.output.text}}"}
"#;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/doors/a2a_client.py")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_a2a_client_drives_workflows_over_http() {
    let server = test_harness::nats();
    let operator = Signer::generate();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let talker = AgentBuilder::new("Talker")
        .description("says what it does, then echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move {
            req.send_status("thinking about it").await.ok();
            Ok(req.input)
        }));
    let _talker = talker.serve(client.clone()).await.unwrap();
    let workflows = [GREET, GATE]
        .iter()
        .map(|y| workflow_node::definition::parse_str(y, "t.yaml").unwrap())
        .collect();
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    let tokens = AccessArgs {
        read_tokens: vec!["reader-secret".into()],
        operator_tokens: vec!["operator-secret".into()],
        ..AccessArgs::default()
    };
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(
        client.clone(),
        "mesh",
        Some(operator),
        Access::new(&tokens).unwrap(),
        addr,
    )
    .await
    .unwrap();
    let out = tokio::process::Command::new(test_harness::python())
        .arg(script())
        .arg(format!("http://{}", web.addr()))
        .args(["reader-secret", "operator-secret"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(240), out)
        .await
        .expect("the A2A client script finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the A2A client script failed:\n{stdout}\n{stderr}"
    );
    for check in [
        "card",
        "send",
        "stream",
        "get",
        "resubscribe",
        "cancel",
        "list",
        "v0.3 send",
        "v0.3 stream",
        "hostile",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("ok {check}")),
            "check {check:?} did not pass:\n{stdout}\n{stderr}"
        );
    }
}
