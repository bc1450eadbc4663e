//! Every example workflow under `examples/workflows` validates, and together they use every
//! node type and the features the examples are meant to show.

use std::collections::BTreeSet;
use std::path::PathBuf;

use workflow_node::definition::{load_paths, MapItems, NodeKind, NodeRole};

#[test]
fn every_example_validates_and_all_node_types_are_covered() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows");
    let (workflows, problems) = load_paths(&[dir]);
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(lines.is_empty(), "{}", lines.join("\n"));
    assert!(workflows.len() >= 4, "found {} examples", workflows.len());

    let mut seen = BTreeSet::new();
    for w in &workflows {
        for (i, n) in w.nodes.iter().enumerate() {
            seen.insert(n.kind.type_name().to_string());
            match &n.kind {
                NodeKind::Map(m) => seen.insert(match m.items {
                    MapItems::Template(_) => "map items".into(),
                    MapItems::Literal(_) => "map withItems".into(),
                }),
                NodeKind::Join { strategy, .. } => {
                    seen.insert(format!("join {strategy:?}").chars().take(9).collect())
                }
                NodeKind::Loop(l) if l.delay.is_some() => seen.insert("loop delay".into()),
                NodeKind::Call(c) if c.retry_strategy.is_some() => seen.insert("retries".into()),
                _ => false,
            };
            if w.graph.roles[i] == NodeRole::ExitHandler {
                seen.insert("exit handler".into());
            }
        }
        if w.on_exit.on_failure.is_some() {
            seen.insert("on_failure".into());
        }
        if w.on_exit.always.is_some() {
            seen.insert("always".into());
        }
    }
    for want in [
        "agent",
        "workflow",
        "conditional",
        "switch",
        "map",
        "fork",
        "join",
        "loop",
        "approval",
        "map items",
        "map withItems",
        "join All",
        "join Any",
        "join NOfM",
        "loop delay",
        "retries",
        "exit handler",
        "on_failure",
        "always",
    ] {
        assert!(
            seen.contains(want),
            "no example uses {want}; seen: {seen:?}"
        );
    }
}
