//! What templates and conditions may name: `workflow.input`, `workflow.name` and
//! `workflow.version` everywhere, `run.id` and `run.started_at` everywhere, `workflow.status`
//! and `workflow.error` in exit handlers, nodes that run before the user (transitively
//! upstream) with their `output`, `status` and `error`, `_map_item`/`_map_index` in a map's
//! inner node, and `_loop_iteration` in a loop's inner node and its condition. Beyond names,
//! what can be told without values: a status compared with a string that is no status, a
//! function applied to literals it fails on.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use workflow_expr::{Condition, Path, Segment, Template};

use super::fields::did_you_mean;
use super::graph::ancestors;
use super::problem::Sink;
use super::{MapItems, NodeKind, NodeRole, Workflow};
use crate::core::{NodeStatus, RunStatus};

/// What one expression may name.
#[derive(Default)]
struct Allowed {
    nodes: HashSet<usize>,
    map_item: bool,
    loop_iteration: bool,
    exit: bool,
    /// The position of the node using the expression (none for `output_mapping`).
    user: Option<usize>,
}

/// One expression of the file: a template or a condition.
#[derive(Clone, Copy)]
enum Used<'a> {
    Template(&'a Template),
    Condition(&'a Condition),
}

impl<'a> Used<'a> {
    fn paths(self) -> Vec<&'a Path> {
        match self {
            Used::Template(t) => t.paths(),
            Used::Condition(c) => c.paths(),
        }
    }

    fn literal_comparisons(self) -> Vec<(&'a Path, &'a Value)> {
        match self {
            Used::Template(t) => t.literal_comparisons(),
            Used::Condition(c) => c.literal_comparisons(),
        }
    }

    fn problems(self) -> Vec<String> {
        match self {
            Used::Template(t) => t.problems(),
            Used::Condition(c) => c.problems(),
        }
    }
}

/// `{{root.a[0].b}}`, for messages.
fn render(path: &Path) -> String {
    let mut s = format!("{{{{{}", path.root);
    for seg in &path.rest {
        match seg {
            Segment::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Segment::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s.push_str("}}");
    s
}

/// Checks every template and condition of `wf` (whose graph roles are filled).
pub(crate) fn check(wf: &Workflow, ghosts: &HashSet<String>, sink: &mut Sink) {
    let nodes = &wf.nodes;
    let index = &wf.graph.index;
    let roles = &wf.graph.roles;
    if roles.len() != nodes.len() {
        return;
    }
    let ancestors = ancestors(nodes, index);
    // A loop's inner node stays addressable after the loop: whoever may name the loop may
    // name its inner node.
    let with_loop_inners = |set: &HashSet<usize>| -> HashSet<usize> {
        let mut out = set.clone();
        for &i in set {
            if let NodeKind::Loop(l) = &nodes[i].kind {
                if let Some(&t) = index.get(&l.node) {
                    out.insert(t);
                }
            }
        }
        out
    };
    let main: HashSet<usize> = (0..nodes.len())
        .filter(|&i| roles[i] == NodeRole::Main)
        .collect();
    let everything_main = || Allowed {
        nodes: with_loop_inners(&main),
        ..Allowed::default()
    };

    for (i, node) in nodes.iter().enumerate() {
        let mut allowed = match roles[i] {
            NodeRole::Main => Allowed {
                nodes: with_loop_inners(&ancestors[i]),
                ..Allowed::default()
            },
            NodeRole::ExitHandler => Allowed {
                exit: true,
                ..everything_main()
            },
            NodeRole::Inner { owner } => {
                let mut set: HashSet<usize> =
                    ancestors[owner].union(&ancestors[i]).copied().collect();
                set = with_loop_inners(&set);
                let is_loop = matches!(nodes[owner].kind, NodeKind::Loop(_));
                if is_loop {
                    set.insert(i);
                }
                Allowed {
                    nodes: set,
                    map_item: matches!(nodes[owner].kind, NodeKind::Map(_)),
                    loop_iteration: is_loop,
                    exit: roles[owner] == NodeRole::ExitHandler,
                    user: None,
                }
            }
        };
        allowed.user = Some(i);
        let mut uses: Vec<(String, Used<'_>)> = Vec::new();
        if let Some(w) = &node.when {
            uses.push(("when".into(), Used::Condition(w)));
        }
        match &node.kind {
            NodeKind::Call(call) => {
                if let Some(t) = &call.input {
                    uses.push(("input".into(), Used::Template(t)));
                }
                if let Some(t) = &call.instruction {
                    uses.push(("instruction".into(), Used::Template(t)));
                }
            }
            NodeKind::Conditional { condition, .. } => {
                uses.push(("condition".into(), Used::Condition(condition)))
            }
            NodeKind::Switch { cases, .. } => {
                for (k, c) in cases.iter().enumerate() {
                    uses.push((format!("cases[{k}].when"), Used::Condition(&c.condition)));
                }
            }
            NodeKind::Map(m) => {
                if let MapItems::Template(t) = &m.items {
                    uses.push(("items".into(), Used::Template(t)));
                }
            }
            NodeKind::Fork { branches, .. } => {
                for (k, b) in branches.iter().enumerate() {
                    if let Some(t) = &b.call.input {
                        uses.push((format!("branches[{k}].input"), Used::Template(t)));
                    }
                    if let Some(t) = &b.call.instruction {
                        uses.push((format!("branches[{k}].instruction"), Used::Template(t)));
                    }
                }
            }
            NodeKind::Approval(a) => {
                if let Some(t) = &a.message {
                    uses.push(("message".into(), Used::Template(t)));
                }
            }
            NodeKind::Wait(w) => {
                if let Some(t) = &w.correlation {
                    uses.push(("correlation".into(), Used::Template(t)));
                }
            }
            NodeKind::Join { .. } | NodeKind::Loop(_) => {}
        }
        for (field, used) in uses {
            check_used(wf, ghosts, &allowed, Some(&node.id), &field, used, sink);
        }
        if let NodeKind::Loop(l) = &node.kind {
            let mut inner = Allowed {
                nodes: allowed.nodes.clone(),
                loop_iteration: true,
                exit: allowed.exit,
                user: Some(i),
                ..Allowed::default()
            };
            if let Some(&t) = index.get(&l.node) {
                inner.nodes.insert(t);
            }
            let used = Used::Condition(&l.condition);
            check_used(wf, ghosts, &inner, Some(&node.id), "condition", used, sink);
        }
    }
    let out = everything_main();
    let used = Used::Template(&wf.output_mapping);
    check_used(wf, ghosts, &out, None, "output_mapping", used, sink);
}

/// Checks what one expression names, the statuses it compares with, and its functions.
fn check_used(
    wf: &Workflow,
    ghosts: &HashSet<String>,
    allowed: &Allowed,
    node: Option<&str>,
    field: &str,
    used: Used<'_>,
    sink: &mut Sink,
) {
    for p in used.paths() {
        check_path(wf, ghosts, allowed, node, field, p, sink);
    }
    for (path, literal) in used.literal_comparisons() {
        if let Some(message) = status_mismatch(wf, path, literal) {
            sink.push(node, field, message);
        }
    }
    for message in used.problems() {
        sink.push(node, field, message);
    }
}

/// The problem with comparing `path` to `literal`, when `path` is a status (a node's, or the
/// run's in `workflow.status`) and `literal` is no such status.
fn status_mismatch(wf: &Workflow, path: &Path, literal: &Value) -> Option<String> {
    let [Segment::Key(k)] = path.rest.as_slice() else {
        return None;
    };
    // A run's status as `workflow.status` shows it to exit handlers: one it ends with.
    let statuses: Vec<&str> = match (path.root.as_str(), k.as_str()) {
        ("workflow", "status") => RunStatus::ENDED.iter().map(|s| s.as_str()).collect(),
        (root, "status") if wf.graph.index.contains_key(root) => {
            NodeStatus::ALL.iter().map(|s| s.as_str()).collect()
        }
        _ => return None,
    };
    let shown = render(path);
    let Value::String(s) = literal else {
        return Some(format!(
            "'{shown}' is compared with {literal}, but a status is a string ({})",
            statuses.join(", ")
        ));
    };
    if statuses.contains(&s.as_str()) {
        return None;
    }
    Some(match did_you_mean(s, statuses.iter().copied()) {
        Some(m) => {
            format!("'{shown}' is compared with '{s}', which is not a status (did you mean '{m}'?)")
        }
        None => format!(
            "'{shown}' is compared with '{s}', which is not a status (statuses: {})",
            statuses.join(", ")
        ),
    })
}

/// The problem with what a path names below a node, if any: a node has `output` (and what
/// is inside it), `status` and `error`.
fn node_field(path: &Path, shown: &str) -> Option<String> {
    match path.rest.as_slice() {
        [] => None,
        [Segment::Key(k), ..] if k == "output" => None,
        [Segment::Key(k)] if k == "status" || k == "error" => None,
        [Segment::Key(k), _, ..] if k == "status" || k == "error" => Some(format!(
            "'{shown}': a node's {k} is a string, with nothing inside it"
        )),
        _ => Some(format!(
            "'{shown}' names no field of node '{}': a node has output, status and error (its output's fields are under output, as in {{{{{}.output.x}}}})",
            path.root, path.root
        )),
    }
}

fn check_path(
    wf: &Workflow,
    ghosts: &HashSet<String>,
    allowed: &Allowed,
    node: Option<&str>,
    field: &str,
    path: &Path,
    sink: &mut Sink,
) {
    let shown = render(path);
    let index: &HashMap<String, usize> = &wf.graph.index;
    let message = match path.root.as_str() {
        "workflow" => match path.rest.first() {
            Some(Segment::Key(k)) if k == "input" => None,
            Some(Segment::Key(k)) if (k == "name" || k == "version") && path.rest.len() == 1 => None,
            Some(Segment::Key(k)) if k == "status" || k == "error" => {
                (!allowed.exit).then(|| format!("'{shown}' is available only in exit handlers"))
            }
            _ => Some(format!(
                "'{shown}' names nothing: a template can use workflow.input, workflow.name, workflow.version (and workflow.status, workflow.error in exit handlers)"
            )),
        },
        "run" if !index.contains_key("run") => match path.rest.as_slice() {
            [Segment::Key(k)] if k == "id" || k == "started_at" => None,
            _ => Some(format!(
                "'{shown}' names nothing: the run has run.id and run.started_at"
            )),
        },
        "_map_item" | "_map_index" => (!allowed.map_item)
            .then(|| format!("'{shown}' is available only in the inner node of a map")),
        "_loop_iteration" => (!allowed.loop_iteration).then(|| {
            format!("'{shown}' is available only in the inner node of a loop and in the loop's condition")
        }),
        root => match index.get(root) {
            Some(j) if allowed.nodes.contains(j) => node_field(path, &shown),
            Some(j) if allowed.user == Some(*j) => Some(format!("'{shown}' names the node itself")),
            Some(_) if allowed.user.is_none() || allowed.exit => {
                Some(format!("'{shown}' names '{root}', which is not a node of the main DAG"))
            }
            Some(_) => Some(format!(
                "'{shown}' names node '{root}', which is not upstream of this node (add it to depends_on, directly or through another node)"
            )),
            None if ghosts.contains(root) => None,
            None => {
                let ids = wf.nodes.iter().map(|n| n.id.as_str());
                Some(match did_you_mean(root, ids) {
                    Some(m) => format!("'{shown}' names unknown node '{root}' (did you mean '{m}'?)"),
                    None => format!("'{shown}' names unknown node '{root}'"),
                })
            }
        },
    };
    if let Some(message) = message {
        sink.push(node, field, message);
    }
}
