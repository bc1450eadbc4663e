//! Retrying an ended run from the nodes that did not succeed: a new run
//! that starts from `retry_state` of the old one, keeps what succeeded, and runs the rest.

use std::cell::Cell;
use std::rc::Rc;

use super::*;
use workflow_node::core::{retry_state, Dispatch, Execution, ExecutionId};

/// Runs `w` to its end with `agents` answering, then retries it with the same input;
/// returns both simulators.
fn run_then_retry<'w>(
    w: &'w Workflow,
    input: serde_json::Value,
    agents: impl Fn(Sim<'w>) -> Sim<'w>,
) -> (Sim<'w>, Sim<'w>) {
    let mut first = agents(Sim::new(w));
    first.run(input.clone());
    let mut second = agents(Sim::new(w));
    second.state = retry_state(w, &first.state, ExecutionId("retry".into()));
    second.run(input);
    (first, second)
}

/// An agent that fails its first `fails` calls, then echoes its input.
fn fails_first(fails: u32) -> impl FnMut(&Dispatch) -> Reply {
    let n = Rc::new(Cell::new(0));
    move |d| {
        n.set(n.get() + 1);
        if n.get() <= fails {
            Reply::fail("not yet")
        } else {
            Reply::ok(json!({"from": d.node_id}))
        }
    }
}

const CHAIN3: &str = r#"
name: Chain
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {v: "{{workflow.input.v}}"}}
    - {id: b, type: agent, agent_name: Flaky, depends_on: [a], input: {a: "{{a.output}}"}}
    - {id: c, type: agent, agent_name: Echo, depends_on: [b], input: {b: "{{b.output}}"}}
  output_mapping: {a: "{{a.output}}", c: "{{c.output}}"}
"#;

#[test]
fn a_retry_keeps_what_succeeded_and_runs_the_failed_node_and_what_follows() {
    let w = wf(CHAIN3);
    let flaky = Rc::new(std::cell::RefCell::new(fails_first(1)));
    let (first, second) = run_then_retry(&w, json!({"v": 7}), |sim| {
        let flaky = flaky.clone();
        sim.agent("Echo", echo)
            .agent("Flaky", move |d| (flaky.borrow_mut())(d))
    });
    assert_eq!(first.outcome().status, Some(RunStatus::Failure));
    assert_eq!(status(&first, "c"), NodeStatus::Skipped);
    let out = second.outcome();
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(
        dispatched(&second),
        vec!["b", "c"],
        "a is kept, not run again"
    );
    assert_eq!(
        out.output,
        Some(json!({"a": {"v": 7}, "c": {"b": {"from": "b"}}}))
    );
    assert_eq!(second.state.retry_of, Some(ExecutionId("sim".into())));
    assert_eq!(second.state.nodes["a"], first.state.nodes["a"]);
    // Its callers hear of the kept node as ended, with its output.
    let reported = second.commands.iter().any(|c| {
        matches!(c, Command::Progress(Progress::NodeFinished { node_id, status: NodeStatus::Success, output: Some(o), .. })
            if node_id == "a" && *o == json!({"v": 7}))
    });
    assert!(reported, "{:?}", second.commands);
}

#[test]
fn under_fail_fast_a_retry_runs_what_the_stop_left_unreached_and_keeps_parallel_successes() {
    let w = wf(r#"
name: P
workflow:
  description: d
  nodes:
    - {id: bad, type: agent, agent_name: Bad}
    - {id: after_bad, type: agent, agent_name: Echo, depends_on: [bad]}
    - {id: slow, type: agent, agent_name: Slow}
    - {id: after_slow, type: agent, agent_name: Echo, depends_on: [slow]}
  output_mapping: {}
"#);
    let bad = Rc::new(std::cell::RefCell::new(fails_first(1)));
    let (first, second) = run_then_retry(&w, json!({}), |sim| {
        let bad = bad.clone();
        sim.agent("Bad", move |d| (bad.borrow_mut())(d).after(ms(10)))
            .agent("Slow", |_| Reply::ok(json!({})).after(ms(100)))
            .agent("Echo", echo)
    });
    assert_eq!(status(&first, "slow"), NodeStatus::Success);
    assert_eq!(status(&first, "after_slow"), NodeStatus::Skipped);
    assert_eq!(second.outcome().status, Some(RunStatus::Success));
    let mut again = dispatched(&second);
    again.sort();
    assert_eq!(again, vec!["after_bad", "after_slow", "bad"]);
}

#[test]
fn a_branch_a_kept_conditional_did_not_take_stays_skipped() {
    let w = wf(r#"
name: B
workflow:
  description: d
  nodes:
    - {id: check, type: conditional, condition: "{{workflow.input.big}} == true", true_branch: big, false_branch: small}
    - {id: big, type: agent, agent_name: Echo, depends_on: [check]}
    - {id: small, type: agent, agent_name: Flaky, depends_on: [check]}
    - {id: done, type: agent, agent_name: Echo, depends_on: [big, small], input: {}}
  output_mapping: {}
"#);
    let flaky = Rc::new(std::cell::RefCell::new(fails_first(1)));
    let (first, second) = run_then_retry(&w, json!({"big": false}), |sim| {
        let flaky = flaky.clone();
        sim.agent("Echo", echo)
            .agent("Flaky", move |d| (flaky.borrow_mut())(d))
    });
    assert_eq!(status(&first, "small"), NodeStatus::Failure);
    assert_eq!(second.outcome().status, Some(RunStatus::Success));
    assert_eq!(dispatched(&second), vec!["small", "done"]);
    assert_eq!(status(&second, "big"), NodeStatus::Skipped);
    assert_eq!(status(&second, "check"), NodeStatus::Success);
}

#[test]
fn a_failed_map_runs_all_its_items_again() {
    let w = wf(r#"
name: M
workflow:
  description: d
  nodes:
    - {id: m, type: map, node: each, items: "{{workflow.input.xs}}"}
    - {id: each, type: agent, agent_name: Flaky, input: {x: "{{_map_item}}"}}
  output_mapping: {results: "{{m.output.results}}"}
"#);
    // Item 1 fails in the first run only.
    let first_run = Rc::new(Cell::new(true));
    let (first, second) = run_then_retry(&w, json!({"xs": [0, 1, 2]}), |sim| {
        let first_run = first_run.clone();
        sim.agent("Flaky", move |d| {
            if d.input["x"] == json!(1) && first_run.replace(false) {
                Reply::fail("item 1 broke")
            } else {
                Reply::ok(d.input["x"].clone())
            }
        })
    });
    assert_eq!(first.outcome().status, Some(RunStatus::Failure));
    let out = second.outcome();
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"results": [0, 1, 2]})));
    assert_eq!(second.dispatches().len(), 3);
}

#[test]
fn a_cancelled_run_is_retried_from_where_the_cancel_stopped_it() {
    let w = wf(CHAIN3);
    let mut first = Sim::new(&w)
        .agent("Echo", echo)
        .agent("Flaky", |_| Reply::silence());
    first.at(ms(500), Event::CancelRequested { reason: None });
    first.run(json!({"v": 1}));
    assert_eq!(first.outcome().status, Some(RunStatus::Cancelled));
    let mut second = Sim::new(&w)
        .agent("Echo", echo)
        .agent("Flaky", |d| Reply::ok(json!({"from": d.node_id})));
    second.state = retry_state(&w, &first.state, ExecutionId("r".into()));
    assert!(!second.state.started);
    let kept: Vec<&String> = second.state.nodes.keys().collect();
    assert_eq!(kept, vec!["a"]);
    let out = second.run(json!({"v": 1}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(dispatched(&second), vec!["b", "c"]);
}

#[test]
fn a_retry_state_survives_a_serde_round_trip() {
    let w = wf(CHAIN3);
    let mut first = Sim::new(&w)
        .agent("Echo", echo)
        .agent("Flaky", |_| Reply::fail("no"));
    first.run(json!({"v": 1}));
    let state = retry_state(&w, &first.state, ExecutionId("r".into()));
    let text = serde_json::to_string(&state).unwrap();
    let back: Execution = serde_json::from_str(&text).unwrap();
    assert_eq!(back, state);
}
