//! The SDK conformance suite (`python/tests`), from the one test command: runs pytest in the
//! project's virtual environment (`test_harness::python`) with the binaries it drives in
//! its environment: the nats-server, this crate's `workflow-node`, and agent-sdk's
//! `conformance-agent` (the Rust agent the scenarios hold to the same protocol as the
//! Python one). Pytest starts and stops every process itself; this test fails with
//! pytest's output when a scenario fails.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root.
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workflow-node lives in the workspace")
        .to_path_buf()
}

/// agent-sdk's `conformance-agent`, built by `cargo test` (which builds every binary of the
/// workspace's packages) beside this test's own directory of executables.
fn conformance_agent() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test runs from target/<profile>/deps");
    let agent = dir.join("conformance-agent");
    assert!(
        agent.exists(),
        "{} is missing: build it with `cargo build -p agent-sdk --bin conformance-agent` \
         (a workspace `cargo test` builds it)",
        agent.display()
    );
    agent
}

#[test]
fn the_conformance_suite_passes_for_agents_of_both_sdks() {
    let nats = nats_process::find_binary().expect("a nats-server to run the suite against");
    let root = workspace();
    let out = Command::new(test_harness::python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(root.join("python"))
        .env("NATS_SERVER_BIN", nats)
        .env("WORKFLOW_NODE_BIN", env!("CARGO_BIN_EXE_workflow-node"))
        .env("CONFORMANCE_AGENT_BIN", conformance_agent())
        // The SDK as it is in this tree, whether or not the environment installed it.
        .env("PYTHONPATH", root.join("python/src"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("pytest ran in the project's virtual environment");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pytest failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(" passed") && !stdout.contains(" failed"),
        "pytest ran no test:\n{stdout}"
    );
}
