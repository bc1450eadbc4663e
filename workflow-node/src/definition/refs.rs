//! What templates and conditions may name: `workflow.input` everywhere, `workflow.status`
//! and `workflow.error` in exit handlers, nodes that run before the user (transitively
//! upstream), `_map_item`/`_map_index` in a map's inner node, and `_loop_iteration` in a
//! loop's inner node and its condition.

use std::collections::{HashMap, HashSet};

use workflow_expr::{Path, Segment};

use super::fields::did_you_mean;
use super::graph::ancestors;
use super::problem::Sink;
use super::{MapItems, NodeKind, NodeRole, Workflow};

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
        let mut uses: Vec<(String, Vec<&Path>)> = Vec::new();
        if let Some(w) = &node.when {
            uses.push(("when".into(), w.paths()));
        }
        match &node.kind {
            NodeKind::Call(call) => {
                if let Some(t) = &call.input {
                    uses.push(("input".into(), t.paths()));
                }
                if let Some(t) = &call.instruction {
                    uses.push(("instruction".into(), t.paths()));
                }
            }
            NodeKind::Conditional { condition, .. } => {
                uses.push(("condition".into(), condition.paths()))
            }
            NodeKind::Switch { cases, .. } => {
                for (k, c) in cases.iter().enumerate() {
                    uses.push((format!("cases[{k}].when"), c.condition.paths()));
                }
            }
            NodeKind::Map(m) => {
                if let MapItems::Template(t) = &m.items {
                    uses.push(("items".into(), t.paths()));
                }
            }
            NodeKind::Fork { branches, .. } => {
                for (k, b) in branches.iter().enumerate() {
                    if let Some(t) = &b.call.input {
                        uses.push((format!("branches[{k}].input"), t.paths()));
                    }
                    if let Some(t) = &b.call.instruction {
                        uses.push((format!("branches[{k}].instruction"), t.paths()));
                    }
                }
            }
            NodeKind::Approval(a) => {
                if let Some(t) = &a.message {
                    uses.push(("message".into(), t.paths()));
                }
            }
            NodeKind::Join { .. } | NodeKind::Loop(_) => {}
        }
        for (field, paths) in uses {
            for p in paths {
                check_path(wf, ghosts, &allowed, Some(&node.id), &field, p, sink);
            }
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
            for p in l.condition.paths() {
                check_path(wf, ghosts, &inner, Some(&node.id), "condition", p, sink);
            }
        }
    }
    let out = everything_main();
    for p in wf.output_mapping.paths() {
        check_path(wf, ghosts, &out, None, "output_mapping", p, sink);
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
            Some(Segment::Key(k)) if k == "status" || k == "error" => {
                (!allowed.exit).then(|| format!("'{shown}' is available only in exit handlers"))
            }
            _ => Some(format!(
                "'{shown}' names nothing: a template can use workflow.input (and workflow.status, workflow.error in exit handlers)"
            )),
        },
        "_map_item" | "_map_index" => (!allowed.map_item)
            .then(|| format!("'{shown}' is available only in the inner node of a map")),
        "_loop_iteration" => (!allowed.loop_iteration).then(|| {
            format!("'{shown}' is available only in the inner node of a loop and in the loop's condition")
        }),
        root => match index.get(root) {
            Some(j) if allowed.nodes.contains(j) => None,
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
