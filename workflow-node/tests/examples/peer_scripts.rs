//! The LangGraph peer of `mesh-bench chain` (`src/bin/mesh_bench/peers/`) is not run in CI
//! (it installs LangGraph from PyPI); this checks only what needs no LangGraph: the shell
//! wrapper parses, and the script parses its arguments and refuses bad ones.

use std::path::PathBuf;
use std::process::{Command, Output};

fn peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/bin/mesh_bench/peers")
}

fn python(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(peers().join("langgraph_chain.py"))
        .args(args)
        .output()
        .expect("python3 runs")
}

#[test]
fn the_wrapper_is_valid_bash() {
    let out = Command::new("bash")
        .arg("-n")
        .arg(peers().join("langgraph_chain.sh"))
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_script_explains_itself_and_refuses_bad_arguments() {
    let help = python(&["--help"]);
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("--runs") && text.contains("--json"), "{text}");

    let bad = python(&["--runs", "0"]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--runs must be at least 1"), "{err}");
}
