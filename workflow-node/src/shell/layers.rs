//! The shell's rooms, checked: `run` stays free of async and I/O, each room uses only
//! the rooms before it in [`ORDER`], and no two files of one room use each other (even
//! through others). Read from the sources, so a change that breaks the layering fails
//! here, not in review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rooms, in the order they may depend on one another: a room uses only those
/// before it.
const ORDER: [&str; 7] = [
    "run",
    "telemetry",
    "mesh",
    "store",
    "worker",
    "callers",
    "triggers",
];

/// What `run` never holds: async, tasks and connections, files and sockets, clock reads,
/// the I/O rooms' shared context and the node.
const NOT_IN_RUN: [&str; 11] = [
    "async fn",
    ".await",
    "tokio",
    "async_nats",
    "std::fs",
    "std::net",
    "SystemTime::now",
    "Instant::now",
    "Shared",
    "crate::shell::context",
    "crate::shell::node",
];

/// A source file of the shell: its path under `src/shell/` and its lines of code
/// (comments left out: a doc may name what the code may not use).
struct Source {
    path: String,
    code: Vec<Line>,
}

/// A line of code: its number, its text, and whether it is in a file's tests (from its
/// `#[cfg(test)]` on), which may use the files they test beside (no circle: tests are
/// not a dependency of the code).
struct Line {
    n: usize,
    text: String,
    test: bool,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/shell");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a shell source is readable");
            let path = file
                .strip_prefix(&root)
                .expect("under src/shell")
                .to_string_lossy()
                .replace('\\', "/");
            Source {
                path,
                code: code_lines(&text),
            }
        })
        .collect()
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/shell is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The lines of `text` that are code, numbered from 1, with any trailing comment cut.
fn code_lines(text: &str) -> Vec<Line> {
    let mut test = false;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(i, line)| {
            test |= line.starts_with("#[cfg(test)]");
            let code = match line.find(" // ") {
                Some(at) if !line[..at].contains('"') => &line[..at],
                _ => line,
            };
            Line {
                n: i + 1,
                text: code.to_string(),
                test,
            }
        })
        .collect()
}

/// The room of a file (`run/plan/group.rs` is in `run`); `None` for the files beside
/// the rooms (`mod.rs`, `config.rs`, `context.rs`, `node.rs`, ...).
fn room(path: &str) -> Option<&str> {
    let (first, _) = path.split_once('/')?;
    ORDER.contains(&first).then_some(first)
}

/// The module a file is (`worker/group.rs` -> `worker::group`, `run/plan/tests.rs` ->
/// `run::plan`: a file below a module belongs to it).
fn module(path: &str) -> String {
    let parts: Vec<&str> = path.trim_end_matches(".rs").split('/').collect();
    let parts = match parts.as_slice() {
        [.., "mod"] => &parts[..parts.len() - 1],
        _ => &parts[..],
    };
    parts.iter().take(2).copied().collect::<Vec<_>>().join("::")
}

/// Every `crate::shell::a::b` a line names, as (`a`, `b`).
fn shell_paths(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::shell::") {
        rest = &rest[at + "crate::shell::".len()..];
        let mut segments = rest
            .split("::")
            .map(|s| s.split(|c: char| !(c.is_alphanumeric() || c == '_')).next());
        let first = segments.next().flatten().unwrap_or_default().to_string();
        let second = segments.next().flatten().unwrap_or_default().to_string();
        found.push((first, second));
    }
    found
}

/// The problems of `files`: I/O or async in `run`, a room using a later one, a circle of
/// files inside a room.
fn problems(files: &[Source]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let from = room(&file.path);
        let rank = from.and_then(|r| ORDER.iter().position(|o| *o == r));
        let in_tests = file.path.ends_with("/tests.rs");
        for Line {
            n,
            text: line,
            test,
        } in &file.code
        {
            if from == Some("run") {
                for word in NOT_IN_RUN {
                    if line.contains(word) {
                        problems.push(format!("{}:{n}: `{word}` in run: {line}", file.path));
                    }
                }
            }
            for (to, inner) in shell_paths(line) {
                let Some(to_rank) = ORDER.iter().position(|o| *o == to) else {
                    continue;
                };
                match rank {
                    Some(rank) if to_rank > rank => problems.push(format!(
                        "{}:{n}: {} uses {to}, which comes after it: {line}",
                        file.path, ORDER[rank]
                    )),
                    Some(rank) if to_rank == rank && !inner.is_empty() && !test && !in_tests => {
                        let (this, that) = (module(&file.path), format!("{to}::{inner}"));
                        if this != that {
                            uses.entry(this).or_default().insert(that);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    problems.extend(circles(&uses));
    problems
}

/// The circles in `uses` (module -> modules it uses), one line each.
fn circles(uses: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = BTreeSet::new();
    for start in uses.keys() {
        let mut path = vec![start.clone()];
        walk_uses(uses, start, &mut path, &mut found);
    }
    found.into_iter().collect()
}

fn walk_uses(
    uses: &BTreeMap<String, BTreeSet<String>>,
    at: &str,
    path: &mut Vec<String>,
    found: &mut BTreeSet<String>,
) {
    for next in uses.get(at).into_iter().flatten() {
        if next == &path[0] {
            // Reported once, from its smallest member.
            if path.iter().all(|p| p >= &path[0]) {
                found.insert(format!("circle: {} -> {next}", path.join(" -> ")));
            }
        } else if !path.contains(next) {
            path.push(next.clone());
            walk_uses(uses, next, path, found);
            path.pop();
        }
    }
}

#[test]
fn the_rooms_keep_their_order_and_run_stays_pure() {
    let problems = problems(&sources());
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_check_catches_what_it_is_for() {
    let file = |path: &str, text: &str| Source {
        path: path.into(),
        code: code_lines(text),
    };
    let planted = [
        file(
            "run/plan.rs",
            "async fn load() {}\n// tokio in a comment is fine",
        ),
        file("run/wake.rs", "let t = std::time::Instant::now();"),
        file("store/runs.rs", "use crate::shell::worker::driver;"),
        file("worker/group.rs", "use crate::shell::worker::driver::load;"),
        file("worker/driver.rs", "use crate::shell::worker::group;"),
        file(
            "run/wake.rs",
            "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::shell::run::plan;\n}",
        ),
        file("run/plan.rs", "use crate::shell::run::wake;"),
    ];
    let found = problems(&planted);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].contains("`async fn` in run"));
    assert!(found[1].contains("`Instant::now` in run"));
    assert!(found[2].contains("store uses worker"));
    assert!(found[3].contains("circle: worker::driver -> worker::group -> worker::driver"));
}
