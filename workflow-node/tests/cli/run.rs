//! The `run`, `test` and `status` commands as a user runs them: the real binary, its exit
//! codes and output, on an embedded nats-server it starts itself (or, for `status`, one the
//! test starts, where a run waits).

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_workflow-node"));
    c.env_remove("NATS_URL").current_dir(repo());
    c
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn run_prints_the_output_and_exits_0() {
    let out = bin()
        .args([
            "run",
            "ValueRouter",
            "--input",
            r#"{"value": 5}"#,
            "--workflows",
            "examples/workflows",
            "--agents",
            "examples/agents.yaml",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v, serde_json::json!({"category": "low", "result": 5}));
    assert!(stderr.contains("started a local nats-server"), "{stderr}");
    assert!(
        stderr.contains("classify (agent) -> ValueClassifier"),
        "progress is shown: {stderr}"
    );
}

#[test]
fn run_json_reports_a_failed_run_and_exits_1() {
    let out = bin()
        .args([
            "run",
            "ValueRouter",
            "--json",
            "--input",
            r#"{"value": "x"}"#,
            "--workflows",
            "examples/workflows",
            "--agents",
            "examples/agents.yaml",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "failure");
    assert!(v["error"].as_str().unwrap().contains("input_schema"), "{v}");
}

#[test]
fn run_without_a_mesh_or_workflows_is_a_usage_error() {
    let out = bin()
        .args(["run", "Nothing", "--input", "{}"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing serves Nothing"));
    let out = bin()
        .args(["run", "X", "--input", "{not json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--input is not valid JSON"));
}

#[test]
fn test_runs_the_example_suite() {
    let out = bin()
        .args(["test", "examples/suites/examples.yaml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every case of the suite passed (counted from the file, so cases can be added).
    let suite = std::fs::read_to_string(repo().join("examples/suites/examples.yaml")).unwrap();
    let cases = suite.matches("\n  - name: ").count();
    assert!(
        stdout.contains(&format!("{cases} passed, 0 failed")),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok   a run past its deadline ends timed_out"),
        "{stdout}"
    );
}

#[test]
fn test_exits_1_and_explains_a_failing_case() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    let wf = repo().join("examples/workflows/echo.json");
    std::fs::write(
        &suite,
        format!(
            "workflows: [{}]\nagents:\n  - name: Echo\n    output: {{text: changed}}\ncases:\n  - name: wrong\n    input: {{text: hi}}\n    expect: {{status: success, output: {{text: hi}}}}\n",
            wf.display()
        ),
    )
    .unwrap();
    let out = bin().args(["test"]).arg(&suite).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL wrong")
            && stdout.contains(r#"expected {"text":"hi"}, got {"text":"changed"}"#),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 1 failed"));
}

#[test]
fn the_demo_runs_an_example_end_to_end() {
    let out = bin().arg("demo").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"category": "medium", "result": 42}));
    assert!(
        stderr.contains("workflow node serving") && stderr.contains("audit success"),
        "{stderr}"
    );
}

#[test]
fn status_shows_a_run_by_its_id_and_exits_1_for_an_unknown_one() {
    let server = test_harness::nats();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let yaml = r#"
name: Hello
workflow:
  description: no agents, just an output
  nodes:
    - {id: gate, type: approval, timeout: 1h}
  output_mapping: {done: true}
"#;
    let workflow = workflow_node::definition::parse_str(yaml, "hello.yaml").unwrap();
    let (_node, execution) = runtime.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let config = workflow_node::shell::Config::default();
        let node =
            workflow_node::shell::WorkflowNode::start(client.clone(), vec![workflow], config)
                .await
                .unwrap();
        let mut approvals = client
            .subscribe(messages::subjects::approvals("mesh", "Hello"))
            .await
            .unwrap();
        let run_client = client.clone();
        tokio::spawn(async move {
            let timeout = std::time::Duration::from_secs(60);
            agent_sdk::workflow::invoke(
                &run_client,
                "mesh",
                "Hello",
                &serde_json::json!({}),
                timeout,
                |_| {},
            )
            .await
        });
        use futures::StreamExt;
        let msg = approvals.next().await.unwrap();
        let part: messages::Part = serde_json::from_slice(&msg.payload).unwrap();
        let execution = part.as_data().unwrap()["execution_id"]
            .as_str()
            .unwrap()
            .to_string();
        (node, execution)
    });
    let status = |id: &str, json: bool| {
        let mut c = bin();
        c.args([
            "status",
            id,
            "--workflow",
            "Hello",
            "--nats-url",
            &server.url(),
        ]);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    let out = status(&execution, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "run {execution} of Hello: running (input-required)"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("  gate waiting"), "{stdout}");
    let out = status(&execution, true);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "input-required", "{v}");
    assert_eq!(v["nodes"]["gate"], "waiting", "{v}");
    let out = status("no-such-task", false);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no run 'no-such-task'"));
    let out = bin()
        .args(["status", "x", "--workflow", "Hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A loopback URL where nothing listens (a port just bound and released).
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("nats://127.0.0.1:{port}")
}

/// The stderr of `command` once it exits on its own; a long `--timeout` makes sure a wait
/// for it would hang the test rather than pass.
fn fails_at_once(command: &mut Command, url: &str) {
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach the NATS server at {url}")),
        "{stderr}"
    );
}

#[test]
fn run_and_test_against_an_unreachable_server_exit_2_at_once() {
    let url = closed_url();
    fails_at_once(
        bin().args([
            "run",
            "Hello",
            "--input",
            "{}",
            "--timeout",
            "600s",
            "--nats-url",
            &url,
        ]),
        &url,
    );
    fails_at_once(
        bin()
            .args(["test", "examples/suites/examples.yaml", "--timeout", "600s"])
            .args(["--nats-url", &url]),
        &url,
    );
}

const WAITS: &str = r#"
name: Waits
workflow:
  description: waits for an approval that never comes
  nodes:
    - {id: gate, type: approval, timeout: 1h}
  output_mapping: {done: true}
"#;

/// `run --timeout 3s` of a workflow that waits; the server is stopped once the run is at
/// its gate. The workflow is hosted by this test, or by `run` itself (`--workflows`).
fn run_loses_its_server_mid_run(hosted_by_run: bool) {
    use std::io::{BufRead, BufReader};
    let mut server = test_harness::nats();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("waits.yaml");
    std::fs::write(&file, WAITS).unwrap();
    let _node = (!hosted_by_run).then(|| {
        let workflow = workflow_node::definition::parse_str(WAITS, "waits.yaml").unwrap();
        runtime.block_on(async {
            let client = async_nats::connect(server.url()).await.unwrap();
            let config = workflow_node::shell::Config::default();
            workflow_node::shell::WorkflowNode::start(client, vec![workflow], config)
                .await
                .unwrap()
        })
    });
    let mut command = bin();
    command
        .args(["run", "Waits", "--input", "{}", "--timeout", "3s"])
        .args(["--nats-url", &server.url()]);
    if hosted_by_run {
        command.arg("--workflows").arg(&file);
    }
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("gate (approval)") {
        assert!(stderr.read_line(&mut seen).unwrap() > 0, "{seen}");
    }
    server.stop().unwrap();
    let status = child.wait().unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut seen).unwrap();
    assert_eq!(status.code(), Some(2), "{seen}");
    assert!(
        seen.contains("lost the connection to the NATS server"),
        "{seen}"
    );
}

#[test]
fn run_reports_a_server_lost_mid_run_within_its_timeout() {
    run_loses_its_server_mid_run(false);
}

#[test]
fn run_hosting_the_workflow_reports_a_server_lost_mid_run_too() {
    run_loses_its_server_mid_run(true);
}

#[test]
fn serve_exits_2_at_once_or_waits_for_the_server_when_told() {
    use std::io::{BufRead, BufReader};
    let url = closed_url();
    fails_at_once(
        bin().args(["serve", "examples/workflows/echo.json", "--nats-url", &url]),
        &url,
    );
    let mut child = bin()
        .args(["serve", "examples/workflows/echo.json", "--wait-for-server"])
        .args(["--nats-url", &url])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut waits = 0;
    while waits < 2 {
        let before = seen.len();
        assert!(stderr.read_line(&mut seen).unwrap() > 0, "{seen}");
        let line = &seen[before..];
        if line.contains(&format!("cannot reach the NATS server at {url}"))
            && line.contains("waiting for it")
        {
            waits += 1;
        }
    }
    let port = url.rsplit(':').next().unwrap().parse().unwrap();
    let _server = test_harness::nats_with(test_harness::Options {
        port: Some(port),
        ..Default::default()
    });
    while !seen.contains("serving EchoJson") {
        assert!(stderr.read_line(&mut seen).unwrap() > 0, "{seen}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn serve_drain_ends_within_its_timeout_when_the_server_is_gone() {
    use std::io::{BufRead, BufReader};
    let mut server = test_harness::nats();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("waits.yaml");
    std::fs::write(&file, WAITS).unwrap();
    let mut child = bin()
        .arg("serve")
        .arg(&file)
        .args(["--drain-timeout", "2s", "--nats-url", &server.url()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("serving Waits") {
        assert!(stderr.read_line(&mut seen).unwrap() > 0, "{seen}");
    }
    server.stop().unwrap();
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    // stderr closes when the process exits: reading to the end waits for that.
    std::io::Read::read_to_string(&mut stderr, &mut seen).unwrap();
    let status = child.wait().unwrap();
    assert!(seen.contains("draining"), "{seen}");
    match status.code() {
        Some(0) => {}
        Some(4) => assert!(
            seen.contains("the drain did not finish within 2 s"),
            "{seen}"
        ),
        other => panic!("exit {other:?}: {seen}"),
    }
}

#[test]
fn run_takes_a_priority_from_1_to_5_and_refuses_another() {
    let run = |priority: &str| {
        bin()
            .args([
                "run",
                "ValueRouter",
                "--priority",
                priority,
                "--input",
                r#"{"value": 5}"#,
                "--workflows",
                "examples/workflows",
                "--agents",
                "examples/agents.yaml",
            ])
            .output()
            .unwrap()
    };
    let out = run("1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let out = run("7");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--priority") && stderr.contains("1..=5"),
        "{stderr}"
    );
}
