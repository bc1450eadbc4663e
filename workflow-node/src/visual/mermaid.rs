//! The Mermaid diagram of a workflow (the seed spec's rules, as the reference drew them):
//! `graph TD`, `Start`/`Finish` stadiums, one shape per node type, dependency edges, branch
//! labels, map/loop/fork inner work drawn dotted, and exit handlers hanging off `Finish`.
//!
//! Output is deterministic: declarations in file order, then edges in file order.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::definition::{CallTarget, JoinStrategy, Node, NodeKind, NodeRole, Workflow};

/// The Mermaid source (`graph TD ...`) of `wf`'s diagram, ending with a newline.
pub fn mermaid(wf: &Workflow) -> String {
    let ids = Ids::new(wf);
    let mut d = Diagram::default();
    d.line("Start([Start])");
    for node in &wf.nodes {
        d.line(&declaration(node, ids.node(&node.id)));
        if let NodeKind::Fork { branches, .. } = &node.kind {
            for b in branches {
                let shape = call_shape(&b.call.target);
                d.line(&format!("{}{}", ids.branch(&node.id, &b.id), shape));
            }
        }
    }
    d.line("Finish([Finish])");

    let role = |i: usize| wf.graph.roles.get(i).copied().unwrap_or(NodeRole::Main);
    let position = |id: &str| wf.graph.index.get(id).copied();

    // Dependencies of the main DAG (and among exit handlers), branch edges labelled.
    for (i, node) in wf.nodes.iter().enumerate() {
        let my_role = role(i);
        if my_role == NodeRole::Main && node.depends_on.is_empty() {
            d.edge("Start", "-->", None, ids.node(&node.id));
        }
        for dep in &node.depends_on {
            let same_scope = position(dep).map(role) == Some(my_role);
            if matches!(my_role, NodeRole::Inner { .. }) || !same_scope {
                continue;
            }
            let labels = wf
                .node(dep)
                .map(|n| branch_labels(n, &node.id))
                .unwrap_or_default();
            if labels.is_empty() {
                d.edge(ids.node(dep), "-->", None, ids.node(&node.id));
            }
            for label in labels {
                d.edge(ids.node(dep), "-->", Some(&label), ids.node(&node.id));
            }
        }
    }

    // Work run by a node on its own behalf: map items, loop iterations, fork branches.
    for node in &wf.nodes {
        let me = ids.node(&node.id);
        match &node.kind {
            NodeKind::Map(m) => d.edge(me, "-.->", Some("each item"), ids.node(&m.node)),
            NodeKind::Loop(l) => {
                d.edge(me, "-.->", None, ids.node(&l.node));
                d.edge(ids.node(&l.node), "-.->", Some("repeat"), me);
            }
            NodeKind::Fork { branches, .. } => {
                for b in branches {
                    d.edge(me, "-.->", Some(&b.output_key), ids.branch(&node.id, &b.id));
                }
            }
            _ => {}
        }
    }

    // Sinks of the main DAG end the run.
    let mut any_main = false;
    for (i, node) in wf.nodes.iter().enumerate() {
        if role(i) != NodeRole::Main {
            continue;
        }
        any_main = true;
        let has_main_dependent = wf
            .graph
            .dependents
            .get(i)
            .is_some_and(|ds| ds.iter().any(|&j| role(j) == NodeRole::Main));
        if !has_main_dependent {
            d.edge(ids.node(&node.id), "-->", None, "Finish");
        }
    }
    if !any_main {
        d.edge("Start", "-->", None, "Finish");
    }

    // Exit handlers run after the main DAG, by outcome.
    let handlers = [
        ("always", &wf.on_exit.always),
        ("on_success", &wf.on_exit.on_success),
        ("on_failure", &wf.on_exit.on_failure),
        ("on_cancel", &wf.on_exit.on_cancel),
    ];
    for (label, handler) in handlers {
        if let Some(h) = handler {
            d.edge("Finish", "-.->", Some(label), ids.node(h));
        }
    }
    d.out
}

/// [`mermaid()`] with each node coloured by its status in a run (`classDef` per status, and
/// a `class` line per status naming its nodes); a node missing from `status` is pending.
pub fn mermaid_with_status(
    wf: &Workflow,
    status: &std::collections::BTreeMap<String, crate::core::NodeStatus>,
) -> String {
    use crate::core::NodeStatus as S;
    const STYLES: &[(S, &str)] = &[
        (S::Pending, "fill:#f4f4f4,stroke:#999,color:#666"),
        (S::Running, "fill:#dbeafe,stroke:#2563eb,color:#1e3a8a"),
        (S::Waiting, "fill:#fef3c7,stroke:#d97706,color:#78350f"),
        (S::Success, "fill:#dcfce7,stroke:#16a34a,color:#14532d"),
        (S::Failure, "fill:#fee2e2,stroke:#dc2626,color:#7f1d1d"),
        (
            S::Skipped,
            "fill:#f4f4f4,stroke:#bbb,color:#999,stroke-dasharray:4 3",
        ),
        (S::Cancelled, "fill:#e5e7eb,stroke:#4b5563,color:#374151"),
        (
            S::TimedOut,
            "fill:#fee2e2,stroke:#dc2626,color:#7f1d1d,stroke-dasharray:4 3",
        ),
    ];
    let ids = Ids::new(wf);
    let mut out = mermaid(wf);
    for (s, style) in STYLES {
        let members: Vec<&str> = wf
            .nodes
            .iter()
            .filter(|n| status.get(&n.id).copied().unwrap_or(S::Pending) == *s)
            .map(|n| ids.node(&n.id))
            .collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(out, "    classDef {} {style}", s.as_str());
        let _ = writeln!(out, "    class {} {}", members.join(","), s.as_str());
    }
    out
}

/// The labels of the branch edges from `from` to `to` (`True`, `False`, `Case i`,
/// `Default`); empty when `to` is not one of `from`'s branch targets.
fn branch_labels(from: &Node, to: &str) -> Vec<String> {
    let mut labels = Vec::new();
    match &from.kind {
        NodeKind::Conditional {
            true_branch,
            false_branch,
            ..
        } => {
            if true_branch == to {
                labels.push("True".to_owned());
            }
            if false_branch.as_deref() == Some(to) {
                labels.push("False".to_owned());
            }
        }
        NodeKind::Switch { cases, default } => {
            for (i, case) in cases.iter().enumerate() {
                if case.target == to {
                    labels.push(format!("Case {}", i + 1));
                }
            }
            if default.as_deref() == Some(to) {
                labels.push("Default".to_owned());
            }
        }
        _ => {}
    }
    labels
}

/// `id` followed by its shape and label.
fn declaration(node: &Node, id: &str) -> String {
    let title = escape(&title_case(&node.id));
    let shape = match &node.kind {
        NodeKind::Call(call) => call_shape(&call.target),
        NodeKind::Conditional { condition, .. } => format!(
            "{{\"<b>Decision</b><br/>{title}<br/>{}?\"}}",
            escape(condition.source())
        ),
        NodeKind::Switch { .. } => format!("{{\"<b>Switch</b><br/>{title}\"}}"),
        NodeKind::Map(_) => format!("((\"<b>Map</b><br/>{title}\"))"),
        NodeKind::Fork { .. } => format!("{{{{\"<b>Fork</b><br/>{title}\"}}}}"),
        NodeKind::Join { wait_for, strategy } => {
            let how = match strategy {
                JoinStrategy::All => "all".to_owned(),
                JoinStrategy::Any => "any".to_owned(),
                JoinStrategy::NOfM(n) => format!("{n} of {}", wait_for.len()),
            };
            format!("((\"<b>Join</b><br/>{title}<br/>{how}\"))")
        }
        NodeKind::Loop(l) => format!(
            "([\"<b>Loop</b><br/>{title}<br/>max {}\"])",
            l.max_iterations
        ),
        NodeKind::Approval(_) => format!("[/\"<b>Approval</b><br/>{title}\"\\]"),
        NodeKind::Wait(w) => format!(
            "[/\"<b>Wait</b><br/>{title}<br/>signal {}\"/]",
            escape(&w.signal)
        ),
    };
    format!("{id}{shape}")
}

/// The shape of an agent call (rounded) or a sub-workflow call (subroutine).
fn call_shape(target: &CallTarget) -> String {
    match target {
        CallTarget::Agent(name) => format!("(\"<b>Agent</b><br/>{}\")", escape(name)),
        CallTarget::Workflow(name) => format!("[[\"<b>Workflow</b><br/>{}\"]]", escape(name)),
    }
}

/// `check_risk` → `Check Risk` (the reference's node labels).
pub fn title_case(id: &str) -> String {
    id.split(['_', '-', '.', ' '])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut cs = w.chars();
            match cs.next() {
                Some(first) => first.to_uppercase().chain(cs).collect::<String>(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Makes `text` safe inside a quoted Mermaid label: quotes and angle brackets become
/// entity codes (`#quot;`, `#lt;`, `#gt;`), `|` too (it ends edge labels), newlines spaces.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '|' => out.push_str("#124;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A node id as a Mermaid id: characters other than `A-Za-z0-9_` (notably `-` and `.`)
/// become `_`. Ids Mermaid reserves (`end`, ...) or that collide with `Start`/`Finish`
/// get an `n_` prefix.
pub fn mermaid_id(id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    const RESERVED: &[&str] = &[
        "end",
        "graph",
        "subgraph",
        "flowchart",
        "style",
        "class",
        "classdef",
        "click",
        "linkstyle",
        "direction",
        "default",
    ];
    if clean.is_empty()
        || clean == "Start"
        || clean == "Finish"
        || RESERVED.contains(&clean.to_ascii_lowercase().as_str())
    {
        format!("n_{clean}")
    } else {
        clean
    }
}

/// Mermaid ids for every node and fork branch, unique even when two ids sanitise alike.
struct Ids {
    map: HashMap<String, String>,
}

impl Ids {
    fn new(wf: &Workflow) -> Ids {
        let mut used: HashSet<String> = ["Start", "Finish"].map(String::from).into();
        let mut map = HashMap::new();
        let mut claim = |key: String, base: String| {
            let mut candidate = base.clone();
            let mut n = 2;
            while !used.insert(candidate.clone()) {
                candidate = format!("{base}_{n}");
                n += 1;
            }
            map.insert(key, candidate);
        };
        for node in &wf.nodes {
            claim(node.id.clone(), mermaid_id(&node.id));
        }
        for node in &wf.nodes {
            if let NodeKind::Fork { branches, .. } = &node.kind {
                for b in branches {
                    let base = mermaid_id(&format!("{}_{}", node.id, b.id));
                    claim(branch_key(&node.id, &b.id), base);
                }
            }
        }
        Ids { map }
    }

    fn node<'a>(&'a self, id: &'a str) -> &'a str {
        self.map.get(id).map(String::as_str).unwrap_or(id)
    }

    fn branch(&self, fork: &str, branch: &str) -> &str {
        self.map
            .get(&branch_key(fork, branch))
            .map(String::as_str)
            .unwrap_or("unknown_branch")
    }
}

fn branch_key(fork: &str, branch: &str) -> String {
    // NUL cannot occur in a node id, so this never collides with a node's key.
    format!("{fork}\u{0}{branch}")
}

/// The text being written, four spaces of indentation per line.
struct Diagram {
    out: String,
}

impl Default for Diagram {
    fn default() -> Self {
        Diagram {
            out: String::from("graph TD\n"),
        }
    }
}

impl Diagram {
    fn line(&mut self, text: &str) {
        self.out.push_str("    ");
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn edge(&mut self, from: &str, arrow: &str, label: Option<&str>, to: &str) {
        // Writing to a String cannot fail.
        let _ = match label {
            Some(l) => writeln!(self.out, "    {from} {arrow}|{}| {to}", escape(l)),
            None => writeln!(self.out, "    {from} {arrow} {to}"),
        };
    }
}
