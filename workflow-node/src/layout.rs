//! The crate's faces and names, checked from the sources: the operations layer imports no
//! face, the web view imports nothing from the CLI (both call [`crate::ops`]), and the
//! words the shell gave up stay given up. A change that breaks one fails here.

use std::path::{Path, PathBuf};

/// This check, which names the words it looks for.
const THIS_FILE: &str = "src/layout.rs";

/// Every `.rs` file under `src/{dir}` but this one, with its text.
fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir)];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder is readable") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with(THIS_FILE) {
                let text = std::fs::read_to_string(&path).expect("a source file is readable");
                out.push((path, text));
            }
        }
    }
    out
}

/// The files under `src/{dir}` whose code (not comments) names one of `words`.
fn naming(dir: &str, words: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in sources(dir) {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if let Some(w) = words.iter().find(|w| code.contains(*w)) {
                found.push(format!("{}:{}: {w}", path.display(), n + 1));
            }
        }
    }
    found
}

#[test]
fn the_faces_share_the_operations_layer_and_hold_no_copy_of_each_other() {
    let ops = naming("ops", &["crate::cli", "crate::web"]);
    assert!(ops.is_empty(), "ops uses a face:\n{}", ops.join("\n"));
    let web = naming("web", &["crate::cli"]);
    assert!(
        web.is_empty(),
        "the web view uses the CLI:\n{}",
        web.join("\n")
    );
    let shell = naming("shell", &["crate::cli", "crate::web", "crate::ops"]);
    assert!(
        shell.is_empty(),
        "the shell uses a face:\n{}",
        shell.join("\n")
    );
}

#[test]
fn one_word_per_idea() {
    let gone = ["externalize", "bulk::", "grouped::", "TimerRecord"];
    let found = naming("", &gone);
    assert!(
        found.is_empty(),
        "a word given up is back:\n{}",
        found.join("\n")
    );
    let shell = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/shell");
    for old in [
        "bulk.rs",
        "grouped.rs",
        "timers.rs",
        "retry.rs",
        "definitions.rs",
        "observe.rs",
    ] {
        let back: Vec<_> = sources("shell")
            .into_iter()
            .filter(|(p, _)| p.file_name().is_some_and(|f| f == old))
            .map(|(p, _)| p)
            .collect();
        assert!(
            back.is_empty(),
            "{old} is back in {}: {back:?}",
            shell.display()
        );
    }
    assert!(
        !Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/cli/client.rs")
            .exists(),
        "the workflow client lives in agent_sdk::workflow, not in the CLI"
    );
}

#[test]
fn the_check_sees_what_it_looks_for() {
    assert!(!naming("ops", &["pub fn"]).is_empty());
    assert!(naming("ops", &["a word no file holds: zq9"]).is_empty());
}
