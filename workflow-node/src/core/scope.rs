//! The values templates and conditions see during a run.
//!
//! Everything here comes from the run's committed record and its pinned definition, never
//! from a clock or a replica: `run.started_at` is the time the run's start was applied
//! (kept in the record), so every replica that evaluates a template sees the same value.

use std::borrow::Cow;

use serde_json::{json, Value};
use workflow_expr::{navigate, Path, Scope, Segment};

use super::state::Execution;
use crate::definition::Workflow;

/// What a template sees: the workflow input and metadata, the run's metadata, node outputs
/// and statuses, and the map item, loop iteration or run outcome where they exist.
pub(crate) struct RunScope<'a> {
    pub(crate) wf: &'a Workflow,
    pub(crate) state: &'a Execution,
    /// `_map_item` and `_map_index`.
    pub(crate) map_item: Option<(&'a Value, u32)>,
    /// `_loop_iteration`: the 0-based iteration, inside a loop's inner node only.
    pub(crate) loop_iteration: Option<u32>,
    /// `workflow.status` and `workflow.error` (exit handlers).
    pub(crate) outcome: bool,
}

impl<'a> RunScope<'a> {
    pub(crate) fn new(wf: &'a Workflow, state: &'a Execution) -> RunScope<'a> {
        RunScope {
            wf,
            state,
            map_item: None,
            loop_iteration: None,
            outcome: false,
        }
    }
}

fn key(seg: Option<&Segment>) -> Option<&str> {
    match seg {
        Some(Segment::Key(k)) => Some(k.as_str()),
        _ => None,
    }
}

/// The value of a string.
fn text<'v>(s: impl Into<String>) -> Option<Cow<'v, Value>> {
    Some(Cow::Owned(Value::String(s.into())))
}

impl RunScope<'_> {
    /// `run.id` and `run.started_at` (RFC 3339, from the record).
    fn run(&self, rest: &[Segment]) -> Option<Cow<'_, Value>> {
        if rest.len() != 1 {
            return None;
        }
        match key(rest.first())? {
            "id" => text(self.state.id.0.as_str()),
            "started_at" if self.state.started => text(self.state.started_at.rfc3339()),
            _ => None,
        }
    }

    /// `{{X.output...}}`, `{{X.status}}`, `{{X.error}}` of node `X`.
    fn node(&self, id: &str, rest: &[Segment]) -> Option<Cow<'_, Value>> {
        if !self.wf.graph.index.contains_key(id) {
            return None;
        }
        let node = self.state.nodes.get(id);
        match rest.first() {
            None => Some(Cow::Owned(json!({ "output": node?.output.as_ref()? }))),
            Some(Segment::Key(k)) if k == "output" => {
                navigate(node?.output.as_ref()?, &rest[1..]).map(Cow::Borrowed)
            }
            Some(Segment::Key(k)) if k == "status" && rest.len() == 1 => {
                text(self.state.node_status(id).as_str())
            }
            Some(Segment::Key(k)) if k == "error" && rest.len() == 1 => {
                text(node?.error.as_deref()?)
            }
            _ => None,
        }
    }
}

impl Scope for RunScope<'_> {
    fn lookup(&self, path: &Path) -> Option<Cow<'_, Value>> {
        let rest = &path.rest;
        match path.root.as_str() {
            "workflow" => match key(rest.first())? {
                "input" | "parameters" => {
                    navigate(&self.state.input, &rest[1..]).map(Cow::Borrowed)
                }
                "name" if rest.len() == 1 => text(self.wf.name.as_str()),
                "version" if rest.len() == 1 => text(self.wf.version.as_str()),
                "status" if self.outcome => {
                    let status = self.state.outcome.unwrap_or(self.state.status);
                    Some(Cow::Owned(Value::String(status.as_str().into())))
                }
                "error" if self.outcome => {
                    let err = self.state.error.as_ref()?;
                    let v = json!({"message": err.message, "node_id": err.node_id});
                    navigate(&v, &rest[1..]).cloned().map(Cow::Owned)
                }
                _ => None,
            },
            "_map_item" | "item" => {
                let (item, _) = self.map_item?;
                navigate(item, rest).map(Cow::Borrowed)
            }
            "_map_index" => self.map_item.map(|(_, i)| Cow::Owned(json!(i))),
            "_loop_iteration" => self.loop_iteration.map(|i| Cow::Owned(json!(i))),
            // A node named `run` keeps its name: files written before `run.` existed.
            "run" if !self.wf.graph.index.contains_key("run") => self.run(rest),
            node => self.node(node, rest),
        }
    }
}
