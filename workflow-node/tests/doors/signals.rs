//! A2A's `input-required` pattern over HTTP with the official Python SDK's client: a
//! workflow run whose wait node waits for a signal is an `input-required` task saying what
//! it waits for, and a `message/send` on that task (A2A 1.0 through the SDK, 0.3 as raw
//! JSON-RPC) delivers the message's data part as the signal; a payload the node's schema
//! refuses is refused with the schema's error. The script asserts; this test checks it ran
//! every check.

use agent_sdk::Signer;
use workflow_node::web::AccessArgs;

use crate::a2a::{card_seen, door, node, script_passes};

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
    let client = async_nats::connect(server.url()).await.unwrap();
    let _node = node(&client, &[ORDER], &operator).await;
    let tokens = AccessArgs {
        operator_tokens: vec!["operator-secret".into()],
        ..AccessArgs::default()
    };
    let web = door(&client, &operator, &tokens).await;
    card_seen(web.addr(), "Order").await;
    let args = [format!("http://{}", web.addr()), "operator-secret".into()];
    let checks = [
        "input-required",
        "refused payload",
        "signal 1.0",
        "ended task",
        "signal 0.3",
    ];
    let what = "the A2A signal script";
    script_passes(
        test_harness::python(),
        "a2a_signal.py",
        &args,
        what,
        &checks,
    )
    .await;
}
