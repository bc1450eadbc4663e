//! Unit tests of `kinds.rs`.

use std::time::Duration;

use serde_json::json;

use super::super::testkit::{dispatches, started_timers, with_nodes, workflow, Run};
use super::super::types::{
    Command, Event, FailureClass, Millis, NodeStatus, Slot, TaskKey, TimerId,
};

fn key(node: &str, slot: Slot) -> TaskKey {
    TaskKey {
        node: node.into(),
        slot,
    }
}

#[test]
fn a_switch_takes_the_first_case_that_holds_and_skips_every_other_target() {
    let wf = with_nodes(
        "",
        r#"
    - id: s
      type: switch
      cases:
        - {condition: "{{workflow.input.n}} > 10", then: big}
        - {condition: "{{workflow.input.n}} > 1", then: some}
      default: none
    - {id: big, type: agent, agent_name: A, depends_on: [s]}
    - {id: some, type: agent, agent_name: A, depends_on: [s]}
    - {id: none, type: agent, agent_name: A, depends_on: [s]}
"#,
    );
    let (run, out) = Run::start(&wf, json!({"n": 50}));
    let started: Vec<&str> = dispatches(&out)
        .iter()
        .map(|d| d.node_id.as_str())
        .collect();
    assert_eq!(
        started,
        vec!["big"],
        "the first match wins, not the later one"
    );
    assert_eq!(run.status("some"), NodeStatus::Skipped);
    assert_eq!(run.status("none"), NodeStatus::Skipped);
    assert_eq!(
        run.st.nodes["s"].output,
        Some(json!({"selected_branch": "big", "selected_case_index": 0}))
    );
}

const MAP: &str = r#"
name: M
workflow:
  description: d
  nodes:
    - {id: m, type: map, node: each, items: "{{workflow.input.xs}}", concurrency_limit: 2}
    - {id: each, type: agent, agent_name: A, input: {x: "{{_map_item}}"}}
  output_mapping: {}
"#;

#[test]
fn a_map_keeps_its_limit_and_its_results_in_item_order() {
    let wf = workflow(MAP);
    let (mut run, out) = Run::start(&wf, json!({"xs": ["a", "b", "c"]}));
    let inputs: Vec<_> = dispatches(&out).iter().map(|d| d.input.clone()).collect();
    assert_eq!(inputs, vec![json!({"x": "a"}), json!({"x": "b"})]);
    let out = run.succeed(key("each", Slot::Item(1)), 1, json!("B"));
    assert_eq!(dispatches(&out)[0].task, key("each", Slot::Item(2)));
    run.succeed(key("each", Slot::Item(2)), 1, json!("C"));
    assert_eq!(run.status("m"), NodeStatus::Running);
    run.succeed(key("each", Slot::Item(0)), 1, json!("A"));
    assert_eq!(
        run.st.nodes["m"].output,
        Some(json!({"results": ["A", "B", "C"]}))
    );
    assert_eq!(run.status("each"), NodeStatus::Success);
}

#[test]
fn a_failed_map_item_cancels_the_items_in_flight() {
    let wf = workflow(MAP);
    let (mut run, _) = Run::start(&wf, json!({"xs": ["a", "b", "c"]}));
    let out = run.fail(key("each", Slot::Item(0)), 1, FailureClass::Failed);
    let cancelled: Vec<&TaskKey> = out
        .iter()
        .filter_map(|c| match c {
            Command::CancelCall { task, .. } => Some(task),
            _ => None,
        })
        .collect();
    assert_eq!(cancelled, vec![&key("each", Slot::Item(1))]);
    assert!(dispatches(&out).is_empty(), "item 2 never starts");
    assert_eq!(run.status("m"), NodeStatus::Failure);
    assert_eq!(run.status("each"), NodeStatus::Failure);
}

#[test]
fn a_fork_with_fail_fast_cancels_its_other_branches() {
    let wf = with_nodes(
        "",
        r#"
    - id: f
      type: fork
      branches:
        - {id: one, agent_name: A, output_key: first}
        - {id: two, agent_name: B, output_key: second}
"#,
    );
    let (mut run, _) = Run::start(&wf, json!({}));
    let out = run.fail(key("f", Slot::Branch(1)), 1, FailureClass::Failed);
    assert!(out.iter().any(|c| matches!(
        c,
        Command::CancelCall { task, agent, .. }
            if *task == key("f", Slot::Branch(0)) && agent == "A"
    )));
    assert_eq!(run.status("f"), NodeStatus::Failure);
    assert_eq!(run.error("f"), "branch 'two': agent 'B' failed: boom");
}

#[test]
fn a_loop_waits_its_delay_and_ignores_a_timer_for_another_iteration() {
    let wf = with_nodes(
        "",
        r#"
    - {id: l, type: loop, node: check, condition: "{{check.output.again}} == true", delay: 5s, max_iterations: 3}
    - {id: check, type: agent, agent_name: A}
"#,
    );
    let (mut run, _) = Run::start(&wf, json!({}));
    let out = run.succeed(key("check", Slot::Iteration(0)), 1, json!({"again": true}));
    assert!(dispatches(&out).is_empty());
    let delay = TimerId::LoopDelay {
        node: "l".into(),
        iteration: 1,
    };
    assert_eq!(started_timers(&out), vec![(&delay, Millis(5000))]);
    let before = run.st.clone();
    let stale = TimerId::LoopDelay {
        node: "l".into(),
        iteration: 7,
    };
    assert!(run.fire(stale).is_empty());
    assert_eq!(run.st, before);
    run.wait(Duration::from_secs(5));
    let out = run.fire(delay);
    assert_eq!(dispatches(&out)[0].task, key("check", Slot::Iteration(1)));
}

#[test]
fn an_approval_ignores_a_decision_from_someone_not_listed() {
    let wf = with_nodes(
        "",
        r#"
    - {id: gate, type: approval, approvers: [alice], timeout: 1m}
"#,
    );
    let (mut run, out) = Run::start(&wf, json!({}));
    assert!(out
        .iter()
        .any(|c| matches!(c, Command::RequestApproval { node, .. } if node == "gate")));
    assert_eq!(run.status("gate"), NodeStatus::Waiting);
    let decide = |by: &str| Event::ApprovalDecided {
        node: "gate".into(),
        approved: true,
        by: Some(by.into()),
        comment: None,
    };
    let before = run.st.clone();
    assert!(run.apply(decide("mallory")).is_empty());
    assert_eq!(run.st, before);
    let out = run.apply(decide("alice"));
    let timer = TimerId::ApprovalTimeout {
        node: "gate".into(),
    };
    assert!(out.contains(&Command::CancelTimer { timer }));
    assert_eq!(run.status("gate"), NodeStatus::Success);
}

#[test]
fn a_timer_fired_long_before_the_record_says_it_is_due_changes_nothing() {
    let wf = with_nodes(
        "",
        "    - {id: a, type: agent, agent_name: A, timeout: 5m}\n",
    );
    let (mut run, out) = Run::start(&wf, json!({}));
    assert_eq!(dispatches(&out).len(), 1);
    let a = key("a", Slot::Single);
    let timeout = TimerId::CallTimeout {
        task: a.clone(),
        attempt: 1,
    };
    // Forged or from a clock far ahead: neither the deadline nor the call's timeout counts.
    assert!(run.fire(TimerId::Deadline).is_empty());
    assert!(run.fire(timeout.clone()).is_empty());
    assert_eq!(run.status("a"), NodeStatus::Running);
    // Within the clock skew allowed between replicas, the timeout counts.
    run.wait(Duration::from_secs(300 - 30));
    let out = run.fire(timeout);
    assert!(!out.is_empty(), "the timeout fired within the tolerance");
    assert_ne!(run.status("a"), NodeStatus::Running);
}
