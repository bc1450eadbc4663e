//! The values templates and conditions see during a run.

use std::borrow::Cow;

use serde_json::{json, Value};
use workflow_expr::{navigate, Path, Scope, Segment};

use super::state::Execution;

/// What a template sees: the workflow input, node outputs, and the map item, loop
/// iteration or run outcome where they exist.
pub(crate) struct RunScope<'a> {
    pub(crate) state: &'a Execution,
    /// `_map_item` and `_map_index`.
    pub(crate) map_item: Option<(&'a Value, u32)>,
    /// `_loop_iteration`: the 0-based iteration, inside a loop's inner node only.
    pub(crate) loop_iteration: Option<u32>,
    /// `workflow.status` and `workflow.error` (exit handlers).
    pub(crate) outcome: bool,
}

impl<'a> RunScope<'a> {
    pub(crate) fn new(state: &'a Execution) -> RunScope<'a> {
        RunScope {
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

impl Scope for RunScope<'_> {
    fn lookup(&self, path: &Path) -> Option<Cow<'_, Value>> {
        let rest = &path.rest;
        match path.root.as_str() {
            "workflow" => match key(rest.first())? {
                "input" | "parameters" => {
                    navigate(&self.state.input, &rest[1..]).map(Cow::Borrowed)
                }
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
            node => {
                let output = self.state.nodes.get(node)?.output.as_ref()?;
                match rest.first() {
                    None => Some(Cow::Owned(json!({ "output": output }))),
                    Some(Segment::Key(k)) if k == "output" => {
                        navigate(output, &rest[1..]).map(Cow::Borrowed)
                    }
                    _ => None,
                }
            }
        }
    }
}
