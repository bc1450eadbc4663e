//! Random valid workflows for the property tests, written out as YAML: 1 to 25 main nodes
//! of every type, edges only from earlier to later nodes (so the DAG is acyclic), branch
//! targets that list their branching node, joins waiting within their dependencies, inner
//! nodes for maps and loops, and exit handlers.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use workflow_node::definition::{parse_str, Workflow};

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
    /// `on_failure`: halt, continue, skip_dependents (inner nodes: continue only).
    policy: Option<u8>,
}

#[derive(Debug, Clone)]
pub(crate) struct WorkflowSpec {
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
        proptest::option::weighted(0.4, 0..3u8),
    )
        .prop_map(
            |(kind, deps, picks, agent, when, retry, timeout_s, policy)| NodeSpec {
                kind,
                deps,
                picks,
                agent,
                when,
                retry,
                timeout_s,
                policy,
            },
        )
}

pub(crate) fn workflow_spec() -> impl Strategy<Value = WorkflowSpec> {
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
pub(crate) fn build(spec: &WorkflowSpec) -> (String, Value) {
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
                    // A dependency has ended well (or was skipped) whenever its dependent's
                    // `when` is evaluated, so this holds exactly when `w` does, and a status
                    // not yet final (or wrong) would change what runs.
                    let when = match deps[i].first() {
                        Some(&d) => {
                            format!("{{{{{}.status}}}} in ['success', 'skipped'] and {w}", id(d))
                        }
                        None => w.to_string(),
                    };
                    obj.insert("when".into(), json!(when));
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
        if let Some(p) = s.policy {
            let name = ["halt", "continue", "skip_dependents"][p as usize % 3];
            obj.insert("on_failure".into(), json!(name));
        }
        let inner = inner.map(|mut v| {
            if s.policy == Some(1) {
                v["on_failure"] = json!("continue");
            }
            v
        });
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

pub(crate) fn load(yaml: &str) -> Workflow {
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

/// Cases per property: `PROPTEST_CASES`, or 64 (so the suite stays fast).
pub(crate) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}
