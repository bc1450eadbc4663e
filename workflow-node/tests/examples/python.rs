//! Runs `examples/python/call_workflow.py` (nats-py) against a real nats-server and a
//! real workflow node: it finds the workflow by a skill tag of its card and calls it over
//! plain JSON-RPC. Runs in the project's virtual environment (`test_harness::python`,
//! made by `.ci/run`); without it the test fails saying so.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

use crate::support::fixtures::doubler;

const STUBS: &str = concat!("agents:", doubler!(),);

const DOUBLING: &str = r#"
name: Doubling
workflow:
  description: Doubles a number.
  skills:
    - {id: double, name: Double, description: doubles a number, tags: [double, twice]}
  input_schema:
    type: object
    properties: {value: {type: number}}
    required: [value]
  nodes:
    - {id: one, type: agent, agent_name: Doubler, input: {value: "{{workflow.input.value}}"}}
  output_mapping:
    doubled: "{{one.output.value}}"
"#;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python/call_workflow.py")
}

/// Fails the test, clearly, when the environment or nats-py is missing.
fn require_nats_py() {
    let probe = std::process::Command::new(test_harness::python())
        .args(["-c", "import nats"])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the virtual environment's python is needed to run {}: {e}",
                script().display()
            )
        });
    assert!(
        probe.status.success(),
        "the Python example needs nats-py: .venv/bin/pip install -r .ci/python-requirements.txt ({})",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
}

async fn python(url: &str, args: &[&str]) -> Output {
    let run = tokio::process::Command::new(test_harness::python())
        .arg(script())
        .args(["--nats-url", url])
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("the Python caller ended")
        .expect("python ran")
}

#[tokio::test]
async fn a_python_caller_finds_a_workflow_by_its_card_and_calls_it_over_json_rpc() {
    require_nats_py();
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let stubs = agent_sdk::StubFile::parse(STUBS, "stubs").unwrap_or_else(|p| panic!("{p:?}"));
    let _stubs = agent_sdk::serve_stubs(client.clone(), "mesh", stubs)
        .await
        .expect("stubs");
    let wf = parse_str(DOUBLING, "doubling.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    let _node = WorkflowNode::start(client.clone(), vec![wf], Config::default())
        .await
        .expect("node");

    let out = python(
        &server.url(),
        &["--tag", "twice", "--input", r#"{"value": 21}"#],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("workflow: Doubling: Doubles a number."),
        "{stdout}"
    );
    let output = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("output: "))
        .unwrap_or_else(|| panic!("no output line in {stdout}"));
    let output: serde_json::Value = serde_json::from_str(output).expect("JSON output");
    assert_eq!(output, serde_json::json!({"doubled": 42}));

    // Input the workflow refuses: the failure is reported, exit code 2.
    let out = python(
        &server.url(),
        &["--workflow", "Doubling", "--input", r#"{"value": "x"}"#],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Doubling failed"), "{stderr}");

    // No workflow with that tag: a clear message, exit code 1.
    let out = python(
        &server.url(),
        &["--tag", "sing", "--input", "{}", "--discovery-timeout", "1"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no workflow with skill tag 'sing' on the mesh"),
        "{stderr}"
    );
}
