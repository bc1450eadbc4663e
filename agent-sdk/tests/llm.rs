//! LLM agents over a real nats-server against the scripted OpenAI-compatible provider
//! (`test_harness::openai`): what is sent (model, messages, sampling, the key only in
//! `Authorization`), structured output with one repair, failures the way providers fail,
//! a stalled stream timing out, a cancelled call dropping its HTTP request, streamed text
//! reaching the caller before the answer ends, and the `mesh-agents` binary serving an
//! LLM agent without ever printing its key.

mod common;

use agent_sdk::{serve_stubs, AgentHandle, CallError, Mesh, Progress, StubFile};
use anyhow::Result;
use common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use test_harness::openai::{chunk, stream_end, Gate, Piece, Provider, Reply};
use tokio::io::AsyncBufReadExt;

const KEY: &str = "sk-test-4f9c2a7e1b";

/// A key file holding [`KEY`] (with a newline, as editors write it).
fn key_file() -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), format!("{KEY}\n")).unwrap();
    f
}

/// One LLM agent `Writer` on `provider`; `extra` adds lines under the agent.
fn agents(provider: &Provider, key: &std::path::Path, model_extra: &str, extra: &str) -> String {
    format!(
        r#"
agents:
  - name: Writer
    model:
      base_url: {}
      name: test-model
      api_key_file: {}
      temperature: 0.3
      max_tokens: 64
{model_extra}
    system: You are terse.
    instruction: "Write about {{{{input.topic}}}}"
{extra}
"#,
        provider.base_url(),
        key.display()
    )
}

async fn serve(client: &async_nats::Client, yaml: &str) -> Vec<AgentHandle> {
    let file = StubFile::parse(yaml, "inline").unwrap_or_else(|e| panic!("{e:#?}"));
    serve_stubs(client.clone(), "mesh", file).await.unwrap()
}

async fn call(client: &async_nats::Client, input: Value) -> Result<Value, CallError> {
    Mesh::new(client.clone())
        .agent("Writer")
        .timeout(WAIT)
        .call(input)
        .await
}

fn failure(r: Result<Value, CallError>) -> (String, Option<String>) {
    match r {
        Err(CallError::Failed { message, kind, .. }) => (message, kind),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn the_request_carries_the_declared_model_and_the_key_only_in_authorization() {
    let (_server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let key = key_file();
    let _agents = serve(&client, &agents(&provider, key.path(), "", "")).await;
    provider.push(Reply::text("Rivers run."));
    let out = call(&client, json!({"topic": "rivers"})).await.unwrap();
    assert_eq!(out, json!({"text": "Rivers run."}));

    let sent = provider.wait_requests(1).await;
    assert_eq!(sent.len(), 1);
    let r = &sent[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(r.body["model"], "test-model");
    assert_eq!(r.body["temperature"], 0.3);
    assert_eq!(r.body["max_tokens"], 64);
    assert_eq!(
        r.body["messages"],
        json!([{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "Write about rivers"}])
    );
    assert!(r.body.get("stream").is_none(), "{}", r.body);
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(
        !r.all_but_authorization().contains(KEY),
        "{}",
        r.all_but_authorization()
    );
}

#[tokio::test]
async fn structured_output_is_asked_for_repaired_once_then_fails_naming_what_was_wrong() {
    let (_server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let key = key_file();
    let schema =
        "    output_schema: {type: object, required: [title], properties: {title: {type: string}}}";
    let _agents = serve(&client, &agents(&provider, key.path(), "", schema)).await;

    // Off-schema, then repaired.
    provider.push(Reply::text(r#"{"title": 7}"#));
    provider.push(Reply::text("```json\n{\"title\": \"Rivers\"}\n```"));
    let out = call(&client, json!({"topic": "rivers"})).await.unwrap();
    assert_eq!(out, json!({"title": "Rivers"}));
    let sent = provider.wait_requests(2).await;
    assert_eq!(sent[0].body["response_format"]["type"], "json_schema");
    assert_eq!(
        sent[0].body["response_format"]["json_schema"]["schema"]["required"],
        json!(["title"])
    );
    let repair = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(repair.len(), 4, "{repair:?}");
    assert_eq!(
        repair[2],
        json!({"role": "assistant", "content": r#"{"title": 7}"#})
    );
    let feedback = repair[3]["content"].as_str().unwrap();
    assert!(feedback.contains("output/title"), "{feedback}");

    // Wrong twice: one repair only, then output_validation naming the fault.
    provider.push(Reply::text("not json"));
    provider.push(Reply::text(r#"{"name": "x"}"#));
    let (message, kind) = failure(call(&client, json!({"topic": "lakes"})).await);
    assert_eq!(kind.as_deref(), Some("output_validation"));
    assert!(
        message.contains("\"title\" is a required property"),
        "{message}"
    );
    assert_eq!(provider.wait_requests(4).await.len(), 4);
}

#[tokio::test]
async fn provider_failures_become_error_kinds_with_the_providers_message() {
    let (_server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let key = key_file();
    let _agents = serve(&client, &agents(&provider, key.path(), "", "")).await;
    let input = json!({"topic": "x"});

    provider.push(Reply::rate_limited(7));
    let (message, kind) = failure(call(&client, input.clone()).await);
    assert_eq!(kind.as_deref(), Some("transient"));
    assert!(
        message.contains("429") && message.contains("retry after 7 s"),
        "{message}"
    );

    provider.push(Reply::error(503, "overloaded", "server_error"));
    assert_eq!(
        failure(call(&client, input.clone()).await).1.as_deref(),
        Some("transient")
    );

    provider.push(Reply::error(
        400,
        "This model's maximum context length is 8192 tokens",
        "context_length_exceeded",
    ));
    let (message, kind) = failure(call(&client, input.clone()).await);
    assert_eq!(kind.as_deref(), Some("permanent"));
    assert!(message.contains("maximum context length"), "{message}");

    // A provider echoing the key gets it redacted.
    provider.push(Reply::error(
        401,
        &format!("Incorrect API key provided: {KEY}"),
        "invalid_api_key",
    ));
    let (message, kind) = failure(call(&client, input.clone()).await);
    assert_eq!(kind.as_deref(), Some("permanent"));
    assert!(
        !message.contains(KEY) && message.contains("[redacted]"),
        "{message}"
    );

    provider.push(Reply::Raw {
        status: 200,
        content_type: "text/html".into(),
        body: "<html>gateway</html>".into(),
    });
    let (message, kind) = failure(call(&client, input.clone()).await);
    assert_eq!(kind.as_deref(), Some("provider_error"));
    assert!(
        message.contains("not JSON") && message.contains("<html>"),
        "{message}"
    );
}

#[tokio::test]
async fn streams_that_break_stall_or_carry_an_error_fail_clearly() {
    let (_server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let key = key_file();
    let yaml = agents(
        &provider,
        key.path(),
        "      stream: true\n      timeout: 1s",
        "",
    );
    let _agents = serve(&client, &yaml).await;
    let input = json!({"topic": "x"});

    provider.push(Reply::Stream(vec![Piece::Event(chunk(
        json!({"content": "Hi"}),
        None,
    ))]));
    let (message, kind) = failure(call(&client, input.clone()).await);
    assert_eq!(kind.as_deref(), Some("provider_error"));
    assert!(message.contains("ended before `data: [DONE]`"), "{message}");

    provider.push(Reply::Stream(vec![Piece::Event(
        json!({"error": {"message": "model crashed"}}),
    )]));
    let (message, _) = failure(call(&client, input.clone()).await);
    assert!(message.contains("model crashed"), "{message}");

    provider.push(Reply::Stream(vec![Piece::Raw("data: {broken\n\n".into())]));
    let (message, kind) = failure(call(&client, input.clone()).await);
    assert_eq!(kind.as_deref(), Some("provider_error"));
    assert!(message.contains("not JSON"), "{message}");

    provider.push(Reply::Stream(vec![
        Piece::Event(chunk(json!({"content": "Hi"}), None)),
        Piece::Stall,
    ]));
    let (message, kind) = failure(call(&client, input.clone()).await);
    assert_eq!(kind.as_deref(), Some("timeout"), "{message}");
    // The stalled request was dropped, not left open.
    provider.wait_aborted().await;
}

#[tokio::test]
async fn a_cancelled_call_drops_its_http_request() {
    let (_server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let key = key_file();
    let yaml = agents(&provider, key.path(), "      stream: true", "");
    let _agents = serve(&client, &yaml).await;
    provider.push(Reply::Stream(vec![Piece::Stall]));
    let call = Mesh::new(client.clone())
        .agent("Writer")
        .timeout(WAIT)
        .call(json!({"topic": "x"}));
    provider.wait_requests(1).await;
    assert_eq!(provider.aborted(), 0);
    match call.cancel().await {
        Err(CallError::Canceled { .. }) => {}
        other => panic!("expected a cancel, got {other:?}"),
    }
    provider.wait_aborted().await;
}

#[tokio::test]
async fn streamed_text_reaches_the_caller_before_the_answer_ends() {
    let (_server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let key = key_file();
    let yaml = agents(&provider, key.path(), "      stream: true", "");
    let _agents = serve(&client, &yaml).await;
    let gate = Gate::new();
    let mut pieces = vec![
        Piece::Event(chunk(json!({"role": "assistant", "content": ""}), None)),
        Piece::Event(chunk(json!({"content": "Hel"}), None)),
        Piece::Event(chunk(json!({"content": "lo"}), None)),
        Piece::Wait(gate.clone()),
        Piece::Event(chunk(json!({"content": " world"}), None)),
    ];
    pieces.extend(stream_end("stop"));
    provider.push(Reply::Stream(pieces));
    let mut call = Mesh::new(client.clone())
        .agent("Writer")
        .timeout(WAIT)
        .call(json!({"topic": "x"}));
    let mut progress = call.progress();
    // The answer cannot end before the gate opens: this text came while it was written.
    let seen = tokio::time::timeout(WAIT, async {
        let mut text = String::new();
        while let Some(p) = progress.next().await {
            if let Progress::Status { text: t, .. } = p {
                text.push_str(&t);
                if text == "Hello" {
                    return text;
                }
            }
        }
        panic!("the call ended before its text was streamed: {text:?}");
    })
    .await
    .expect("streamed text in time");
    assert_eq!(seen, "Hello");
    gate.open();
    assert_eq!(call.await.unwrap(), json!({"text": "Hello world"}));
    let sent = provider.wait_requests(1).await;
    assert_eq!(sent[0].body["stream"], true);
    assert_eq!(sent[0].body["stream_options"]["include_usage"], true);
}

/// Reads a child's stderr to the end.
async fn stderr_of(child: &mut tokio::process::Child) -> String {
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut out = String::new();
    while let Ok(Ok(Some(line))) = tokio::time::timeout(WAIT, lines.next_line()).await {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn the_agents_binary_serves_an_llm_agent_and_never_prints_its_key() {
    let (server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agents.yaml");
    let yaml = agents(&provider, std::path::Path::new("unused"), "", "")
        .replace("api_key_file: unused", "api_key_env: WRITER_KEY");
    std::fs::write(&path, yaml).unwrap();
    let command = |key: Option<&str>| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh-agents"));
        c.arg(&path)
            .args(["--nats-url", &server.url()])
            .env("RUST_LOG", "trace")
            .env_remove("WRITER_KEY")
            .kill_on_drop(true)
            .stderr(std::process::Stdio::piped());
        if let Some(k) = key {
            c.env("WRITER_KEY", k);
        }
        c
    };

    // Without its key it does not start, and says which variable is missing.
    let mut child = command(None).spawn().unwrap();
    let said = stderr_of(&mut child).await;
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(said.contains("WRITER_KEY is not set"), "{said}");

    let mut child = command(Some(KEY)).spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = String::new();
    loop {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("mesh-agents says something")
            .unwrap()
            .expect("mesh-agents starts serving");
        said.push_str(&line);
        said.push('\n');
        if line.contains("serving Writer") {
            break;
        }
    }
    provider.push(Reply::text("ok"));
    provider.push(Reply::error(
        401,
        &format!("bad key {KEY}"),
        "invalid_api_key",
    ));
    assert_eq!(
        call(&client, json!({"topic": "x"})).await.unwrap(),
        json!({"text": "ok"})
    );
    let (message, _) = failure(call(&client, json!({"topic": "y"})).await);
    assert!(!message.contains(KEY), "{message}");
    // The card says nothing of the key either.
    let catalog = Mesh::new(client.clone()).catalog().await.unwrap();
    let card = catalog
        .wait_for("Writer", WAIT)
        .await
        .expect("the card in time");
    assert!(!serde_json::to_string(&card).unwrap().contains(KEY));
    child.start_kill().unwrap();
    while let Ok(Ok(Some(line))) = tokio::time::timeout(WAIT, lines.next_line()).await {
        said.push_str(&line);
        said.push('\n');
    }
    assert!(said.contains("serving Writer"), "{said}");
    assert!(!said.contains(KEY), "the key was printed: {said}");
}

#[tokio::test]
async fn the_model_calls_mesh_agents_as_tools_in_parallel_and_sees_their_errors() {
    let (_server, client) = setup().await.unwrap();
    let provider = Provider::start().await;
    let key = key_file();
    let stub = r#"
  - name: Doubler
    description: Doubles a number
    input_schema: {type: object, required: [value], properties: {value: {type: number}}}
    output: {value: "{{input.value * 2}}"}
"#;
    let extra = "    tools: [Doubler, Writer]\n    max_tool_rounds: 2";
    let yaml = format!("{}{stub}", agents(&provider, key.path(), "", extra));
    let _agents = serve(&client, &yaml).await;

    // Round 1: two calls at once, one with arguments off the schema; round 2: the answer.
    provider.push(Reply::tool_calls(&[
        ("call_a", "Doubler", r#"{"value": 4}"#),
        ("call_b", "Doubler", r#"{"value": "four"}"#),
    ]));
    provider.push(Reply::text("4 doubled is 8"));
    let out = call(&client, json!({"topic": "doubling"})).await.unwrap();
    assert_eq!(out, json!({"text": "4 doubled is 8"}));

    let sent = provider.wait_requests(2).await;
    // Offered: Doubler, declared from its card; never the agent itself.
    let tools = sent[0].body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["function"]["name"], "Doubler");
    assert_eq!(
        tools[0]["function"]["parameters"]["required"],
        json!(["value"])
    );
    let messages = sent[1].body["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 3]["tool_calls"][0]["id"], "call_a");
    assert_eq!(
        messages[n - 2],
        json!({"role": "tool", "tool_call_id": "call_a", "content": r#"{"value":8}"#})
    );
    assert_eq!(messages[n - 1]["tool_call_id"], "call_b");
    let error = messages[n - 1]["content"].as_str().unwrap();
    assert!(
        error.contains("error") && error.contains("arguments/value"),
        "{error}"
    );

    // A model that keeps asking for tools is stopped after max_tool_rounds.
    for _ in 0..3 {
        provider.push(Reply::tool_calls(&[("c", "Doubler", r#"{"value": 1}"#)]));
    }
    let (message, kind) = failure(call(&client, json!({"topic": "loop"})).await);
    assert_eq!(kind.as_deref(), Some("tool_rounds_exceeded"), "{message}");
    assert_eq!(provider.wait_requests(5).await.len(), 5);
}

/// An LLM agent `Writer` served by `mesh-agents` (with `capture` as the content-capture
/// variable's value, when given) calls its tool `Doubler` once and answers "four" to the
/// topic "secret-topic"; the spans exported when it stops.
async fn traced_tool_call(capture: Option<&str>) -> Vec<test_harness::otlp::Span> {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let provider = Provider::start().await;
    let receiver = test_harness::otlp::Receiver::start().await;
    let key = key_file();
    let stub = r#"
  - name: Doubler
    input_schema: {type: object, required: [value], properties: {value: {type: number}}}
    output: {value: "{{input.value * 2}}"}
"#;
    let yaml = format!(
        "{}{stub}",
        agents(&provider, key.path(), "", "    tools: [Doubler]")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agents.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh-agents"));
    child
        .arg(&path)
        .args(["--nats-url", &server.url()])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .env_remove(agent_sdk::llm::CAPTURE_CONTENT_ENV)
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped());
    if let Some(value) = capture {
        child.env(agent_sdk::llm::CAPTURE_CONTENT_ENV, value);
    }
    let mut child = child.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("mesh-agents says something")
            .unwrap()
            .expect("mesh-agents starts serving");
        if line.contains("serving Doubler") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    provider.push(Reply::tool_calls(&[("c1", "Doubler", r#"{"value": 2}"#)]));
    provider.push(Reply::text("four"));
    let out = call(&client, json!({"topic": "secret-topic"}))
        .await
        .unwrap();
    assert_eq!(out, json!({"text": "four"}));
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("mesh-agents stops on SIGTERM")
        .unwrap();

    receiver
        .wait_for_spans(WAIT, |spans| {
            let chats = spans.iter().filter(|s| s.name == "chat test-model").count();
            let doubler = spans
                .iter()
                .any(|s| s.name == "agent.handle" && s.attr("agent.name") == Some("Doubler"));
            (chats == 2 && doubler).then(|| spans.to_vec())
        })
        .await
        .unwrap_or_else(|spans| panic!("no model and tool spans: {spans:#?}"))
}

#[tokio::test]
async fn model_and_tool_calls_are_spans_after_the_genai_conventions_without_prompts() {
    let spans = traced_tool_call(None).await;
    let handle = spans
        .iter()
        .find(|s| s.name == "agent.handle" && s.attr("agent.name") == Some("Writer"))
        .expect("the LLM agent's handler span");
    for chat in spans.iter().filter(|s| s.name == "chat test-model") {
        assert_eq!(
            chat.parent_span_id.as_deref(),
            Some(handle.span_id.as_str())
        );
        assert_eq!(chat.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.attr("gen_ai.request.model"), Some("test-model"));
        assert_eq!(chat.attr("gen_ai.usage.input_tokens"), Some("10"));
        assert_eq!(chat.attr("gen_ai.usage.output_tokens"), Some("5"));
    }
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool Doubler")
        .expect("the tool call's span");
    assert_eq!(
        tool.parent_span_id.as_deref(),
        Some(handle.span_id.as_str())
    );
    assert_eq!(tool.attr("gen_ai.tool.call.id"), Some("c1"));
    // The tool's own handler joins the trace under the tool call.
    let doubler = spans
        .iter()
        .find(|s| s.name == "agent.handle" && s.attr("agent.name") == Some("Doubler"))
        .unwrap();
    assert_eq!(doubler.trace_id, handle.trace_id);
    // No prompt, completion or key in any span.
    for s in &spans {
        let text = format!("{:?}", s.attributes);
        assert!(
            !text.contains("secret-topic") && !text.contains("four") && !text.contains(KEY),
            "{s:#?}"
        );
    }
}

#[tokio::test]
async fn with_content_capture_on_model_spans_carry_prompts_and_completions() {
    let spans = traced_tool_call(Some("span_only")).await;
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "chat test-model")
        .collect();
    let input = |s: &test_harness::otlp::Span| -> Value {
        serde_json::from_str(s.attr("gen_ai.input.messages").expect("input messages")).unwrap()
    };
    let output = |s: &test_harness::otlp::Span| -> Value {
        serde_json::from_str(s.attr("gen_ai.output.messages").expect("output messages")).unwrap()
    };
    let first = chats
        .iter()
        .find(|s| input(s).as_array().unwrap().len() == 2)
        .expect("the first model call: system and user messages");
    assert_eq!(
        input(first)[1],
        json!({"role": "user", "parts": [{"type": "text", "content": "Write about secret-topic"}]})
    );
    assert_eq!(
        output(first)[0]["parts"][0],
        json!({"type": "tool_call", "id": "c1", "name": "Doubler", "arguments": {"value": 2}})
    );
    let second = chats
        .iter()
        .find(|s| input(s).as_array().unwrap().len() == 4)
        .expect("the second model call: with the tool's answer");
    assert_eq!(input(second)[3]["role"], "tool");
    assert_eq!(
        output(second),
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "four"}], "finish_reason": "stop"}])
    );
    // The key is in no span, recorded content or not.
    for s in &spans {
        assert!(!format!("{:?}", s.attributes).contains(KEY), "{s:#?}");
    }
}

/// Against a real endpoint when `OPENAI_BASE_URL` (a hosted API over `https://`, or a
/// local llama.cpp server or LiteLLM proxy) is set, with `OPENAI_API_KEY` if it needs one and
/// `OPENAI_MODEL` (default `gpt-4o-mini`); otherwise it says it was skipped.
#[tokio::test]
async fn a_real_endpoint_answers_when_one_is_configured() {
    let Ok(base_url) = std::env::var("OPENAI_BASE_URL") else {
        eprintln!("skipped: OPENAI_BASE_URL is not set (no real endpoint configured)");
        return;
    };
    let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
    let key = match std::env::var("OPENAI_API_KEY") {
        Ok(_) => "      api_key_env: OPENAI_API_KEY\n",
        Err(_) => "",
    };
    let yaml = format!(
        r#"
agents:
  - name: Writer
    model:
      base_url: {base_url}
      name: {model}
{key}      max_tokens: 64
    instruction: "Answer with a JSON object with one field, answer, whose value is the number {{{{input.n}}}} plus one."
    output_schema: {{type: object, required: [answer], properties: {{answer: {{type: number}}}}}}
"#
    );
    let (_server, client) = setup().await.unwrap();
    let _agents = serve(&client, &yaml).await;
    let out = Mesh::new(client.clone())
        .agent("Writer")
        .timeout(std::time::Duration::from_secs(120))
        .call(json!({"n": 41}))
        .await
        .unwrap();
    assert!(out["answer"].is_number(), "{out}");
}
