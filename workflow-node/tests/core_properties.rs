//! Property tests of the core on the simulator: random valid DAGs (every node type), random
//! agent behaviour (late, duplicated, stale, contradicting answers, silence), random cancels
//! and approvals, and crashes between commit and side effects. Invariants: the run ends,
//! once; each node ends once; nothing happens after the end; runs are deterministic.
//!
//! `PROPTEST_CASES` raises the number of cases (64 by default, so the suite stays fast).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use workflow_node::core::sim::{Answer, Reply, Sim};
use workflow_node::core::{
    apply, Command, Dispatch, Event, NodeStatus, Progress, RunStatus, Slot, TimerId,
};
use workflow_node::definition::{parse_str, NodeKind, NodeRole, Workflow};

// ---------------------------------------------------------------------------------------
// Random workflows
// ---------------------------------------------------------------------------------------

/// What one main node is, before ids and edges are resolved.
#[derive(Debug, Clone)]
enum KindSpec {
    Agent,
    Conditional {
        flag: u8,
        has_false: bool,
    },
    Switch {
        cases: u8,
        default: bool,
    },
    Map {
        len: u8,
        limit: Option<u8>,
        small_max: bool,
    },
    Fork {
        branches: u8,
        fail_fast: bool,
    },
    Join {
        strategy: u8,
        n: u8,
    },
    Loop {
        max: u8,
        delay: Option<u8>,
        fail_on_exhausted: bool,
    },
    Approval {
        timeout: u8,
        approve_on_timeout: bool,
        restricted: bool,
    },
}

#[derive(Debug, Clone)]
struct RetrySpec {
    limit: u8,
    policy: u8,
    backoff_s: u8,
    factor: u8,
}

/// One main node: its kind, which earlier nodes it depends on (a bitmask over the eight
/// nodes before it), picks for branch targets and `wait_for`, and agent-node options.
#[derive(Debug, Clone)]
struct NodeSpec {
    kind: KindSpec,
    deps: u8,
    picks: [u8; 3],
    agent: u8,
    when: Option<bool>,
    retry: Option<RetrySpec>,
    timeout_s: Option<u8>,
}

#[derive(Debug, Clone)]
struct WorkflowSpec {
    nodes: Vec<NodeSpec>,
    fail_fast: bool,
    concurrency: Option<u8>,
    deadline_s: u32,
    /// always, on_success, on_failure, on_cancel.
    exits: [bool; 4],
    flags: [bool; 8],
}

fn retry_spec() -> impl Strategy<Value = RetrySpec> {
    (0..3u8, 0..3u8, 1..4u8, 1..3u8).prop_map(|(limit, policy, backoff_s, factor)| RetrySpec {
        limit,
        policy,
        backoff_s,
        factor,
    })
}

fn kind_spec() -> impl Strategy<Value = KindSpec> {
    prop_oneof![
        6 => Just(KindSpec::Agent),
        1 => (0..8u8, any::<bool>())
            .prop_map(|(flag, has_false)| KindSpec::Conditional { flag, has_false }),
        1 => (1..4u8, any::<bool>()).prop_map(|(cases, default)| KindSpec::Switch { cases, default }),
        1 => (0..5u8, proptest::option::of(1..4u8), proptest::bool::weighted(0.2))
            .prop_map(|(len, limit, small_max)| KindSpec::Map { len, limit, small_max }),
        1 => (1..4u8, any::<bool>()).prop_map(|(branches, fail_fast)| KindSpec::Fork { branches, fail_fast }),
        1 => (0..3u8, any::<u8>()).prop_map(|(strategy, n)| KindSpec::Join { strategy, n }),
        1 => (1..5u8, proptest::option::of(1..4u8), any::<bool>())
            .prop_map(|(max, delay, fail_on_exhausted)| KindSpec::Loop { max, delay, fail_on_exhausted }),
        1 => (5..120u8, any::<bool>(), any::<bool>()).prop_map(|(timeout, approve_on_timeout, restricted)| {
            KindSpec::Approval { timeout, approve_on_timeout, restricted }
        }),
    ]
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        kind_spec(),
        any::<u8>(),
        any::<[u8; 3]>(),
        0..16u8,
        proptest::option::weighted(0.3, any::<bool>()),
        proptest::option::weighted(0.5, retry_spec()),
        proptest::option::weighted(0.5, 1..30u8),
    )
        .prop_map(
            |(kind, deps, picks, agent, when, retry, timeout_s)| NodeSpec {
                kind,
                deps,
                picks,
                agent,
                when,
                retry,
                timeout_s,
            },
        )
}

fn workflow_spec() -> impl Strategy<Value = WorkflowSpec> {
    (
        vec(node_spec(), 1..=25),
        any::<bool>(),
        proptest::option::weighted(0.3, 1..4u8),
        prop_oneof![Just(20u32), Just(120), Just(1800)],
        any::<[bool; 4]>(),
        any::<[bool; 8]>(),
    )
        .prop_map(
            |(nodes, fail_fast, concurrency, deadline_s, exits, flags)| WorkflowSpec {
                nodes,
                fail_fast,
                concurrency,
                deadline_s,
                exits,
                flags,
            },
        )
}

/// Agent names; "Nobody" has no card on the mesh (its calls are unreachable).
const AGENTS: [&str; 16] = [
    "A", "B", "C", "A", "B", "C", "A", "B", "C", "A", "B", "C", "A", "B", "C", "Nobody",
];
const EXITS: [&str; 4] = ["always", "on_success", "on_failure", "on_cancel"];

fn id(i: usize) -> String {
    format!("n{i}")
}

/// An agent node's call fields: agent, retry strategy, timeout.
fn call_fields(spec: &NodeSpec, obj: &mut Map<String, Value>) {
    obj.insert(
        "agent_name".into(),
        json!(AGENTS[spec.agent as usize % AGENTS.len()]),
    );
    if let Some(r) = &spec.retry {
        let policy = ["Always", "OnFailure", "OnError"][r.policy as usize % 3];
        obj.insert(
            "retry_strategy".into(),
            json!({
                "limit": r.limit,
                "retry_policy": policy,
                "backoff": {"duration": format!("{}s", r.backoff_s), "factor": r.factor},
                "non_retryable_errors": ["fatal"],
            }),
        );
    }
    if let Some(t) = spec.timeout_s {
        obj.insert("timeout".into(), json!(format!("{t}s")));
    }
}

/// The workflow file (as a JSON value; written out as YAML) and its input.
fn build(spec: &WorkflowSpec) -> (String, Value) {
    let n = spec.nodes.len();
    // Nodes that branch need a later node to target; joins need a dependency.
    let mut kinds: Vec<KindSpec> = spec.nodes.iter().map(|s| s.kind.clone()).collect();
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(n);
    for (i, s) in spec.nodes.iter().enumerate() {
        let lo = i.saturating_sub(8);
        let d: Vec<usize> = (lo..i)
            .filter(|j| s.deps & (1 << (i - 1 - j)) != 0)
            .take(3)
            .collect();
        deps.push(d);
        if matches!(
            kinds[i],
            KindSpec::Conditional { .. } | KindSpec::Switch { .. }
        ) && i + 1 >= n
        {
            kinds[i] = KindSpec::Agent;
        }
    }
    // Branch targets: later nodes, each listing the branching node in depends_on.
    let mut targets: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        let wanted = match kinds[i] {
            KindSpec::Conditional { has_false, .. } => 1 + usize::from(has_false),
            KindSpec::Switch { cases, default } => cases as usize + usize::from(default),
            _ => continue,
        };
        let later = n - i - 1;
        let mut t: Vec<usize> = Vec::new();
        for k in 0..wanted {
            let pick = spec.nodes[i].picks[k % 3] as usize + k;
            let j = i + 1 + pick % later;
            if !t.contains(&j) {
                t.push(j);
            }
        }
        for &j in &t {
            if !deps[j].contains(&i) {
                deps[j].push(i);
            }
        }
        targets[i] = t;
    }
    for i in 0..n {
        if matches!(kinds[i], KindSpec::Join { .. }) && deps[i].is_empty() {
            kinds[i] = KindSpec::Agent;
        }
    }

    let mut input = Map::new();
    for (k, f) in spec.flags.iter().enumerate() {
        input.insert(format!("f{k}"), json!(f));
    }
    let mut nodes: Vec<Value> = Vec::new();
    for (i, s) in spec.nodes.iter().enumerate() {
        let mut obj = Map::new();
        obj.insert("id".into(), json!(id(i)));
        if !deps[i].is_empty() {
            obj.insert(
                "depends_on".into(),
                json!(deps[i].iter().map(|&d| id(d)).collect::<Vec<_>>()),
            );
        }
        let explicit_input = || {
            let m: Map<String, Value> = deps[i]
                .iter()
                .map(|&d| (id(d), json!(format!("{{{{{}.output.v}}}}", id(d)))))
                .collect();
            Value::Object(m)
        };
        let mut inner: Option<Value> = None;
        match &kinds[i] {
            KindSpec::Agent => {
                obj.insert("type".into(), json!("agent"));
                call_fields(s, &mut obj);
                if let Some(w) = s.when {
                    obj.insert("when".into(), json!(w.to_string()));
                }
                if deps[i].len() >= 2 || s.picks[0] % 2 == 0 {
                    obj.insert("input".into(), explicit_input());
                }
            }
            KindSpec::Conditional { flag, .. } => {
                obj.insert("type".into(), json!("conditional"));
                obj.insert(
                    "condition".into(),
                    json!(format!("{{{{workflow.input.f{flag}}}}} == true")),
                );
                obj.insert("true_branch".into(), json!(id(targets[i][0])));
                if let Some(&f) = targets[i].get(1) {
                    obj.insert("false_branch".into(), json!(id(f)));
                }
            }
            KindSpec::Switch { default, .. } => {
                obj.insert("type".into(), json!("switch"));
                let t = &targets[i];
                let (cases, default) = if *default && t.len() >= 2 {
                    (&t[..t.len() - 1], t.last())
                } else {
                    (&t[..], None)
                };
                let cases: Vec<Value> = cases
                    .iter()
                    .enumerate()
                    .map(|(k, &j)| {
                        let flag = (s.picks[k % 3] as usize + k) % 8;
                        json!({"when": format!("{{{{workflow.input.f{flag}}}}} == true"), "then": id(j)})
                    })
                    .collect();
                obj.insert("cases".into(), json!(cases));
                if let Some(&d) = default {
                    obj.insert("default".into(), json!(id(d)));
                }
            }
            KindSpec::Map {
                len,
                limit,
                small_max,
            } => {
                obj.insert("type".into(), json!("map"));
                let key = format!("items_{i}");
                input.insert(key.clone(), json!((0..*len).collect::<Vec<_>>()));
                obj.insert(
                    "items".into(),
                    json!(format!("{{{{workflow.input.{key}}}}}")),
                );
                obj.insert("node".into(), json!(format!("{}_each", id(i))));
                if let Some(l) = limit {
                    obj.insert("concurrency_limit".into(), json!(l));
                }
                if *small_max {
                    obj.insert("max_items".into(), json!(2));
                }
                let mut each = Map::new();
                each.insert("id".into(), json!(format!("{}_each", id(i))));
                each.insert("type".into(), json!("agent"));
                call_fields(s, &mut each);
                each.insert(
                    "input".into(),
                    json!({"x": "{{_map_item}}", "i": "{{_map_index}}"}),
                );
                inner = Some(Value::Object(each));
            }
            KindSpec::Fork {
                branches,
                fail_fast,
            } => {
                obj.insert("type".into(), json!("fork"));
                obj.insert("fail_fast".into(), json!(fail_fast));
                let list: Vec<Value> = (0..*branches)
                    .map(|b| {
                        let mut br = Map::new();
                        br.insert("id".into(), json!(format!("br{b}")));
                        let bs = NodeSpec {
                            agent: s.agent.wrapping_add(b),
                            ..s.clone()
                        };
                        call_fields(&bs, &mut br);
                        br.insert("input".into(), json!({"b": b}));
                        br.insert("output_key".into(), json!(format!("out{b}")));
                        Value::Object(br)
                    })
                    .collect();
                obj.insert("branches".into(), json!(list));
            }
            KindSpec::Join { strategy, n: want } => {
                obj.insert("type".into(), json!("join"));
                let mut wait_for: Vec<String> = deps[i]
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| s.picks[1] & (1 << k) != 0)
                    .map(|(_, &d)| id(d))
                    .collect();
                if wait_for.is_empty() {
                    wait_for.push(id(deps[i][0]));
                }
                match strategy {
                    0 => obj.insert("strategy".into(), json!("all")),
                    1 => obj.insert("strategy".into(), json!("any")),
                    _ => {
                        obj.insert("n".into(), json!(1 + *want as usize % wait_for.len()));
                        obj.insert("strategy".into(), json!("n_of_m"))
                    }
                };
                obj.insert("wait_for".into(), json!(wait_for));
            }
            KindSpec::Loop {
                max,
                delay,
                fail_on_exhausted,
            } => {
                obj.insert("type".into(), json!("loop"));
                let body = format!("{}_body", id(i));
                obj.insert("node".into(), json!(body));
                obj.insert(
                    "condition".into(),
                    json!(format!("{{{{{body}.output.again}}}} == true")),
                );
                obj.insert("max_iterations".into(), json!(max));
                if let Some(d) = delay {
                    obj.insert("delay".into(), json!(format!("{d}s")));
                }
                if *fail_on_exhausted {
                    obj.insert("on_iterations_exhausted".into(), json!("fail"));
                }
                let mut each = Map::new();
                each.insert("id".into(), json!(body));
                each.insert("type".into(), json!("agent"));
                call_fields(s, &mut each);
                each.insert("input".into(), json!({"i": "{{_loop_iteration}}"}));
                inner = Some(Value::Object(each));
            }
            KindSpec::Approval {
                timeout,
                approve_on_timeout,
                restricted,
            } => {
                obj.insert("type".into(), json!("approval"));
                obj.insert("timeout".into(), json!(format!("{timeout}s")));
                let on_timeout = if *approve_on_timeout {
                    "approve"
                } else {
                    "reject"
                };
                obj.insert("on_timeout".into(), json!(on_timeout));
                if *restricted {
                    obj.insert("approvers".into(), json!(["alice"]));
                }
                obj.insert("message".into(), json!("go on? {{workflow.input.f0}}"));
            }
        }
        nodes.push(Value::Object(obj));
        nodes.extend(inner);
    }
    let mut on_exit = Map::new();
    for (k, name) in EXITS.iter().enumerate() {
        if spec.exits[k] {
            let hid = format!("x_{name}");
            on_exit.insert((*name).into(), json!(hid));
            nodes.push(json!({
                "id": hid, "type": "agent", "agent_name": "X", "timeout": "5s",
                "input": {"status": "{{workflow.status}}", "failed": "{{workflow.error.node_id}}"},
            }));
        }
    }
    let mut workflow = json!({
        "description": "random",
        "fail_fast": spec.fail_fast,
        "nodes": nodes,
        "output_mapping": {"last": format!("{{{{{}.output}}}}", id(n - 1))},
    });
    if !on_exit.is_empty() {
        workflow["on_exit"] = Value::Object(on_exit);
    }
    if let Some(c) = spec.concurrency {
        workflow["concurrency"] = json!(c);
    }
    let file = json!({
        "name": "Random",
        "max_workflow_execution_time_seconds": spec.deadline_s,
        "default_node_timeout_seconds": 10,
        "workflow": workflow,
    });
    let yaml = serde_yaml::to_string(&file).expect("a JSON value is valid YAML");
    (yaml, Value::Object(input))
}

fn load(yaml: &str) -> Workflow {
    match parse_str(yaml, "random.yaml") {
        Ok(w) => w,
        Err(problems) => panic!(
            "the generator made an invalid workflow:\n{}\n---\n{yaml}",
            problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

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
    for (i, node) in w.nodes.iter().enumerate() {
        if w.graph.roles[i] == NodeRole::Main {
            let status = sim.state.node_status(&node.id);
            prop_assert!(
                status.is_terminal(),
                "main node '{}' ended {:?}",
                node.id,
                status
            );
        }
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
                if *status == NodeStatus::Failure {
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

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
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

    /// Liveness under crashes: a run whose replica died between commit and side effects
    /// still ends, once, with the final reply sent.
    #[test]
    #[ignore = "bug: a redelivered event re-applied on the committed state gives no commands, so the crashed replica's dispatches, timers and Finish are lost for good (see lost_side_effects_*)"]
    fn a_crash_between_commit_and_side_effects_still_ends_the_run(spec in workflow_spec(), world in world(true)) {
        let (yaml, input) = build(&spec);
        let w = load(&yaml);
        let mut sim = sim(&w, &world);
        sim.run(input);
        check_ended(&w, &sim)?;
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

#[test]
#[ignore = "bug: core::apply (engine.rs) absorbs the redelivered event, so the commands the crashed replica committed but never carried out (here: Dispatch of b and its CallTimeout timer) are never issued; the run hangs until the run deadline"]
fn lost_side_effects_of_a_result_are_issued_again_on_redelivery() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
    sim.crash_after_commit.insert(1); // a's answer: b's dispatch is lost
    let out = sim.run(json!({"v": 3}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(out.output, Some(json!({"b": 3})));
}

#[test]
#[ignore = "bug: core::apply (engine.rs) absorbs a redelivered Started, so the crashed replica's Dispatch of a, CallTimeout and Deadline timers are never issued and the run never ends"]
fn lost_side_effects_of_started_are_issued_again_on_redelivery() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
    sim.crash_after_commit.insert(0);
    let out = sim.run(json!({"v": 3}));
    assert_eq!(out.status, Some(RunStatus::Success));
}

#[test]
#[ignore = "bug: core::apply returns nothing on a terminal state, so a Finish committed by a replica that crashed before sending it is never sent again: the caller gets no final result"]
fn a_lost_finish_is_sent_again_on_redelivery() {
    let w = load(CHAIN);
    let mut sim = echo_sim(&w);
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
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(sim.state.node_status("cleanup"), NodeStatus::Success);
}

#[test]
#[ignore = "bug: TimerId::Deadline names both the run deadline and the exit handlers' grace deadline, so Cx::deadline (engine.rs) takes a redelivered run-deadline TimerFired for the end of the grace and cancels the exit handlers at once"]
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
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(sim.state.node_status("cleanup"), NodeStatus::Success);
}
