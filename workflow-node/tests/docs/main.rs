//! The docs name only files that exist, and cite reasons rather than issue numbers.
//!
//! Files move (a folder split, tests grouped by area) and prose does not follow on its own, so
//! this reads `README.md`, `docs/**/*.md`, `deploy/README.md` and the examples' READMEs and
//! fails, listing every problem in one message, when a link, a backticked path or a repository
//! path in a code block names nothing in the tree, when a link's `#anchor` names no heading,
//! or when a doc (or a module doc in the crates that never cite them) says "issue N".
//!
//! What counts as a path, strict where a path is unambiguous and quiet where it is not:
//! - a Markdown link target (not a URL): relative to the doc, as GitHub resolves it;
//! - a backticked span or a code-block word whose first segment is an entry of the
//!   repository's root (`workflow-node/…`, `deploy/…`, `docs/…`): from the root;
//! - a backticked span whose first segment is an entry of the doc's own folder
//!   (`secure/nats.conf` in `deploy/README.md`): from that folder;
//! - a backticked `*.rs` or `*.md` name given without its folders (`shell_wakes.rs`,
//!   `core_scenarios/policy.rs`, `agent.rs::a_test`): the tail of some file in the tree.
//!
//! Anything else (URLs, `/metrics`, `text/event-stream`, subjects, templates, files in the
//! reader's own project such as `hello.yaml`) is not a repository path and is left alone.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Folders never walked or checked: build output, installed tools, generated fuzz inputs.
const GENERATED: &[&str] = &[
    "target",
    ".git",
    ".nats",
    ".venv",
    ".venv-deploy",
    ".venv-llm",
    "fuzz/target",
    "fuzz/corpus",
    "fuzz/artifacts",
    "deploy/secure/local",
];

/// The folders whose code, scripts and examples must not cite issue numbers: all of them.
const NO_ISSUE_CODE: &[&str] = &[
    "messages",
    "expr",
    "workflow-node",
    "agent-sdk",
    "nats-process",
    "test-harness",
    "examples",
    "deploy",
    "fuzz",
    ".ci",
];

/// The one file that names issue numbers on purpose: this check's own examples.
const THIS_FILE: &str = "workflow-node/tests/docs/main.rs";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workflow-node sits one level below the workspace root")
        .to_path_buf()
}

/// Every file and folder of the tree, as `/`-separated paths from the root.
struct Tree {
    root: PathBuf,
    entries: BTreeSet<String>,
}

impl Tree {
    fn walk(root: &Path) -> Tree {
        let mut entries = BTreeSet::new();
        let mut stack = vec![String::new()];
        while let Some(dir) = stack.pop() {
            let Ok(read) = fs::read_dir(root.join(&dir)) else {
                continue;
            };
            for entry in read.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                if GENERATED.contains(&path.as_str()) {
                    continue;
                }
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(path.clone());
                }
                entries.insert(path);
            }
        }
        Tree {
            root: root.to_path_buf(),
            entries,
        }
    }

    fn has(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        path.is_empty() || self.entries.contains(path)
    }

    fn has_tail(&self, tail: &str) -> bool {
        let suffix = format!("/{tail}");
        self.entries
            .iter()
            .any(|e| e == tail || e.ends_with(&suffix))
    }

    /// The docs this check reads.
    fn docs(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| {
                e.as_str() == "README.md"
                    || e.as_str() == "deploy/README.md"
                    || (e.starts_with("docs/") && e.ends_with(".md"))
                    || (e.starts_with("examples/")
                        && e.rsplit('/')
                            .next()
                            .is_some_and(|n| n.starts_with("README")))
            })
            .cloned()
            .collect()
    }
}

/// `a/b/../c` → `a/c`; `None` when it climbs out of the tree.
fn normalise(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

fn join(dir: &str, rel: &str) -> Option<String> {
    if dir.is_empty() {
        normalise(rel)
    } else {
        normalise(&format!("{dir}/{rel}"))
    }
}

fn first_segment(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

fn is_generated(path: &str) -> bool {
    GENERATED
        .iter()
        .any(|g| path == *g || path.starts_with(&format!("{g}/")))
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// A word that may be a path: no spaces, no template or glob characters, not a URL.
fn path_like(word: &str) -> Option<&str> {
    let word = word.split("::").next().unwrap_or(word);
    let bad = |c: char| c.is_whitespace() || "{}<>*$…|=,;'\"()[]?!@%^&~`".contains(c);
    if word.is_empty()
        || word.contains("://")
        || word.starts_with(['/', '-', '.']) && !word.starts_with(".ci/")
        || word.chars().any(bad)
    {
        return None;
    }
    Some(word)
}

fn has_source_extension(word: &str) -> bool {
    word.ends_with(".rs") || word.ends_with(".md")
}

/// The problems of one doc, each naming the doc and its line.
fn check_doc(tree: &Tree, doc: &str, text: &str) -> Vec<String> {
    let dir = doc.rsplit_once('/').map_or("", |(d, _)| d);
    let doc_dir_entries: BTreeSet<&str> = tree
        .entries
        .iter()
        .filter_map(|e| {
            let rest = if dir.is_empty() {
                Some(e.as_str())
            } else {
                e.strip_prefix(dir)?.strip_prefix('/')
            };
            rest.map(first_segment)
        })
        .collect();
    let root_entries: BTreeSet<&str> = tree.entries.iter().map(|e| first_segment(e)).collect();
    let mut problems = Vec::new();
    let missing = |line: usize, what: &str, path: &str| {
        format!("{doc}:{line}: {what} `{path}` does not exist")
    };
    // A path in backticks or a code block: from the root, from the doc's folder, or a tail.
    let check_path = |word: &str, in_block: bool| -> Option<bool> {
        let word = path_like(word)?;
        let first = first_segment(word);
        if word.contains('/') && root_entries.contains(first) {
            // In a code block, only file names: `deploy/nats-box` there is a kubectl resource.
            let file_name = word
                .rsplit('/')
                .next()
                .is_some_and(|last| last.contains('.'));
            if is_generated(word) || (in_block && !file_name) {
                return None;
            }
            return Some(tree.has(&normalise(word)?));
        }
        if in_block {
            return None;
        }
        // A folder named alone (`examples/`): in a doc at the root, a folder of the root;
        // elsewhere (`run/` in the architecture's map), a folder somewhere in the tree.
        if let Some(folder) = word
            .strip_suffix('/')
            .filter(|f| !f.is_empty() && !f.contains('/'))
        {
            return Some(if dir.is_empty() {
                tree.has(folder)
            } else {
                tree.has_tail(folder)
            });
        }
        if word.contains('/') && doc_dir_entries.contains(first) && !dir.is_empty() {
            return Some(tree.has(&join(dir, word)?));
        }
        if has_source_extension(word) {
            return Some(tree.has_tail(word));
        }
        None
    };

    let mut fenced = false;
    let mut in_span = false;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            in_span = false;
            continue;
        }
        if fenced {
            for word in line.split(|c: char| c.is_whitespace() || c == '=' || c == '"') {
                if check_path(word, true) == Some(false) {
                    problems.push(missing(n, "path", word));
                }
            }
            continue;
        }
        // Backticked spans: the pieces between backticks, a span may go on over a line break
        // within its paragraph.
        if line.trim().is_empty() {
            in_span = false;
        }
        let mut prose = String::new();
        let pieces: Vec<&str> = line.split('`').collect();
        for (i, piece) in pieces.iter().enumerate() {
            let span = in_span ^ (i % 2 == 1);
            // A span that began on the line before, or goes on to the next, holds a line
            // break: not a path.
            let whole = i > 0 && i + 1 < pieces.len();
            if !span {
                prose.push_str(piece);
                prose.push(' ');
            } else if whole && check_path(piece, false) == Some(false) {
                problems.push(missing(n, "path", piece));
            }
        }
        in_span ^= line.matches('`').count() % 2 == 1;
        // Link and image targets, outside backticks.
        for (i, _) in prose.match_indices("](") {
            let rest = &prose[i + 2..];
            let Some(target) = rest.split(')').next() else {
                continue;
            };
            let target = target.split_whitespace().next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let Some(path) = (if file.is_empty() {
                Some(doc.to_string())
            } else {
                join(dir, file)
            }) else {
                problems.push(missing(n, "link", target));
                continue;
            };
            if !tree.has(&path) {
                problems.push(missing(n, "link", target));
            } else if !anchor.is_empty() && path.ends_with(".md") {
                let text = fs::read_to_string(tree.root.join(&path)).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    problems.push(format!(
                        "{doc}:{n}: link `{target}`: no heading `#{anchor}` in {path}"
                    ));
                }
            }
        }
    }
    problems
}

/// Lines that cite an issue by number ("issue 14", "Issues #5"), which a reader cannot follow.
fn issue_citations(name: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let lower = line.to_lowercase();
        for (i, _) in lower.match_indices("issue") {
            let word_start = lower[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric());
            let rest = lower[i + 5..].trim_start_matches('s');
            let rest = rest.trim_start_matches(' ').trim_start_matches('#');
            if word_start && rest.starts_with(|c: char| c.is_ascii_digit()) {
                out.push(format!(
                    "{name}:{}: cites an issue number: {}",
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    out
}

/// The code, scripts and example files under `under` (all but this check itself).
fn code_files(tree: &Tree, under: &str) -> Vec<String> {
    const CODE: &[&str] = &[".rs", ".yaml", ".yml", ".py", ".sh", ".toml"];
    let prefix = format!("{under}/");
    tree.entries
        .iter()
        .filter(|e| e.starts_with(&prefix) && e.as_str() != THIS_FILE)
        .filter(|e| under == ".ci" || CODE.iter().any(|ext| e.ends_with(ext)))
        .filter(|e| tree.root.join(e).is_file())
        .cloned()
        .collect()
}

#[test]
fn docs_name_only_paths_that_exist_and_cite_no_issue_numbers() {
    let root = repo_root();
    let tree = Tree::walk(&root);
    let docs = tree.docs();
    assert!(docs.iter().any(|d| d == "README.md"), "the README is read");
    let mut problems = Vec::new();
    for doc in &docs {
        let text = fs::read_to_string(root.join(doc)).expect("a doc the walk found is readable");
        problems.extend(check_doc(&tree, doc, &text));
        problems.extend(issue_citations(doc, &text));
    }
    for dir in NO_ISSUE_CODE {
        for file in code_files(&tree, dir) {
            let text = fs::read_to_string(root.join(&file)).expect("a source file is readable");
            problems.extend(issue_citations(&file, &text));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problem(s) in the docs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_check_reports_what_is_missing_and_leaves_the_rest_alone() {
    let tree = Tree::walk(&repo_root());
    let doc = "\
See [the semantics](docs/semantics.md), [gone](docs/gone.md), [a URL](https://example.com/x.md),
[no heading](docs/semantics.md#no-such-heading), `workflow-node/src/lib.rs`,
`workflow-node/src/nothing_here.rs`, `no_such_file_anywhere.rs`, `limits.rs::Limits`,
`hello.yaml`, `/metrics`, `text/event-stream`, `examples/`, `no_such_folder/`, `{ns}.a2a.v1.agent.request.{agent}`, `kill
-9`, a span over a line break, then `docs/split
`, `docs/over_a_break.md`.
```sh
workflow-node validate examples/workflows examples/nowhere.yaml --out /tmp/x.json
kubectl -n nats exec deploy/nats-box -- nats server report jetstream
```
";
    let problems = check_doc(&tree, "README.md", doc).join("\n");
    for expected in [
        "`docs/gone.md`",
        "#no-such-heading",
        "`workflow-node/src/nothing_here.rs`",
        "`no_such_file_anywhere.rs`",
        "`examples/nowhere.yaml`",
        "`docs/over_a_break.md`",
        "`no_such_folder/`",
    ] {
        assert!(
            problems.contains(expected),
            "{expected} is reported in:\n{problems}"
        );
    }
    assert_eq!(
        problems.lines().count(),
        7,
        "nothing else is reported:\n{problems}"
    );
    assert_eq!(issue_citations("x", "as issue 14 said; issued 3").len(), 1);
    assert_eq!(issue_citations("x", "tissue 3, Issues #5").len(), 1);
}
