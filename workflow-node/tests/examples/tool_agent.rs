//! Runs the `tool_agent` example against a real nats-server: the tool agent picks the
//! workflow whose skill tags match the request, calls it as a tool, and answers with its
//! result; a request no workflow fits gets a clear failure.

#[path = "../../examples/tool_agent.rs"]
mod example;

use serde_json::json;

#[tokio::test]
async fn the_tool_agent_chooses_a_workflow_by_its_tags_and_answers_with_its_result() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let answers = example::run(
        client,
        vec![
            json!({"request": "Please double these", "arguments": {"numbers": [1, 2, 3]}}),
            json!({"request": "shout it", "arguments": {"text": "hello"}}),
            json!({"request": "sing a song", "arguments": {}}),
        ],
    )
    .await
    .expect("the example ran");
    assert_eq!(
        answers[0],
        json!({"tool": "Doubling", "result": {"doubled": [{"value": 2}, {"value": 4}, {"value": 6}]}})
    );
    assert_eq!(
        answers[1],
        json!({"tool": "Shouting", "result": {"text": "hello!"}})
    );
    let error = answers[2]["error"].as_str().expect("an error");
    assert!(
        error.contains("no workflow fits \"sing a song\""),
        "{error}"
    );
}
