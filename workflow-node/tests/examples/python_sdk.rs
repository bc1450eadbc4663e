//! The Python SDK's examples run as written, against a real nats-server and a real workflow
//! node: `examples/python/word_stats_agent.py` (a Python agent) serves the node of
//! `examples/python/word_count.yaml`, and `examples/python/call_workflow_sdk.py` finds that
//! workflow by a skill tag, declares it as a tool, checks its arguments and calls it,
//! printing its progress. Both run in the project's virtual environment with the SDK of
//! this tree (`python/src`).

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use workflow_node::definition::load_file;
use workflow_node::shell::{Config, WorkflowNode};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python(script: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(test_harness::python());
    command
        .arg(repo().join("examples/python").join(script))
        .env("PYTHONPATH", repo().join("python/src"))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn call(url: &str, arguments: &str) -> Output {
    let run = python("call_workflow_sdk.py")
        .args([
            "--nats-url",
            url,
            "--tag",
            "words",
            "--arguments",
            arguments,
        ])
        .output();
    tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("the Python caller ended")
        .expect("python ran")
}

#[tokio::test]
async fn a_python_agent_serves_a_workflow_that_a_python_caller_calls_as_a_tool() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let wf = load_file(&repo().join("examples/python/word_count.yaml"))
        .unwrap_or_else(|p| panic!("{p:?}"));
    let _node = WorkflowNode::start(client.clone(), vec![wf], Config::default())
        .await
        .expect("node");
    let mut agent = python("word_stats_agent.py")
        .args(["--nats-url", &server.url()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the Python agent starts");
    let stdout = agent.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the agent said something")
        .expect("its stdout reads");
    assert_eq!(ready.as_deref(), Some("ready"));

    let out = call(&server.url(), r#"{"text": "the quick brown fox"}"#).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let tool = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tool: "))
        .unwrap_or_else(|| panic!("no tool line in {stdout}"));
    let tool: serde_json::Value = serde_json::from_str(tool).expect("JSON declaration");
    assert_eq!(tool["function"]["name"], "WordCount");
    assert_eq!(tool["function"]["parameters"]["required"][0], "text");
    for step in [
        "progress: run_started",
        "progress: node_started count",
        "progress: run_finished",
    ] {
        assert!(stdout.contains(step), "{step} missing from {stdout}");
    }
    let output = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("output: "))
        .unwrap_or_else(|| panic!("no output line in {stdout}"));
    let output: serde_json::Value = serde_json::from_str(output).expect("JSON output");
    assert_eq!(output, serde_json::json!({"words": 4, "longest": "quick"}));

    // The agent's own failure, with its kind, fails the run: exit code 2.
    let out = call(&server.url(), r#"{"text": "   "}"#).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("WordCount failed"), "{stderr}");

    // Arguments the tool's schema refuses never leave the caller: exit code 1.
    let out = call(&server.url(), r#"{"words": 3}"#).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bad arguments"), "{stderr}");
}
