//! Property tests of the core on the simulator: random valid DAGs (every node type), random
//! agent behaviour (late, duplicated, stale, contradicting answers, silence), random cancels
//! and approvals, and crashes between commit and side effects. Invariants: the run ends,
//! once; each node ends once, and none is left pending; nothing happens after the end;
//! runs are deterministic.
//!
//! `PROPTEST_CASES` raises the number of cases (64 by default, so the suite stays fast).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use serde_json::json;
use workflow_node::core::sim::{Answer, Reply, Sim};
use workflow_node::core::{
    apply, Command, Dispatch, Event, NodeStatus, Progress, RunStatus, Slot, TimerId,
};
use workflow_node::definition::{NodeKind, NodeRole, OnFailure, Workflow};

use workflows::{build, cases, load, workflow_spec};

use crate::support::workflows;

// ---------------------------------------------------------------------------------------
// Random agents and outside events
// ---------------------------------------------------------------------------------------

/// How an agent answers one call (the script cycles through a list of these).
#[derive(Debug, Clone)]
enum Behave {
    /// Succeed after `after` tenths of a second.
    Ok { after: u8, again: bool },
    /// Fail (with the non-retryable kind `fatal` when said).
    Fail { after: u8, fatal: bool },
    /// Never answer.
    Silence,
    /// Answer after every timeout has passed.
    Late { again: bool },
    /// Answer twice, the two answers `gap` tenths apart (the second one differs).
    Twice { after: u8, gap: u8, again: bool },
    /// First an answer for another attempt, then the real one.
    Stale { after: u8, again: bool },
    /// Fail and succeed for the same attempt, in either order.
    Contradict { after: u8, fail_first: bool },
}

fn behave() -> impl Strategy<Value = Behave> {
    prop_oneof![
        5 => (0..50u8, any::<bool>()).prop_map(|(after, again)| Behave::Ok { after, again }),
        2 => (0..50u8, any::<bool>()).prop_map(|(after, fatal)| Behave::Fail { after, fatal }),
        1 => Just(Behave::Silence),
        1 => any::<bool>().prop_map(|again| Behave::Late { again }),
        1 => (0..50u8, 0..20u8, any::<bool>()).prop_map(|(after, gap, again)| Behave::Twice { after, gap, again }),
        1 => (0..50u8, any::<bool>()).prop_map(|(after, again)| Behave::Stale { after, again }),
        1 => (0..50u8, any::<bool>()).prop_map(|(after, fail_first)| Behave::Contradict { after, fail_first }),
    ]
}

fn tenths(n: u8) -> Duration {
    Duration::from_millis(u64::from(n) * 100)
}

fn success(d: &Dispatch, attempt: u32, v: u64, again: bool) -> Event {
    Event::CallSucceeded {
        task: d.task.clone(),
        attempt,
        output: json!({"v": v, "again": again}),
    }
}

fn failure(d: &Dispatch, fatal: bool) -> Event {
    let failure = workflow_node::core::Failure {
        class: workflow_node::core::FailureClass::Failed,
        message: "scripted failure".into(),
        kind: fatal.then(|| "fatal".to_string()),
    };
    Event::CallFailed {
        task: d.task.clone(),
        attempt: d.attempt,
        failure,
    }
}

/// The reply to call number `k` under `script`; a `reliable` world answers every call.
fn reply(script: &[Behave], reliable: bool, k: u64, d: &Dispatch) -> Reply {
    let behaviour = &script[k as usize % script.len()];
    let behaviour = match behaviour {
        Behave::Fail { after, .. } | Behave::Contradict { after, .. } if reliable => &Behave::Ok {
            after: *after,
            again: k.is_multiple_of(2),
        },
        Behave::Silence | Behave::Late { .. } if reliable => &Behave::Ok {
            after: 0,
            again: false,
        },
        other => other,
    };
    match behaviour {
        Behave::Ok { after, again } => {
            Reply::ok(json!({"v": k, "again": again})).after(tenths(*after))
        }
        Behave::Fail { after, fatal } => Reply {
            after: tenths(*after),
            answer: Answer::Fail(
                "scripted failure".into(),
                fatal.then(|| "fatal".to_string()),
            ),
        },
        Behave::Silence => Reply::silence(),
        Behave::Late { again } => {
            Reply::ok(json!({"v": k, "again": again})).after(Duration::from_secs(400))
        }
        Behave::Twice { after, gap, again } => Reply {
            after: tenths(*after),
            answer: Answer::Events(vec![
                (Duration::ZERO, success(d, d.attempt, k, *again)),
                (tenths(*gap), success(d, d.attempt, k + 1000, !*again)),
            ]),
        },
        Behave::Stale { after, again } => {
            let other = if d.attempt > 1 {
                d.attempt - 1
            } else {
                d.attempt + 1
            };
            Reply {
                after: tenths(*after),
                answer: Answer::Events(vec![
                    (Duration::ZERO, success(d, other, k + 2000, !*again)),
                    (tenths(1), success(d, d.attempt, k, *again)),
                ]),
            }
        }
        Behave::Contradict { after, fail_first } => {
            let (ok, bad) = (success(d, d.attempt, k, false), failure(d, false));
            let events = if *fail_first {
                vec![bad, ok]
            } else {
                vec![ok, bad]
            };
            Reply {
                after: tenths(*after),
                answer: Answer::Events(events.into_iter().map(|e| (Duration::ZERO, e)).collect()),
            }
        }
    }
}

/// Everything outside the workflow: agents, a cancel, approval decisions, crashes.
#[derive(Debug, Clone)]
struct World {
    script: Vec<Behave>,
    /// Every call gets an answer (late, twice or stale, but never a failure or silence).
    reliable: bool,
    cancel_at: Option<u16>,
    /// (approval pick, at in tenths, approved, by alice).
    decisions: Vec<(u8, u16, bool, bool)>,
    crash_after_commit: BTreeSet<usize>,
    redeliver: BTreeSet<usize>,
}

fn world(crashes: bool) -> impl Strategy<Value = World> {
    let faults = if crashes { 0..4usize } else { 0..1usize };
    (
        vec(behave(), 1..40),
        any::<bool>(),
        proptest::option::weighted(0.3, 0..1200u16),
        vec(
            (
                any::<u8>(),
                0..1200u16,
                any::<bool>(),
                proptest::bool::weighted(0.8),
            ),
            0..4,
        ),
        btree_set(0..120usize, faults.clone()),
        btree_set(0..120usize, faults),
    )
        .prop_map(
            |(script, reliable, cancel_at, decisions, crash_after_commit, redeliver)| World {
                script,
                reliable,
                cancel_at,
                decisions,
                crash_after_commit,
                redeliver,
            },
        )
}

/// A simulator for `w` in `world`, not yet started.
fn sim<'w>(w: &'w Workflow, world: &World) -> Sim<'w> {
    let calls = Rc::new(Cell::new(0u64));
    let mut sim = Sim::new(w);
    for name in ["A", "B", "C", "X"] {
        let (calls, script, reliable) = (calls.clone(), world.script.clone(), world.reliable);
        sim = sim.agent(name, move |d| {
            let k = calls.get();
            calls.set(k + 1);
            reply(&script, reliable, k, d)
        });
    }
    sim.max_events = 20_000;
    sim.crash_after_commit = world.crash_after_commit.clone();
    sim.redeliver = world.redeliver.clone();
    if let Some(t) = world.cancel_at {
        sim.at(
            Duration::from_millis(u64::from(t) * 100),
            Event::CancelRequested { reason: None },
        );
    }
    let approvals: Vec<&str> = w
        .nodes
        .iter()
        .filter(|n| n.kind.type_name() == "approval")
        .map(|n| n.id.as_str())
        .collect();
    if !approvals.is_empty() {
        for (pick, at, approved, alice) in &world.decisions {
            let node = approvals[*pick as usize % approvals.len()].to_string();
            let by = Some(if *alice { "alice" } else { "mallory" }.to_string());
            let event = Event::ApprovalDecided {
                node,
                approved: *approved,
                by,
                comment: None,
            };
            sim.at(Duration::from_millis(u64::from(*at) * 100), event);
        }
    }
    sim
}

// ---------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------

fn finished_nodes(commands: &[Command]) -> Vec<&str> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Progress(Progress::NodeFinished { node_id, .. }) => Some(node_id.as_str()),
            _ => None,
        })
        .collect()
}

fn sub_task_ids(commands: &[Command]) -> Vec<&str> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Dispatch(d) => Some(d.sub_task_id.as_str()),
            _ => None,
        })
        .collect()
}

fn finishes(commands: &[Command]) -> usize {
    commands
        .iter()
        .filter(|c| matches!(c, Command::Finish { .. }))
        .count()
}

/// Each node ends at most once; each sub-task is dispatched at most once.
fn check_once(commands: &[Command]) -> Result<(), TestCaseError> {
    let mut seen = BTreeSet::new();
    for n in finished_nodes(commands) {
        prop_assert!(seen.insert(n), "node '{}' ended twice", n);
    }
    let mut seen = BTreeSet::new();
    for id in sub_task_ids(commands) {
        prop_assert!(seen.insert(id), "sub-task '{}' dispatched twice", id);
    }
    Ok(())
}

/// The run ended once, as the last thing it did, with every node ended and nothing left.
fn check_ended(w: &Workflow, sim: &Sim<'_>) -> Result<(), TestCaseError> {
    let out = sim.outcome();
    prop_assert!(
        sim.state.status.is_terminal(),
        "the run did not end: {:?} after {} events",
        sim.state.status,
        sim.events.len()
    );
    prop_assert_eq!(out.finishes, 1);
    prop_assert!(
        matches!(sim.commands.last(), Some(Command::Finish { .. })),
        "commands after Finish"
    );
    // A terminal run has no pending node: every node (exit handlers the outcome did not
    // select, inner nodes, nodes never reached) ended, and progress said so once.
    let reported: BTreeSet<&str> = finished_nodes(&sim.commands).into_iter().collect();
    for node in &w.nodes {
        let status = sim.state.node_status(&node.id);
        prop_assert!(
            status.is_terminal(),
            "node '{}' ended {:?}",
            node.id,
            status
        );
        prop_assert!(
            reported.contains(node.id.as_str()),
            "node '{}' ended {:?} but progress never said so",
            node.id,
            status
        );
    }
    prop_assert!(
        sim.state.exit_pending.is_empty(),
        "exit handlers left: {:?}",
        sim.state.exit_pending
    );
    prop_assert!(
        sim.state.calls.is_empty(),
        "calls left: {:?}",
        sim.state.calls.keys().collect::<Vec<_>>()
    );
    prop_assert_eq!(sim.state.in_flight, 0);
    if let Some(limit) = w.concurrency {
        prop_assert!(
            sim.max_running <= limit,
            "{} calls in flight, limit {}",
            sim.max_running,
            limit
        );
    }
    Ok(())
}

/// Rules visible in the command log: progress agrees with the final state; attempts stay
/// within `limit + 1`; exit handlers run only after the main DAG; under `fail_fast`, nothing
/// of the main DAG is dispatched after the first failure.
fn check_rules(w: &Workflow, sim: &Sim<'_>) -> Result<(), TestCaseError> {
    let role = |id: &str| w.graph.index.get(id).map(|&i| w.graph.roles[i]);
    let mut last_main_end = None;
    let mut first_failure = None;
    for (k, c) in sim.commands.iter().enumerate() {
        if let Command::Progress(Progress::NodeFinished {
            node_id, status, ..
        }) = c
        {
            prop_assert_eq!(
                sim.state.node_status(node_id),
                *status,
                "node '{}'",
                node_id
            );
            if role(node_id) == Some(NodeRole::Main) {
                last_main_end = Some(k);
                let halts = w.on_failure_of(w.node(node_id).expect("a node")) == OnFailure::Halt;
                if status.is_failed() && halts {
                    first_failure.get_or_insert(k);
                }
            }
        }
    }
    for (k, c) in sim.commands.iter().enumerate() {
        let Command::Dispatch(d) = c else { continue };
        let node = w.node(&d.task.node).expect("dispatched nodes exist");
        let call = match (&node.kind, d.task.slot) {
            (NodeKind::Fork { branches, .. }, Slot::Branch(b)) => &branches[b as usize].call,
            (NodeKind::Call(call), _) => call,
            (kind, slot) => panic!("dispatch of a {} node, slot {slot:?}", kind.type_name()),
        };
        let attempts = w.retry_strategy_for(call).map_or(1, |s| s.limit + 1);
        prop_assert!(
            d.attempt <= attempts,
            "{} dispatched attempt {} of {}",
            d.sub_task_id,
            d.attempt,
            attempts
        );
        if role(&d.task.node) == Some(NodeRole::ExitHandler) {
            prop_assert!(
                last_main_end.is_some_and(|e| e < k),
                "exit handler {} ran before the main DAG ended",
                d.task.node
            );
        } else if w.fail_fast {
            prop_assert!(
                first_failure.is_none_or(|f| k < f),
                "{} dispatched after a failure under fail_fast",
                d.sub_task_id
            );
        }
    }
    Ok(())
}

/// The error policy: only a failure under `halt` is the run's error, and no main node
/// started while a dependency it does not merely wait for (a join's `wait_for`) had failed
/// under `halt` or `skip_dependents`.
fn check_policy(w: &Workflow, sim: &Sim<'_>) -> Result<(), TestCaseError> {
    let policy = |id: &str| w.on_failure_of(w.node(id).expect("a node"));
    if let Some(id) = sim.state.error.as_ref().and_then(|e| e.node_id.as_deref()) {
        prop_assert_eq!(
            policy(id),
            OnFailure::Halt,
            "the run's error names '{}'",
            id
        );
    }
    for (i, node) in w.nodes.iter().enumerate() {
        let started = sim.state.nodes.get(&node.id).and_then(|n| n.started_at);
        if w.graph.roles[i] != NodeRole::Main || started.is_none() {
            continue;
        }
        let wait_for: &[String] = match &node.kind {
            NodeKind::Join { wait_for, .. } => wait_for,
            _ => &[],
        };
        for d in node.depends_on.iter().filter(|d| !wait_for.contains(d)) {
            let failed = sim.state.node_status(d).is_failed();
            prop_assert!(
                !failed || policy(d) == OnFailure::Continue,
                "'{}' started after '{}' failed under {:?}",
                node.id,
                d,
                policy(d)
            );
            if failed {
                prop_assert_eq!(
                    sim.state.nodes[d.as_str()].output.as_ref(),
                    Some(&json!(null)),
                    "a continued failure keeps a null output"
                );
            }
        }
    }
    Ok(())
}

/// Every event anyone could still send after the end: none changes anything.
fn late_events(w: &Workflow, sim: &Sim<'_>) -> Vec<Event> {
    let mut events = vec![
        Event::Started { input: json!({}) },
        Event::CancelRequested { reason: None },
    ];
    for c in &sim.commands {
        match c {
            Command::Dispatch(d) => {
                events.push(success(d, d.attempt, 7, true));
                events.push(failure(d, false));
            }
            Command::StartTimer { timer, .. } => events.push(Event::TimerFired {
                timer: timer.clone(),
            }),
            _ => {}
        }
    }
    events.push(Event::TimerFired {
        timer: TimerId::Deadline,
    });
    for n in w.nodes.iter().filter(|n| n.kind.type_name() == "approval") {
        for approved in [true, false] {
            let by = Some("alice".to_string());
            events.push(Event::ApprovalDecided {
                node: n.id.clone(),
                approved,
                by,
                comment: None,
            });
        }
    }
    events
}

fn check_absorbs(w: &Workflow, sim: &Sim<'_>) -> Result<(), TestCaseError> {
    let mut state = sim.state.clone();
    let later = sim.now.plus(Duration::from_secs(3600));
    for e in late_events(w, sim) {
        let commands = apply(w, &mut state, e.clone(), later);
        prop_assert!(
            commands.is_empty(),
            "{:?} after the end gave {:?}",
            e,
            commands
        );
        prop_assert_eq!(&state, &sim.state);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Every run ends, once, with every node ended once, and absorbs everything after.
    #[test]
    fn every_run_ends_once_and_absorbs_what_comes_after(spec in workflow_spec(), world in world(false)) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let mut sim = sim(&w, &world);
        sim.run(input);
        check_once(&sim.commands)?;
        check_ended(&w, &sim)?;
        check_rules(&w, &sim)?;
        check_policy(&w, &sim)?;
        check_absorbs(&w, &sim)?;
    }

    /// The same workflow and world give the same events and commands.
    #[test]
    fn runs_are_deterministic(spec in workflow_spec(), world in world(true)) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let mut one = sim(&w, &world);
        one.run(input.clone());
        let mut two = sim(&w, &world);
        two.run(input);
        prop_assert_eq!(&one.events, &two.events);
        prop_assert_eq!(&one.commands, &two.commands);
        prop_assert_eq!(&one.lost, &two.lost);
        prop_assert_eq!(&one.state, &two.state);
    }

    /// Events redelivered after their commands were carried out change nothing that shows:
    /// no node ends twice, nothing is dispatched twice, the run still ends once.
    #[test]
    fn redelivered_events_are_absorbed(spec in workflow_spec(), world in world(true)) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let world = World { crash_after_commit: BTreeSet::new(), ..world };
        let mut sim = sim(&w, &world);
        sim.run(input);
        check_once(&sim.commands)?;
        check_ended(&w, &sim)?;
    }

    /// A replica that commits and dies before carrying out the commands: the redelivered
    /// event, applied on the committed state, must not repeat side effects (a dispatch may
    /// only repeat with the same sub-task id), and no node may end twice.
    #[test]
    fn a_crash_between_commit_and_side_effects_repeats_nothing(spec in workflow_spec(), world in world(true)) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let mut sim = sim(&w, &world);
        sim.run(input);
        let mut all = sim.lost.clone();
        all.extend(sim.commands.iter().cloned());
        let mut ends: BTreeMap<&str, usize> = BTreeMap::new();
        for n in finished_nodes(&all) {
            *ends.entry(n).or_default() += 1;
        }
        for (n, count) in ends {
            prop_assert_eq!(count, 1, "node '{}' ended {} times counting lost batches", n, count);
        }
        prop_assert!(finishes(&all) <= 1);
        let carried: BTreeSet<&str> = sub_task_ids(&sim.commands).into_iter().collect();
        prop_assert_eq!(carried.len(), sub_task_ids(&sim.commands).len(), "a sub-task dispatched twice");
        let lost: BTreeSet<&str> = sub_task_ids(&sim.lost).into_iter().collect();
        for (_, commands) in &sim.redeliveries {
            for id in sub_task_ids(commands) {
                prop_assert!(lost.contains(id) || carried.contains(id), "redelivery dispatched a new sub-task '{}'", id);
            }
        }
        if sim.lost.is_empty() {
            check_ended(&w, &sim)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Liveness under crashes: with the shell's outbox (the crashed replica's committed
    /// commands are carried out on redelivery), the run still ends, once, every node once.
    #[test]
fn a_crash_between_commit_and_side_effects_still_ends_the_run(spec in workflow_spec(), world in world(true)) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let mut sim = sim(&w, &world);
        sim.outbox = true;
        sim.run(input);
        check_once(&sim.commands)?;
        check_ended(&w, &sim)?;
        check_rules(&w, &sim)?;
    }
}

// ---------------------------------------------------------------------------------------
// Crashes between commit and side effects, one by one
// ---------------------------------------------------------------------------------------

const CHAIN: &str = r#"
name: Chain
workflow:
  description: two steps
  nodes:
    - {id: a, type: agent, agent_name: Echo}
    - {id: b, type: agent, agent_name: Echo, depends_on: [a]}
  output_mapping: {b: "{{b.output.v}}"}
"#;

fn echo_sim(w: &Workflow) -> Sim<'_> {
    Sim::new(w).agent("Echo", |d| {
        Reply::ok(json!({"v": d.input["v"]})).after(Duration::from_millis(10))
    })
}

#[test]
fn a_crash_after_commit_is_redelivered_and_repeats_no_dispatch() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
    sim.crash_after_commit.insert(1); // a's answer
    sim.run(json!({"v": 3}));
    assert_eq!(sim.redeliveries.len(), 1);
    let (index, again) = &sim.redeliveries[0];
    assert_eq!(
        sim.events[*index].1, sim.events[1].1,
        "the same event came back"
    );
    assert!(
        sub_task_ids(again).is_empty(),
        "the redelivery dispatched {again:?}"
    );
    assert_eq!(sub_task_ids(&sim.lost), vec!["sim_b_x_1"]);
}

/// Re-applying a redelivered event gives nothing, so without the shell's outbox the crashed
/// replica's commands would be lost: the outbox is what carries them out.
#[test]
fn without_the_outbox_a_crash_after_commit_loses_its_commands() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
    sim.crash_after_commit.insert(0); // Started: a's dispatch and every timer are lost
    let out = sim.run(json!({"v": 3}));
    assert_eq!(out.status, None, "nothing left to drive the run");
    assert!(sim.commands.is_empty());
}

#[test]
fn with_the_outbox_lost_side_effects_of_a_result_are_carried_out_on_redelivery() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
    sim.outbox = true;
    sim.crash_after_commit.insert(1); // a's answer: b's dispatch is lost
    let out = sim.run(json!({"v": 3}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(out.output, Some(json!({"b": 3})));
}

#[test]
fn with_the_outbox_lost_side_effects_of_started_are_carried_out_on_redelivery() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
    sim.outbox = true;
    sim.crash_after_commit.insert(0);
    let out = sim.run(json!({"v": 3}));
    assert_eq!(out.status, Some(RunStatus::Success));
}

#[test]
fn with_the_outbox_a_lost_finish_is_sent_on_redelivery() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
    sim.outbox = true;
    sim.crash_after_commit.insert(2); // b's answer ends the run
    let out = sim.run(json!({"v": 3}));
    assert_eq!(out.finishes, 1, "lost: {:?}", sim.lost);
}

const DEADLINE: &str = r#"
name: Deadline
max_workflow_execution_time_seconds: 5
workflow:
  description: d
  on_exit: cleanup
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 1h}
    - {id: cleanup, type: agent, agent_name: Echo, input: {v: 1}}
  output_mapping: {}
"#;

#[test]
fn the_deadline_gives_exit_handlers_a_grace_period() {
    let w = load(DEADLINE);
    let mut sim = echo_sim(&w).agent("Slow", |_| Reply::silence());
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::TimedOut));
    assert_eq!(sim.state.node_status("cleanup"), NodeStatus::Success);
}

#[test]
fn a_redelivered_deadline_does_not_cut_the_exit_handlers_grace() {
    let w = load(DEADLINE);
    let mut sim = echo_sim(&w).agent("Slow", |_| Reply::silence());
    sim.redeliver.insert(1); // the deadline fires, its commands are carried out, no ack
    let out = sim.run(json!({}));
    assert!(matches!(
        sim.events[1].1,
        Event::TimerFired {
            timer: TimerId::Deadline
        }
    ));
    assert_eq!(out.status, Some(RunStatus::TimedOut));
    assert_eq!(sim.state.node_status("cleanup"), NodeStatus::Success);
}
