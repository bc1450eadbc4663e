//! Property tests of pausing, resuming and retrying runs on the
//! simulator, over the random workflows of `support::workflows`: a paused run dispatches
//! nothing while paused and still ends once when resumed; a retry of any ended run never
//! runs a node it keeps, leaves those nodes as they were, and ends once with every node
//! ended.
//!
//! `PROPTEST_CASES` raises the number of cases (64 by default).

use std::cell::Cell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use serde_json::json;
use workflow_node::core::sim::{Reply, Sim};
use workflow_node::core::{
    call_of, retry_state, Command, Event, ExecutionId, NodeStatus, Progress, RunStatus,
};
use workflow_node::definition::Workflow;

#[allow(dead_code)]
use crate::support::workflows;
use workflows::{build, cases, load, workflow_spec};

/// How agents answer: call `k` follows `script[k % len]` (succeed or fail, after tenths of a
/// second); decisions approve every approval at the given tenths.
#[derive(Debug, Clone)]
struct World {
    script: Vec<(bool, u8)>,
    approve_at: Vec<u16>,
}

fn world() -> impl Strategy<Value = World> {
    (
        vec((proptest::bool::weighted(0.8), 0..30u8), 1..20),
        vec(0..600u16, 0..3),
    )
        .prop_map(|(script, approve_at)| World { script, approve_at })
}

fn tenths(n: u64) -> Duration {
    Duration::from_millis(n * 100)
}

fn sim<'w>(w: &'w Workflow, world: &World) -> Sim<'w> {
    let calls = Rc::new(Cell::new(0usize));
    let mut sim = Sim::new(w);
    for name in ["A", "B", "C", "X"] {
        let (calls, script) = (calls.clone(), world.script.clone());
        sim = sim.agent(name, move |d| {
            let k = calls.get();
            calls.set(k + 1);
            let (ok, after) = script[k % script.len()];
            let reply = if ok {
                Reply::ok(json!({"v": k, "node": d.node_id}))
            } else {
                Reply::fail("scripted failure")
            };
            reply.after(tenths(u64::from(after)))
        });
    }
    sim.max_events = 20_000;
    for node in w.nodes.iter().filter(|n| n.kind.type_name() == "approval") {
        for at in &world.approve_at {
            let event = Event::ApprovalDecided {
                node: node.id.clone(),
                approved: true,
                by: Some("alice".into()),
                comment: None,
            };
            sim.at(tenths(u64::from(*at)), event);
        }
    }
    sim
}

/// The run ended once, every node ended, nothing is left.
fn check_ended(w: &Workflow, sim: &Sim<'_>) -> Result<(), TestCaseError> {
    prop_assert!(
        sim.state.status.is_terminal(),
        "the run did not end: {:?}",
        sim.state.status
    );
    prop_assert_eq!(sim.outcome().finishes, 1);
    for node in &w.nodes {
        let status = sim.state.node_status(&node.id);
        prop_assert!(
            status.is_terminal(),
            "node '{}' ended {:?}",
            node.id,
            status
        );
    }
    prop_assert!(sim.state.calls.is_empty());
    prop_assert!(sim.state.queue.is_empty());
    prop_assert_eq!(sim.state.in_flight, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Paused in windows of random length, with crashes and redeliveries: no call is
    /// dispatched inside a window, and the run still ends once, with every node ended.
    #[test]
    fn nothing_is_dispatched_while_paused_and_the_run_still_ends(
        spec in workflow_spec(),
        world in world(),
        windows in vec((0..400u64, 1..400u64), 1..4),
        crashes in btree_set(0..120usize, 0..3),
        redeliver in btree_set(0..120usize, 0..3),
    ) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let mut sim = sim(&w, &world);
        // Replicas die between commit and side effects (the outbox carries them out on
        // redelivery), and events come twice.
        sim.outbox = true;
        sim.crash_after_commit = crashes;
        sim.redeliver = redeliver;
        let t0 = sim.now.0;
        let mut paused = Vec::new();
        let mut at = 0;
        for (gap, length) in windows {
            let (from, to) = (at + gap, at + gap + length);
            sim.at(tenths(from), Event::PauseRequested { reason: None });
            sim.at(tenths(to), Event::ResumeRequested);
            paused.push((t0 + from * 100, t0 + to * 100));
            at = to;
        }
        sim.run(input);
        check_ended(&w, &sim)?;
        // The deadline ends a pause (its exit handlers run in their grace).
        let deadline = t0 + u64::try_from(w.max_execution_time.as_millis()).unwrap();
        for d in sim.dispatches() {
            let timeout = call_of(&w, &d.task)
                .and_then(|c| c.timeout)
                .unwrap_or(w.default_node_timeout);
            let sent = d.deadline.0 - u64::try_from(timeout.as_millis()).unwrap();
            for (from, to) in &paused {
                prop_assert!(
                    sent >= deadline || !(*from < sent && sent < *to),
                    "{} dispatched at {} while paused from {} to {}",
                    d.sub_task_id, sent - t0, from - t0, to - t0
                );
            }
        }
    }

    /// A retry of any ended run that did not succeed runs none of the nodes it keeps,
    /// leaves them as they ended, says so in progress, and ends once.
    #[test]
    fn a_retry_runs_none_of_the_nodes_it_keeps_and_ends(
        spec in workflow_spec(),
        world in world(),
        cancel_at in proptest::option::weighted(0.3, 0..300u64),
    ) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let mut first = sim(&w, &world);
        if let Some(t) = cancel_at {
            first.at(tenths(t), Event::CancelRequested { reason: None });
        }
        first.run(input.clone());
        prop_assume!(matches!(
            first.state.status,
            RunStatus::Failure | RunStatus::Cancelled
        ));
        let reliable = World { script: vec![(true, 1)], ..world };
        let mut second = sim(&w, &reliable);
        second.state = retry_state(&w, &first.state, ExecutionId("retry".into()));
        let kept: BTreeSet<String> = second.state.nodes.keys().cloned().collect();
        for k in &kept {
            let status = first.state.node_status(k);
            prop_assert!(
                matches!(status, NodeStatus::Success | NodeStatus::Skipped)
                    || w.graph.index.get(k).is_some_and(|&i| !matches!(
                        w.graph.roles[i],
                        workflow_node::definition::NodeRole::Main
                    )),
                "kept '{}', which ended {:?}", k, status
            );
        }
        second.run(input);
        check_ended(&w, &second)?;
        for d in second.dispatches() {
            prop_assert!(!kept.contains(&d.task.node), "kept node '{}' was dispatched", d.task.node);
        }
        for k in &kept {
            prop_assert_eq!(&second.state.nodes[k], &first.state.nodes[k]);
        }
        let reported: BTreeSet<&str> = second
            .commands
            .iter()
            .filter_map(|c| match c {
                Command::Progress(Progress::NodeFinished { node_id, .. }) => Some(node_id.as_str()),
                _ => None,
            })
            .collect();
        for node in &w.nodes {
            prop_assert!(reported.contains(node.id.as_str()), "'{}' never reported", node.id);
        }
    }
}
