//! Workflow definitions: parse YAML or JSON into typed structs and validate them.
//!
//! [`load_file`] and [`parse_str`] report **all** problems at once as [`Problem`]s, each
//! naming the node and the field. The file is first parsed into a `serde_json::Value` and
//! then read by hand (`fields`), so that a wrong field does not stop the reading:
//!
//! - `parse` and `nodes`: the file's settings, the `workflow` block and each node, in
//!   snake_case or camelCase;
//! - `graph`: ids, references, roles (inner nodes, exit handlers), cycles, branch targets,
//!   joins, implicit inputs, and the derived [`Graph`];
//! - `refs`: what each template and condition may name.

mod agent_limits;
mod fields;
mod flow;
mod graph;
mod model;
mod nesting;
mod nodes;
mod parse;
mod pause;
mod policy;
mod problem;
mod refs;
mod schedules;
mod triggers;
mod wait;
mod webhooks;

pub use agent_limits::{AgentLimits, Rate, MAX_AGENT_SLOTS, MAX_LIMITED_AGENTS};
pub use flow::{
    key_text, priority_of, request_priority, FlowControl, KeyLimit, DEFAULT_PRIORITY,
    HIGHEST_PRIORITY, LOWEST_PRIORITY, MAX_KEY_BYTES, MAX_SLOTS, PRIORITY_METADATA,
};
pub use model::*;
pub use pause::PauseSettings;
pub use problem::{Problem, SyntaxError};
pub use schedules::{
    parse_schedule, slot_time, Due, Overlap, Schedule, When, DEFAULT_CATCHUP_WINDOW, MAX_SCHEDULES,
};
pub use triggers::{RouteSignal, Trigger, DEFAULT_MAX_DELIVERIES, MAX_TRIGGERS};
pub use wait::{valid_signal_name, WaitNode, MAX_SIGNAL_NAME};
pub use webhooks::{HookSecret, Scheme, SecretSource, Unverified, Webhook, DEFAULT_TOLERANCE};

use std::path::{Path, PathBuf};

use serde_json::Value;

use problem::Sink;

/// Parses and validates one workflow from `text`. `origin` names the source in problems
/// (usually the file path; empty for none); an origin ending in `.json` is parsed as JSON,
/// anything else as YAML (which also reads JSON).
pub fn parse_str(text: &str, origin: &str) -> Result<Workflow, Vec<Problem>> {
    let file = (!origin.is_empty()).then(|| origin.to_string());
    let mut sink = Sink::new(file);
    let value = match parse_value(text, origin) {
        Ok(v) => v,
        Err(e) => {
            sink.push(None, "", e.to_string());
            return Err(sink.into_problems());
        }
    };
    // A stored definition wraps its document, and must be read back.
    if let Err(e) = crate::limits::check_depth("the file", &value) {
        sink.push(None, "", e.to_string());
        return Err(sink.into_problems());
    }
    // Not read at all: checking the graph grows with the square of the node count.
    let nodes = value.pointer("/workflow/nodes").and_then(Value::as_array);
    if let Some(n) = nodes
        .map(Vec::len)
        .filter(|n| *n > crate::limits::MAX_NODES)
    {
        let max = crate::limits::MAX_NODES;
        sink.push(None, "nodes", format!("{n} nodes exceed max_nodes ({max})"));
        return Err(sink.into_problems());
    }
    let Some(draft) = parse::parse_document(&value, &mut sink) else {
        return Err(sink.into_problems());
    };
    let parse::Draft {
        mut workflow,
        ghosts,
    } = draft;
    workflow.nodes = graph::dedup(std::mem::take(&mut workflow.nodes), &ghosts, &mut sink);
    graph::check(&mut workflow, &ghosts, &mut sink);
    refs::check(&workflow, &ghosts, &mut sink);
    policy::check(&workflow, &mut sink);
    if sink.is_empty() {
        workflow.hash = hash_of(&value);
        workflow.document = value;
        Ok(workflow)
    } else {
        Err(sink.into_problems())
    }
}

/// The content hash of a workflow document (its canonical JSON: keys in file order).
pub fn hash_of(document: &Value) -> String {
    use sha2::{Digest, Sha256};
    let bytes = serde_json::to_vec(document).expect("a JSON value always encodes");
    hex::encode(&Sha256::digest(&bytes)[..16])
}

/// The file's text as a JSON value.
fn parse_value(text: &str, origin: &str) -> Result<Value, SyntaxError> {
    if origin.to_ascii_lowercase().ends_with(".json") {
        serde_json::from_str(text).map_err(|e| SyntaxError::from_json(&e))
    } else {
        if let Some((line, column)) = nesting::flow_too_deep(text, nesting::MAX_FLOW_DEPTH) {
            return Err(SyntaxError::Yaml {
                line: Some(line),
                column: Some(column),
                message: format!(
                    "'[' and '{{' nest deeper than {} levels",
                    nesting::MAX_FLOW_DEPTH
                ),
            });
        }
        serde_yaml::from_str(text).map_err(|e| SyntaxError::from_yaml(&e))
    }
}

/// Reads, parses and validates the workflow file at `path`.
pub fn load_file(path: &Path) -> Result<Workflow, Vec<Problem>> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse_str(&text, &origin),
        Err(e) => Err(vec![Problem {
            file: Some(origin),
            node: None,
            field: String::new(),
            message: format!("cannot read the file: {e}"),
        }]),
    }
}

/// Whether `path` names a workflow file (`.yaml`, `.yml` or `.json`).
pub fn is_workflow_file(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("yaml" | "yml" | "json")
    )
}

/// Loads every file in `paths`; a directory loads its `*.yaml`, `*.yml` and `*.json` files
/// (not recursively, in name order). Returns the workflows that loaded and the problems of
/// the others.
pub fn load_paths(paths: &[PathBuf]) -> (Vec<Workflow>, Vec<Problem>) {
    let mut workflows = Vec::new();
    let mut problems = Vec::new();
    for path in expand(paths, &mut problems) {
        match load_file(&path) {
            Ok(w) => workflows.push(w),
            Err(p) => problems.extend(p),
        }
    }
    (workflows, problems)
}

/// The files named by `paths`, directories expanded.
pub fn expand(paths: &[PathBuf], problems: &mut Vec<Problem>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        match std::fs::read_dir(path) {
            Ok(entries) => {
                let mut found: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file() && is_workflow_file(p))
                    .collect();
                found.sort();
                files.extend(found);
            }
            Err(e) => problems.push(Problem {
                file: Some(path.display().to_string()),
                node: None,
                field: String::new(),
                message: format!("cannot read the directory: {e}"),
            }),
        }
    }
    files
}
