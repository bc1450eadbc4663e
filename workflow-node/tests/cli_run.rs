//! The `run` and `test` commands as a user runs them: the real binary, its exit codes and
//! output, on an embedded nats-server it starts itself.

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
    assert!(stdout.contains("9 passed, 0 failed"), "{stdout}");
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
