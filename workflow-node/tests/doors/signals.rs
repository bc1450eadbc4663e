//! A2A's `input-required` pattern over HTTP with the official Python SDK's client: a
//! workflow run whose wait node waits for a signal is an `input-required` task saying what
//! it waits for, and a `message/send` on that task (A2A 1.0 through the SDK, 0.3 as raw
//! JSON-RPC) delivers the message's data part as the signal; a payload the node's schema
//! refuses is refused with the schema's error. The script asserts; this test checks it ran
//! every check.

use std::net::SocketAddr;
use std::path::PathBuf;

use agent_sdk::Signer;
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, AccessArgs, Web};

const ORDER: &str = r#"
name: Order
workflow:
  description: waits for the payment of an order
  input_schema:
    type: object
    properties: {text: {type: string}}
    required: [text]
  nodes:
    - id: paid
      type: wait
      signal: payment
      schema: {type: object, required: [amount], properties: {amount: {type: number}}}
      timeout: 1h
  output_mapping: {amount: "{{paid.output.data.amount}}", order: "{{workflow.input.text}}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_on_an_input_required_task_is_the_signal_its_run_waits_for() {
    let server = test_harness::nats();
    let operator = Signer::generate();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let workflows = vec![workflow_node::definition::parse_str(ORDER, "t.yaml").unwrap()];
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    let tokens = AccessArgs {
        operator_tokens: vec!["operator-secret".into()],
        ..AccessArgs::default()
    };
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let access = Access::new(&tokens).unwrap();
    let web = Web::start(client.clone(), "mesh", Some(operator), access, addr)
        .await
        .unwrap();
    crate::a2a::card_seen(web.addr(), "Order").await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/doors/a2a_signal.py");
    let out = tokio::process::Command::new(test_harness::python())
        .arg(script)
        .arg(format!("http://{}", web.addr()))
        .arg("operator-secret")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(240), out)
        .await
        .expect("the A2A signal script finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the A2A signal script failed:\n{stdout}\n{stderr}"
    );
    for check in [
        "input-required",
        "refused payload",
        "signal 1.0",
        "ended task",
        "signal 0.3",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("ok {check}")),
            "check {check:?} did not pass:\n{stdout}\n{stderr}"
        );
    }
}
