//! The `timed_out` outcome: a node that hit its timeout, a run that hit its deadline.

use super::*;

#[test]
fn a_node_that_hits_its_timeout_ends_timed_out_and_the_run_fails_naming_it() {
    let w = wf(r#"
name: T
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 500ms, retry_strategy: {limit: 1}}
    - {id: b, type: agent, agent_name: Echo, depends_on: [a]}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w)
        .agent("Slow", |_| Reply::silence())
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    // The run did not hit its deadline: it fails because of the node, kind `timeout`.
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(out.error.unwrap().kind.as_deref(), Some("timeout"));
    assert_eq!(sim.dispatches().len(), 2, "retried first");
    assert_eq!(status(&sim, "a"), NodeStatus::TimedOut);
    assert_eq!(NodeStatus::TimedOut.as_str(), "timed_out");
    assert_eq!(status(&sim, "b"), NodeStatus::Skipped);
    assert!(sim.commands.iter().any(|c| matches!(c,
        Command::Progress(Progress::NodeFinished { node_id, status: NodeStatus::TimedOut, .. })
            if node_id == "a")));
}

#[test]
fn an_agent_failure_is_not_a_timeout() {
    let w = wf(r#"
name: T
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Bad, timeout: 500ms}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Bad", |_| Reply::fail("no"));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_eq!(status(&sim, "a"), NodeStatus::Failure);
}

#[test]
fn a_timed_out_node_under_continue_lets_the_run_succeed() {
    let w = wf(r#"
name: T
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 500ms, on_failure: continue}
    - {id: b, type: agent, agent_name: Echo, depends_on: [a], input: {a: "{{a.output}}"}}
  output_mapping: {b: "{{b.output}}"}
"#);
    let mut sim = Sim::new(&w)
        .agent("Slow", |_| Reply::silence())
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"b": {"a": null}})));
    assert_eq!(status(&sim, "a"), NodeStatus::TimedOut);
}

#[test]
fn a_map_whose_item_timed_out_ends_timed_out() {
    let w = wf(r#"
name: M
workflow:
  description: d
  nodes:
    - {id: each, type: map, with_items: [1, 2], node: one}
    - {id: one, type: agent, agent_name: Slow, timeout: 1s}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Slow", |_| Reply::silence());
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_eq!(status(&sim, "each"), NodeStatus::TimedOut);
}

#[test]
fn an_approval_without_a_decision_in_time_ends_timed_out() {
    let w = wf(r#"
name: A
workflow:
  description: d
  nodes:
    - {id: gate, type: approval, timeout: 1m}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(status(&sim, "gate"), NodeStatus::TimedOut);
}

#[test]
fn a_run_past_its_deadline_ends_timed_out_and_its_failure_handlers_see_so() {
    let w = wf(r#"
name: D
max_workflow_execution_time_seconds: 5
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 1h}
    - {id: report, type: agent, agent_name: Echo, input: {status: "{{workflow.status}}"}}
  on_exit: {on_failure: report}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w)
        .agent("Slow", |_| Reply::silence())
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::TimedOut));
    assert_eq!(RunStatus::TimedOut.as_str(), "timed_out");
    assert!(RunStatus::TimedOut.is_terminal());
    assert_eq!(out.output, None);
    // A node the deadline stopped is cancelled; the run is what timed out.
    assert_eq!(status(&sim, "a"), NodeStatus::Cancelled);
    let report = sim.dispatches().into_iter().find(|d| d.node_id == "report");
    assert_eq!(report.unwrap().input, json!({"status": "timed_out"}));
}

#[test]
fn exit_handlers_that_outlive_the_deadline_time_the_run_out() {
    let w = wf(r#"
name: G
max_workflow_execution_time_seconds: 5
default_node_timeout_seconds: 2
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {}, timeout: 1h}
    - {id: cleanup, type: agent, agent_name: Slow, timeout: 1h}
  on_exit: {always: cleanup}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w)
        .agent("Slow", |_| Reply::silence())
        .agent("Echo", |d| Reply::ok(d.input.clone()).after(ms(4_000)));
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::TimedOut), "{:?}", out.error);
    assert!(out
        .error
        .unwrap()
        .message
        .contains("exit handlers did not end"));
}

#[test]
fn a_cancel_before_the_deadline_stays_cancelled() {
    let w = wf(r#"
name: C
max_workflow_execution_time_seconds: 5
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 1h}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Slow", |_| Reply::silence());
    sim.at(ms(100), Event::CancelRequested { reason: None });
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Cancelled));
}
