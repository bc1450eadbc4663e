//! The reference implementation's dialect, from the agent's side, over a real
//! nats-server: an agent built with agent-sdk, called as the reference's workflows call
//! (a `structured_invocation_request` DataPart, raw JSON on the wire), answers in the
//! reference's words (`structured_invocation_result`, status `error` for a failure), and
//! in ours to a caller that used ours.

use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, AgentError, NodeRequest};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

/// `Halver`: `{n}` → `{half: n / 2}`; an odd `n` fails.
fn halver() -> AgentBuilder {
    AgentBuilder::new("Halver")
        .description("Halves an even n")
        .input_schema(json!({"type": "object", "required": ["n"],
                             "properties": {"n": {"type": "integer"}}}))
        .handler(handler_fn(|req: NodeRequest| async move {
            let n = req.input["n"].as_i64().unwrap_or_default();
            if n % 2 != 0 {
                return Err(AgentError::new(format!("{n} is odd")));
            }
            Ok(json!({"half": n / 2}))
        }))
}

/// Calls Halver as a workflow whose request DataPart is of type `request_type`, and
/// returns the final task's first DataPart and its state.
async fn call(client: &async_nats::Client, request_type: &str, input: Value) -> (Value, String) {
    let task = format!("exec1_call_0_{}", uuid::Uuid::new_v4().simple());
    let body = json!({"jsonrpc": "2.0", "id": task, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": task, "taskId": task, "contextId": "exec1",
            "role": "user", "parts": [
                {"kind": "data", "data": {"type": request_type, "workflow_name": "Outer",
                    "node_id": "call", "input_schema": null, "output_schema": null,
                    "suggested_output_filename": "half.json"}},
                {"kind": "data", "data": input}]},
        "metadata": {"workflow_name": "Outer", "node_id": "call", "sub_task_id": task}}});
    let reply = tokio::time::timeout(
        WAIT,
        client.request(
            messages::subjects::agent_request("mesh", "Halver"),
            serde_json::to_vec(&body).unwrap().into(),
        ),
    )
    .await
    .expect("a reply in time")
    .expect("a reply");
    let v: Value = serde_json::from_slice(&reply.payload).expect("JSON");
    let status = &v["result"]["status"];
    let first = status["message"]["parts"][0].clone();
    assert_eq!(first["kind"], "data", "{v}");
    (
        first["data"].clone(),
        status["state"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn an_sdk_agent_answers_a_reference_request_in_the_references_words() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let _agent = halver().serve(client.clone()).await.expect("serve");

    let reference = "structured_invocation_request";
    let (result, state) = call(&client, reference, json!({"n": 8})).await;
    assert_eq!(state, "completed");
    assert_eq!(result["type"], "structured_invocation_result", "{result}");
    assert_eq!(result["status"], "success");
    assert_eq!(result["output"], json!({"half": 4}));

    let (result, state) = call(&client, reference, json!({"n": 3})).await;
    assert_eq!(state, "failed");
    assert_eq!(result["type"], "structured_invocation_result", "{result}");
    assert_eq!(
        result["status"], "error",
        "the reference's word for a failure"
    );
    assert_eq!(result["error_message"], "3 is odd");

    // Input its schema refuses: still the reference's words, with the violations.
    let (result, _) = call(&client, reference, json!({"n": "x"})).await;
    assert_eq!(result["type"], "structured_invocation_result", "{result}");
    assert_eq!(result["status"], "error");
    let violations = result["validation_errors"].as_array().expect("violations");
    assert!(!violations.is_empty(), "{result}");

    // The same agent answers our request in ours.
    let (result, _) = call(&client, "workflow_node_request", json!({"n": 3})).await;
    assert_eq!(result["type"], "workflow_node_result", "{result}");
    assert_eq!(result["status"], "failure");
}
