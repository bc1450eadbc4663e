//! The structural checks over the nodes (unique ids, references, roles, cycles, branch
//! targets, joins, implicit inputs) and the [`Graph`] derived from them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

use petgraph::graph::{DiGraph, NodeIndex};

use super::fields::did_you_mean;
use super::problem::Sink;
use super::{Graph, Node, NodeKind, NodeRole, Workflow};

/// Drops nodes whose id was already taken (reporting each), so that ids index the nodes.
pub(crate) fn dedup(nodes: Vec<Node>, ghosts: &HashSet<String>, sink: &mut Sink) -> Vec<Node> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        if seen.contains(&node.id) || ghosts.contains(&node.id) {
            sink.push(
                Some(&node.id),
                "id",
                format!("duplicate id '{}': ids must be unique", node.id),
            );
        } else {
            seen.insert(node.id.clone());
            out.push(node);
        }
    }
    out
}

/// Every node's transitive `depends_on`, by position (cycles tolerated).
pub(crate) fn ancestors(nodes: &[Node], index: &HashMap<String, usize>) -> Vec<HashSet<usize>> {
    (0..nodes.len())
        .map(|start| {
            let mut seen = HashSet::new();
            let mut stack = vec![start];
            while let Some(i) = stack.pop() {
                for d in &nodes[i].depends_on {
                    if let Some(&j) = index.get(d) {
                        if seen.insert(j) {
                            stack.push(j);
                        }
                    }
                }
            }
            seen.remove(&start);
            seen
        })
        .collect()
}

/// The node references of one node: (field, target id).
fn references(node: &Node) -> Vec<(String, &str)> {
    let mut out: Vec<(String, &str)> = node
        .depends_on
        .iter()
        .map(|d| ("depends_on".to_string(), d.as_str()))
        .collect();
    match &node.kind {
        NodeKind::Conditional {
            true_branch,
            false_branch,
            ..
        } => {
            out.push(("true_branch".into(), true_branch));
            if let Some(f) = false_branch {
                out.push(("false_branch".into(), f));
            }
        }
        NodeKind::Switch { cases, default } => {
            for (k, c) in cases.iter().enumerate() {
                out.push((format!("cases[{k}].then"), &c.target));
            }
            if let Some(d) = default {
                out.push(("default".into(), d));
            }
        }
        NodeKind::Map(m) => out.push(("node".into(), &m.node)),
        NodeKind::Loop(l) => out.push(("node".into(), &l.node)),
        NodeKind::Join { wait_for, .. } => out.extend(
            wait_for
                .iter()
                .map(|w| ("wait_for".to_string(), w.as_str())),
        ),
        NodeKind::Call(_) | NodeKind::Fork { .. } | NodeKind::Approval(_) | NodeKind::Wait(_) => {}
    }
    out
}

/// The branch targets of a conditional or switch: (field, target id).
fn branch_targets(node: &Node) -> Vec<(String, &str)> {
    references(node)
        .into_iter()
        .filter(|(field, _)| field != "depends_on" && field != "node" && field != "wait_for")
        .collect()
}

/// Runs every structural check and fills `wf.graph`.
pub(crate) fn check(wf: &mut Workflow, ghosts: &HashSet<String>, sink: &mut Sink) {
    let nodes = &wf.nodes;
    let index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.clone(), i))
        .collect();
    let known = Known {
        nodes,
        index: &index,
        ghosts,
    };
    let exits = exit_handlers(wf);
    check_references(&known, &exits, sink);
    let roles = assign_roles(nodes, &index, &exits, sink);
    check_dependencies(nodes, &index, &roles, sink);
    let acyclic = report_cycles(nodes, &index, sink);
    for node in nodes {
        check_branch_targets(node, &index, nodes, sink);
        match &node.kind {
            NodeKind::Join { wait_for, .. } => check_join(node, wait_for, &known, sink),
            NodeKind::Call(call) if call.input.is_none() => check_implicit_input(node, sink),
            _ => {}
        }
    }
    wf.graph = graph(nodes, index, roles, acyclic);
}

/// The node ids a reference may name: the nodes, and the ghosts (nodes that could not be
/// read, already reported).
struct Known<'a> {
    nodes: &'a [Node],
    index: &'a HashMap<String, usize>,
    ghosts: &'a HashSet<String>,
}

impl Known<'_> {
    fn exists(&self, id: &str) -> bool {
        self.index.contains_key(id) || self.ghosts.contains(id)
    }

    /// The message for a reference to a node that does not exist, with a suggestion.
    fn unknown(&self, id: &str) -> String {
        match did_you_mean(id, self.nodes.iter().map(|n| n.id.as_str())) {
            Some(m) => format!("unknown node '{id}' (did you mean '{m}'?)"),
            None => format!("unknown node '{id}'"),
        }
    }
}

/// The exit handlers as `(field, target)`, the field named as the file wrote it.
fn exit_handlers(wf: &Workflow) -> [(&'static str, &Option<String>); 4] {
    let on_exit_string = matches!(
        wf.source.get("on_exit").or_else(|| wf.source.get("onExit")),
        Some(serde_json::Value::String(_))
    );
    [
        (
            if on_exit_string {
                "on_exit"
            } else {
                "on_exit.always"
            },
            &wf.on_exit.always,
        ),
        ("on_exit.on_success", &wf.on_exit.on_success),
        ("on_exit.on_failure", &wf.on_exit.on_failure),
        ("on_exit.on_cancel", &wf.on_exit.on_cancel),
    ]
}

/// Every node reference and exit handler names a node.
fn check_references(known: &Known<'_>, exits: &[(&str, &Option<String>)], sink: &mut Sink) {
    for node in known.nodes {
        for (field, target) in references(node) {
            if !target.is_empty() && !known.exists(target) {
                sink.push(Some(&node.id), &field, known.unknown(target));
            }
        }
    }
    for (field, target) in exits {
        if let Some(t) = target {
            if !known.exists(t) {
                sink.push(None, field, known.unknown(t));
            }
        }
    }
}

/// Each node's role: the inner node of one map or loop (which must be a call), an exit
/// handler, or a main node.
fn assign_roles(
    nodes: &[Node],
    index: &HashMap<String, usize>,
    exits: &[(&str, &Option<String>)],
    sink: &mut Sink,
) -> Vec<NodeRole> {
    let mut roles = vec![NodeRole::Main; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        let (target, what) = match &node.kind {
            NodeKind::Map(m) => (&m.node, "map"),
            NodeKind::Loop(l) => (&l.node, "loop"),
            _ => continue,
        };
        let Some(&t) = index.get(target) else {
            continue;
        };
        if !matches!(nodes[t].kind, NodeKind::Call(_)) {
            sink.push(
                Some(&node.id),
                "node",
                format!(
                    "the inner node of a {what} must be an agent or workflow node, but '{target}' is a {} node",
                    nodes[t].kind.type_name()
                ),
            );
        }
        match roles[t] {
            NodeRole::Inner { owner } => sink.push(
                Some(&node.id),
                "node",
                format!(
                    "'{target}' is already the inner node of '{}'; a node can belong to only one map or loop",
                    nodes[owner].id
                ),
            ),
            _ => roles[t] = NodeRole::Inner { owner: i },
        }
    }
    for (field, target) in exits {
        let Some(&t) = target.as_ref().and_then(|t| index.get(t)) else {
            continue;
        };
        match roles[t] {
            NodeRole::Inner { owner } => sink.push(
                None,
                field,
                format!(
                    "'{}' is the inner node of '{}' and cannot also be an exit handler",
                    nodes[t].id, nodes[owner].id
                ),
            ),
            _ => roles[t] = NodeRole::ExitHandler,
        }
    }
    roles
}

/// Who may depend on whom, and no dependency listed twice.
fn check_dependencies(
    nodes: &[Node],
    index: &HashMap<String, usize>,
    roles: &[NodeRole],
    sink: &mut Sink,
) {
    let ancestors = ancestors(nodes, index);
    for (i, node) in nodes.iter().enumerate() {
        for (k, d) in node.depends_on.iter().enumerate() {
            if node.depends_on[..k].contains(d) {
                sink.push(
                    Some(&node.id),
                    "depends_on",
                    format!("'{d}' is listed twice"),
                );
            }
            let Some(&j) = index.get(d) else { continue };
            if let Some(message) = dependency_problem(nodes, &ancestors, roles, i, j) {
                sink.push(Some(&node.id), "depends_on", message);
            }
        }
    }
}

/// Why node `i` may not depend on node `j`, if it may not.
fn dependency_problem(
    nodes: &[Node],
    ancestors: &[HashSet<usize>],
    roles: &[NodeRole],
    i: usize,
    j: usize,
) -> Option<String> {
    let d = &nodes[j].id;
    match (roles[i], roles[j]) {
        (NodeRole::Inner { owner }, _) if !ancestors[owner].contains(&j) => Some(format!(
            "'{d}' is not upstream of '{}': the inner node of a map or loop may depend only on nodes its owner depends on",
            nodes[owner].id
        )),
        (NodeRole::Inner { .. }, _) => None,
        (NodeRole::ExitHandler, NodeRole::Main) => None,
        (NodeRole::ExitHandler, _) => Some(format!(
            "'{d}' is not a node of the main DAG: an exit handler may depend only on main nodes"
        )),
        (NodeRole::Main, NodeRole::Inner { owner }) => Some(format!(
            "'{d}' is the inner node of '{}' and runs only inside it; depend on '{}' instead",
            nodes[owner].id, nodes[owner].id
        )),
        (NodeRole::Main, NodeRole::ExitHandler) => Some(format!(
            "'{d}' is an exit handler and runs only after the workflow ends; no node of the main DAG can depend on it"
        )),
        (NodeRole::Main, NodeRole::Main) => None,
    }
}

/// The branch targets of a conditional or switch wait for it: otherwise they would run
/// before the decision.
fn check_branch_targets(
    node: &Node,
    index: &HashMap<String, usize>,
    nodes: &[Node],
    sink: &mut Sink,
) {
    if !matches!(
        node.kind,
        NodeKind::Conditional { .. } | NodeKind::Switch { .. }
    ) {
        return;
    }
    for (field, target) in branch_targets(node) {
        let Some(&t) = index.get(target) else {
            continue;
        };
        if !nodes[t].depends_on.contains(&node.id) {
            sink.push(
                Some(&node.id),
                &field,
                format!(
                    "branch target '{target}' must list '{}' in its depends_on; otherwise '{target}' would run immediately instead of waiting for the branch decision",
                    node.id
                ),
            );
        }
    }
}

/// A join waits only for nodes it depends on.
fn check_join(node: &Node, wait_for: &[String], known: &Known<'_>, sink: &mut Sink) {
    for w in wait_for {
        if known.exists(w) && !node.depends_on.contains(w) {
            sink.push(
                Some(&node.id),
                "wait_for",
                format!("'{w}' is not in depends_on: a join can wait only for nodes it depends on"),
            );
        }
    }
}

/// A call without `input` takes its one dependency's output; with two or more it would
/// be ambiguous.
fn check_implicit_input(node: &Node, sink: &mut Sink) {
    let mut distinct: Vec<&str> = Vec::new();
    for d in &node.depends_on {
        if !distinct.contains(&d.as_str()) {
            distinct.push(d);
        }
    }
    if distinct.len() >= 2 {
        sink.push(
            Some(&node.id),
            "input",
            format!(
                "missing field: with {} dependencies ({}) the implicit input would be ambiguous; map the input explicitly",
                distinct.len(),
                distinct.join(", ")
            ),
        );
    }
}

/// The derived graph; without a topological order when there is a cycle.
fn graph(
    nodes: &[Node],
    index: HashMap<String, usize>,
    roles: Vec<NodeRole>,
    acyclic: bool,
) -> Graph {
    let mut dependents = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for d in &node.depends_on {
            if let Some(&j) = index.get(d) {
                if !dependents[j].contains(&i) {
                    dependents[j].push(i);
                }
            }
        }
    }
    let main = |i: usize| roles[i] == NodeRole::Main;
    let roots: Vec<usize> = (0..nodes.len())
        .filter(|&i| main(i) && nodes[i].depends_on.is_empty())
        .collect();
    let topo_order = if acyclic {
        topo(nodes, &index, &dependents, &roles)
    } else {
        Vec::new()
    };
    Graph {
        index,
        dependents,
        roles,
        roots,
        topo_order,
    }
}

/// Reports every dependency cycle once, as `a -> b -> c -> a` (each node runs before the
/// next), at the cycle's first node in file order. Returns whether the graph is acyclic.
fn report_cycles(nodes: &[Node], index: &HashMap<String, usize>, sink: &mut Sink) -> bool {
    let mut g: DiGraph<usize, ()> = DiGraph::with_capacity(nodes.len(), 0);
    let ix: Vec<NodeIndex> = (0..nodes.len()).map(|i| g.add_node(i)).collect();
    for (i, node) in nodes.iter().enumerate() {
        for d in &node.depends_on {
            if let Some(&j) = index.get(d) {
                g.update_edge(ix[j], ix[i], ());
            }
        }
    }
    let mut cycles: Vec<Vec<usize>> = Vec::new();
    for scc in petgraph::algo::tarjan_scc(&g) {
        let members: HashSet<usize> = scc.iter().map(|n| g[*n]).collect();
        let Some(&start) = members.iter().min() else {
            continue;
        };
        let self_loop = g.contains_edge(ix[start], ix[start]);
        if members.len() < 2 && !self_loop {
            continue;
        }
        cycles.push(cycle_through(&g, &ix, &members, start));
    }
    cycles.sort();
    for cycle in &cycles {
        let mut names: Vec<&str> = cycle.iter().map(|&i| nodes[i].id.as_str()).collect();
        names.push(&nodes[cycle[0]].id);
        sink.push(
            Some(&nodes[cycle[0]].id),
            "depends_on",
            format!("dependency cycle: {}", names.join(" -> ")),
        );
    }
    cycles.is_empty()
}

/// The shortest cycle through `start` inside one strongly connected component, by position.
fn cycle_through(
    g: &DiGraph<usize, ()>,
    ix: &[NodeIndex],
    members: &HashSet<usize>,
    start: usize,
) -> Vec<usize> {
    let successors = |i: usize| {
        let mut s: Vec<usize> = g
            .neighbors(ix[i])
            .map(|n| g[n])
            .filter(|j| members.contains(j))
            .collect();
        s.sort_unstable();
        s
    };
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(i) = queue.pop_front() {
        for j in successors(i) {
            if j == start {
                let mut path = vec![i];
                let mut k = i;
                while k != start {
                    k = parent[&k];
                    path.push(k);
                }
                path.reverse();
                path.dedup();
                return path;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(j) {
                e.insert(i);
                queue.push_back(j);
            }
        }
    }
    vec![start]
}

/// Kahn's algorithm over the main nodes, taking the earliest ready node in file order.
fn topo(
    nodes: &[Node],
    index: &HashMap<String, usize>,
    dependents: &[Vec<usize>],
    roles: &[NodeRole],
) -> Vec<usize> {
    let main = |i: usize| roles[i] == NodeRole::Main;
    let mut missing: Vec<usize> = nodes
        .iter()
        .map(|n| {
            n.depends_on
                .iter()
                .filter_map(|d| index.get(d).copied())
                .filter(|&j| main(j))
                .collect::<HashSet<usize>>()
                .len()
        })
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = (0..nodes.len())
        .filter(|&i| main(i) && missing[i] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::new();
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &j in &dependents[i] {
            if main(j) {
                missing[j] -= 1;
                if missing[j] == 0 {
                    ready.push(Reverse(j));
                }
            }
        }
    }
    order
}
