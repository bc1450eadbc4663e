//! A workflow calling an LLM agent, as a user runs it: `workflow-node run --agents FILE`
//! (the agents file declaring the LLM agent, its key from an environment variable) against
//! the scripted OpenAI-compatible provider. The provider first answers 429, which the
//! node's retry strategy retries; the second answer streams, and its text shows on `run`'s
//! progress before the answer ends. The key appears in no output.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use test_harness::openai::{chunk, stream_end, Gate, Piece, Provider, Reply};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const KEY: &str = "sk-cli-9d3e71c04a";
const WAIT: Duration = Duration::from_secs(60);

const WORKFLOW: &str = r#"
name: WriteUp
workflow:
  description: Writes about a topic with an LLM agent.
  input_schema: {type: object, required: [topic], properties: {topic: {type: string}}}
  nodes:
    - id: write
      type: agent
      agent_name: Writer
      input: {topic: "{{workflow.input.topic}}"}
      retry_strategy:
        limit: 1
        retry_policy: OnFailure
        backoff: {duration: 10ms}
        non_retryable_errors: [permanent, output_validation]
  output_mapping:
    text: "{{write.output.text}}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_retries_a_429_and_streams_its_llm_agents_answer_to_run() {
    let provider = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("workflows")).unwrap();
    std::fs::write(dir.path().join("workflows/write_up.yaml"), WORKFLOW).unwrap();
    let agents = format!(
        r#"
agents:
  - name: Writer
    model:
      base_url: {}
      name: test-model
      api_key_env: WRITER_KEY
      stream: true
    instruction: "Write about {{{{input.topic}}}}"
"#,
        provider.base_url()
    );
    std::fs::write(dir.path().join("agents.yaml"), agents).unwrap();

    provider.push(Reply::rate_limited(1));
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

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .args(["run", "WriteUp", "--input", r#"{"topic": "rivers"}"#])
        .arg("--workflows")
        .arg(dir.path().join("workflows"))
        .arg("--agents")
        .arg(dir.path().join("agents.yaml"))
        .env_remove("NATS_URL")
        .env("WRITER_KEY", KEY)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = String::new();
    // The streamed text, while the answer is held back at the gate.
    let mut streamed = String::new();
    tokio::time::timeout(WAIT, async {
        while streamed != "Hello" {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("run ended before streaming: {stderr}"));
            stderr.push_str(&line);
            stderr.push('\n');
            // `  write [working] the agent of node write says: "TEXT"`: the agent's words,
            // quoted and escaped (none to unescape in this text).
            if line.starts_with("  write [working]") {
                if let Some((_, said)) = line.split_once(" says: \"") {
                    streamed.push_str(said.strip_suffix('"').unwrap_or(said));
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no streamed text in time: {stderr}"));
    gate.open();
    let (out, rest) = tokio::time::timeout(WAIT, async {
        let mut out = String::new();
        stdout.read_to_string(&mut out).await.unwrap();
        let mut rest = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push_str(&line);
            rest.push('\n');
        }
        (out, rest)
    })
    .await
    .expect("run ends");
    stderr.push_str(&rest);
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v, json!({"text": "Hello world"}));
    // The 429 was answered as transient and retried by the node.
    let sent = provider.wait_requests(2).await;
    assert_eq!(sent.len(), 2);
    assert!(
        stderr.contains("  write (agent) -> Writer (attempt 2)"),
        "the node retried: {stderr}"
    );
    for r in &sent {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert!(!r.all_but_authorization().contains(KEY));
    }
    assert!(
        !out.contains(KEY) && !stderr.contains(KEY),
        "the key was printed: {stderr}"
    );
}

const DOUBLE_IT: &str = r#"
name: DoubleIt
workflow:
  description: Doubles a number.
  input_schema: {type: object, required: [value], properties: {value: {type: number}}}
  nodes:
    - id: double
      type: agent
      agent_name: Doubler
      input: {value: "{{workflow.input.value}}"}
  output_mapping:
    result: "{{double.output.value}}"
"#;

const RESEARCH: &str = r#"
name: Research
workflow:
  description: Asks an LLM agent, which uses a workflow as a tool.
  input_schema: {type: object, required: [topic], properties: {topic: {type: string}}}
  nodes:
    - id: research
      type: agent
      agent_name: Researcher
      input: {topic: "{{workflow.input.topic}}"}
  output_mapping:
    answer: "{{research.output.text}}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflows_llm_agent_calls_another_workflow_as_a_tool() {
    let provider = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("workflows")).unwrap();
    std::fs::write(dir.path().join("workflows/double_it.yaml"), DOUBLE_IT).unwrap();
    std::fs::write(dir.path().join("workflows/research.yaml"), RESEARCH).unwrap();
    let agents = format!(
        r#"
agents:
  - name: Doubler
    input_schema: {{type: object, required: [value], properties: {{value: {{type: number}}}}}}
    output: {{value: "{{{{input.value * 2}}}}"}}
  - name: Researcher
    model: {{base_url: "{}", name: test-model}}
    instruction: "Find out about {{{{input.topic}}}}"
    tools: [DoubleIt]
"#,
        provider.base_url()
    );
    std::fs::write(dir.path().join("agents.yaml"), agents).unwrap();
    provider.push(Reply::tool_calls(&[(
        "call_1",
        "DoubleIt",
        r#"{"value": 21}"#,
    )]));
    provider.push(Reply::text("It is 42."));

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .args(["run", "Research", "--input", r#"{"topic": "doubling 21"}"#])
        .arg("--workflows")
        .arg(dir.path().join("workflows"))
        .arg("--agents")
        .arg(dir.path().join("agents.yaml"))
        .env_remove("NATS_URL")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, out)
        .await
        .expect("run ends")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, json!({"answer": "It is 42."}));

    let sent = provider.wait_requests(2).await;
    let tools = sent[0].body["tools"].as_array().unwrap();
    assert_eq!(tools[0]["function"]["name"], "DoubleIt", "{tools:?}");
    let messages = sent[1].body["messages"].as_array().unwrap();
    let result = messages.last().unwrap();
    assert_eq!(result["tool_call_id"], "call_1");
    // The tool's answer is the sub-run's output.
    let content: serde_json::Value =
        serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"result": 42}));
}

/// `examples/llm`, as shipped but pointed at the scripted provider: triage, research
/// calling a stub agent as a tool, summary; the output mapped from the schemas' fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_llm_example_runs_against_an_openai_compatible_server() {
    let provider = Provider::start().await;
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let shipped = std::fs::read_to_string(repo.join("examples/llm/agents.yaml")).unwrap();
    assert!(shipped.contains("http://127.0.0.1:11434/v1"));
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents.yaml");
    std::fs::write(
        &agents,
        shipped.replace("http://127.0.0.1:11434/v1", &provider.base_url()),
    )
    .unwrap();
    provider.push(Reply::text(
        r#"{"kind": "question", "topic": "doubling 21"}"#,
    ));
    provider.push(Reply::tool_calls(&[("c1", "Doubler", r#"{"value": 21}"#)]));
    provider.push(Reply::streamed(&["21 doubled ", "is 42."]));
    provider.push(Reply::text(
        r#"{"summary": "21 doubled is 42.", "points": ["Doubler said 42"]}"#,
    ));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .args([
            "run",
            "Brief",
            "--input",
            r#"{"request": "How much is 21 doubled?"}"#,
        ])
        .arg("--workflows")
        .arg(repo.join("examples/llm/workflows"))
        .arg("--agents")
        .arg(&agents)
        .env_remove("NATS_URL")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, out)
        .await
        .expect("run ends")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        json!({"kind": "question", "summary": "21 doubled is 42.", "points": ["Doubler said 42"]})
    );
    let sent = provider.wait_requests(4).await;
    assert_eq!(sent[0].body["model"], "llama3.2");
    assert_eq!(sent[1].body["tools"][0]["function"]["name"], "Doubler");
    assert!(
        !stderr.contains("attempt 2"),
        "no call failed and was retried: {stderr}"
    );
    assert_eq!(
        sent[2].body["messages"].as_array().unwrap().last().unwrap()["content"],
        r#"{"value":42}"#
    );
    assert!(sent[3].body["messages"]
        .to_string()
        .contains("21 doubled is 42."));
}
