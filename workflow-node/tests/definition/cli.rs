//! `workflow-node validate` as a user runs it: the built binary on good and bad files.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/definition/fixtures")
        .join(name)
}

fn validate(files: &[PathBuf]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .arg("validate")
        .args(files)
        .output()
        .expect("the workflow-node binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_valid_file_exits_0_with_one_ok_line() {
    let good = fixture("good.yaml");
    let (code, stdout, stderr) = validate(std::slice::from_ref(&good));
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(stderr, "");
    assert_eq!(
        stdout,
        format!("{}: OK (workflow 'Good', 2 nodes)\n", good.display())
    );
}

#[test]
fn an_invalid_file_exits_1_with_one_line_per_problem() {
    let good = fixture("good.yaml");
    let bad = fixture("bad.yaml");
    let (code, stdout, stderr) = validate(&[good, bad.clone()]);
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    let b = bad.display();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            format!("{b}: node 'first': retryStratgy: unknown field 'retryStratgy' (did you mean 'retryStrategy'?)"),
            format!("{b}: node 'second': depends_on: unknown node 'frist' (did you mean 'first'?)"),
            format!("{b}: node 'third': input: '{{{{second.output.value}}}}' names node 'second', which is not upstream of this node (add it to depends_on, directly or through another node)"),
        ]
    );
}

#[test]
fn a_missing_file_is_a_problem() {
    let missing = fixture("does-not-exist.yaml");
    let (code, _, stderr) = validate(std::slice::from_ref(&missing));
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!("{}: cannot read the file: ", missing.display())),
        "{stderr}"
    );
}

#[test]
fn expression_problems_are_all_listed_and_exit_1() {
    let bad = fixture("bad_expressions.yaml");
    let (code, stdout, stderr) = validate(std::slice::from_ref(&bad));
    assert_eq!(code, 1, "{stdout}");
    let b = bad.display();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            format!("{b}: workflow: input_schema: the default at /properties/mode/default does not match its schema: \"slow\" is not one of \"fast\" or \"careful\""),
            format!("{b}: node 'check': input: cannot parse template '{{{{ lenght(fetch.output.items) }}}}': unknown function 'lenght' (the functions are length, contains, toJSON, fromJSON, coalesce, concat)"),
            format!("{b}: node 'report': input: cannot parse template '{{{{ check.status == 'success' ? 'ok' }}}}': a '?' has no ':' after it (write a ? b : c)"),
            format!("{b}: node 'check': when: '{{{{fetch.status}}}}' is compared with 'succes', which is not a status (did you mean 'success'?)"),
            format!("{b}: node 'report': instruction: '{{{{fetch.result}}}}' names no field of node 'fetch': a node has output, status and error (its output's fields are under output, as in {{{{fetch.output.x}}}})"),
            format!("{b}: node 'report': instruction: '{{{{run.owner}}}}' names nothing: the run has run.id and run.started_at"),
        ]
    );
}
