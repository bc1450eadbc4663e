//! Helpers shared by the definition tests: wrap a few nodes into a whole file, load it, and
//! list the problems as displayed.

use workflow_node::definition::{parse_str, Workflow};

/// Indents every line of `text` by `n` spaces.
pub(crate) fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines()
        .map(|l| {
            if l.trim().is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A whole file around `nodes` (a YAML list written at column 0) with `extra` keys of the
/// workflow block (also at column 0).
pub(crate) fn doc(nodes: &str, extra: &str) -> String {
    format!(
        "name: T\nworkflow:\n  description: test\n  output_mapping: {{}}\n  nodes:\n{}\n{}\n",
        indent(nodes, 4),
        indent(extra, 2)
    )
}

/// The problems of `text` (as `t.yaml`), displayed; empty when it loads.
pub(crate) fn problems_of(text: &str) -> Vec<String> {
    match parse_str(text, "t.yaml") {
        Ok(_) => Vec::new(),
        Err(p) => p.iter().map(ToString::to_string).collect(),
    }
}

/// The problems of a file around `nodes`.
pub(crate) fn problems(nodes: &str) -> Vec<String> {
    problems_of(&doc(nodes, ""))
}

/// Loads `text`, failing the test with every problem when it does not load.
pub(crate) fn load(text: &str) -> Workflow {
    match parse_str(text, "t.yaml") {
        Ok(w) => w,
        Err(p) => panic!(
            "expected a valid workflow, got:\n{}",
            p.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// Asserts that `got` is exactly `want`.
pub(crate) fn assert_problems(got: Vec<String>, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    assert_eq!(got, want, "\n got: {got:#?}\nwant: {want:#?}");
}
