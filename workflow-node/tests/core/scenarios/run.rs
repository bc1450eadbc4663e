//! Run-level rules: the deadline, fail_fast, exit handlers, cancel, the run's concurrency, duplicate and stale answers, progress.

use super::agent::{doubler, flaky, retry_wf, CHAIN};
use super::approval::{decide, APPROVAL};
use super::branches::BRANCHY;
use super::loops::{poller, LOOP};
use super::*;

#[test]
fn the_workflow_deadline_times_the_run_out_and_cancels_running_calls() {
    let w = wf(r#"
name: D
max_workflow_execution_time_seconds: 5
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 1h}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Slow", |_| Reply::silence());
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::TimedOut));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("max_workflow_execution_time_seconds (5 s)"));
    assert_eq!(status(&sim, "a"), NodeStatus::Cancelled);
    assert!(sim
        .commands
        .iter()
        .any(|c| matches!(c, Command::CancelCall { .. })));
}

const PARALLEL: &str = r#"
name: P
workflow:
  description: d
  fail_fast: FF
  nodes:
    - {id: bad, type: agent, agent_name: Bad}
    - {id: after_bad, type: agent, agent_name: Echo, depends_on: [bad]}
    - {id: slow, type: agent, agent_name: Slow}
    - {id: after_slow, type: agent, agent_name: Echo, depends_on: [slow]}
  output_mapping: {}
"#;

#[test]
fn fail_fast_starts_nothing_new_and_fails_once_running_nodes_end() {
    let w = wf(&PARALLEL.replace("FF", "true"));
    let mut sim = Sim::new(&w)
        .agent("Bad", |_| Reply::fail("broken").after(ms(10)))
        .agent("Slow", |_| Reply::ok(json!({})).after(ms(100)))
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    let err = out.error.unwrap();
    assert_eq!(err.node_id.as_deref(), Some("bad"));
    assert!(err.message.contains("broken"));
    assert_eq!(
        status(&sim, "slow"),
        NodeStatus::Success,
        "running nodes run to their end"
    );
    assert_eq!(
        status(&sim, "after_slow"),
        NodeStatus::Skipped,
        "nothing new starts"
    );
    assert_eq!(status(&sim, "after_bad"), NodeStatus::Skipped);
}

#[test]
fn without_fail_fast_independent_branches_finish_and_dependents_are_skipped() {
    let w = wf(&PARALLEL.replace("FF", "false"));
    let mut sim = Sim::new(&w)
        .agent("Bad", |_| Reply::fail("broken").after(ms(10)))
        .agent("Slow", |_| Reply::ok(json!({})).after(ms(100)))
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(status(&sim, "after_slow"), NodeStatus::Success);
    assert_eq!(status(&sim, "after_bad"), NodeStatus::Skipped);
}

const EXITS: &str = r#"
name: E
workflow:
  description: d
  on_exit: {always: cleanup, on_failure: alert, on_cancel: undo, on_success: celebrate}
  nodes:
    - {id: work, type: agent, agent_name: Worker}
    - {id: cleanup, type: agent, agent_name: Echo, input: {status: "{{workflow.status}}", err: "{{workflow.error.node_id}}"}}
    - {id: alert, type: agent, agent_name: Echo, input: {}}
    - {id: undo, type: agent, agent_name: Echo, input: {}}
    - {id: celebrate, type: agent, agent_name: Echo, input: {}}
  output_mapping: {w: "{{work.output}}"}
"#;

#[test]
fn exit_handlers_do_not_run_at_start_and_run_after_the_dag_by_outcome() {
    let w = wf(EXITS);
    let mut sim = Sim::new(&w)
        .agent("Worker", |_| Reply::ok(json!(1)).after(ms(50)))
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(dispatched(&sim), vec!["work", "celebrate", "cleanup"]);
    assert_eq!(
        sim.dispatches()[2].input,
        json!({"status": "success", "err": null})
    );

    let mut sim = Sim::new(&w)
        .agent("Worker", |_| Reply::fail("no"))
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(dispatched(&sim), vec!["work", "alert", "cleanup"]);
    assert_eq!(
        sim.dispatches()[2].input,
        json!({"status": "failure", "err": "work"})
    );
}

#[test]
fn exit_handlers_are_awaited_before_the_final_result() {
    let w = wf(EXITS);
    let mut sim = Sim::new(&w)
        .agent("Worker", |_| Reply::ok(json!(1)))
        .agent("Echo", |_| Reply::ok(json!({})).after(ms(700)));
    let start = sim.now.0;
    let out = sim.run(json!({}));
    assert_eq!(out.finishes, 1);
    assert_eq!(
        sim.now.0 - start,
        700,
        "the finish waits for the slow handlers"
    );
}

#[test]
fn cancel_stops_running_nodes_runs_cancel_handlers_and_ends_cancelled() {
    let w = wf(EXITS);
    let mut sim = Sim::new(&w)
        .agent("Worker", |_| Reply::silence())
        .agent("Echo", echo);
    sim.at(
        ms(100),
        Event::CancelRequested {
            reason: Some("user".into()),
        },
    );
    sim.at(ms(200), Event::CancelRequested { reason: None });
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Cancelled));
    assert_eq!(out.finishes, 1);
    assert_eq!(status(&sim, "work"), NodeStatus::Cancelled);
    assert_eq!(dispatched(&sim), vec!["work", "undo", "cleanup"]);
    assert!(sim
        .commands
        .iter()
        .any(|c| matches!(c, Command::CancelCall { agent, .. } if agent == "Worker")));
    assert!(out.error.unwrap().message.contains("cancelled: user"));
}

#[test]
fn the_workflow_concurrency_caps_calls_in_flight() {
    let w = wf(r#"
name: C
workflow:
  description: d
  concurrency: 2
  nodes:
    - {id: a, type: agent, agent_name: S}
    - {id: b, type: agent, agent_name: S}
    - {id: c, type: agent, agent_name: S}
    - {id: d, type: agent, agent_name: S}
    - {id: e, type: agent, agent_name: S}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("S", |_| Reply::ok(json!(1)).after(ms(10)));
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(sim.max_running, 2);
    assert_eq!(sim.dispatches().len(), 5);
}

#[test]
fn duplicate_and_stale_answers_are_absorbed() {
    let w = wf(CHAIN);
    let mut sim = Sim::new(&w).agent("Doubler", doubler);
    sim.duplicate_answers = true;
    let out = sim.run(json!({"value": 1}));
    assert_eq!(out.output, Some(json!({"result": 4})));
    assert_eq!(sim.dispatches().len(), 2);
    // A late answer after the end changes nothing.
    let before = sim.state.clone();
    let task = sim.dispatches()[0].task.clone();
    sim.apply(Event::CallSucceeded {
        task,
        attempt: 1,
        output: json!({"value": 99}),
    });
    assert_eq!(sim.state, before);
    assert_eq!(sim.outcome().finishes, 1);
}

#[test]
fn progress_reports_each_main_node_ending_once() {
    let w = wf(BRANCHY);
    let mut sim = Sim::new(&w).agent("Echo", echo);
    sim.duplicate_answers = true;
    sim.run(json!({"label": "x"}));
    let ended: Vec<String> = sim
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::Progress(Progress::NodeFinished { node_id, .. }) => Some(node_id.clone()),
            _ => None,
        })
        .collect();
    let mut sorted = ended.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ended.len(), "{ended:?}");
    assert_eq!(sorted, vec!["check", "merge", "no", "yes"]);
}

#[test]
fn an_ended_run_leaves_no_timer_armed() {
    let w = retry_wf(", retry_strategy: {limit: 3, backoff: {duration: 1s}}");
    let mut sim = Sim::new(&w).agent("Flaky", flaky(1, None));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(
        sim.armed_timers(),
        vec![],
        "call timeouts and the deadline are disarmed"
    );
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1h"));
    let mut sim = Sim::new(&w).agent("Echo", echo);
    sim.at(ms(10), decide(true, "alice"));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(
        sim.armed_timers(),
        vec![],
        "the approval timeout is disarmed"
    );
}

#[test]
fn inner_nodes_are_reported_once_when_their_owner_ends() {
    let w = wf(&LOOP.replace("MAX", "10").replace("EXTRA", ""));
    let mut sim = Sim::new(&w).agent("Poller", poller(2));
    sim.run(json!({}));
    let reports: Vec<(NodeStatus, Option<serde_json::Value>)> = sim
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::Progress(Progress::NodeFinished {
                node_id,
                status,
                output,
                ..
            }) if node_id == "check" => Some((*status, output.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reports,
        vec![(NodeStatus::Success, Some(json!({"ready": true, "i": 2})))]
    );
}

/// How each node ended, in the order progress reported it: one entry per report.
fn reported(sim: &Sim<'_>) -> Vec<(String, NodeStatus)> {
    sim.commands
        .iter()
        .filter_map(|c| match c {
            Command::Progress(Progress::NodeFinished {
                node_id, status, ..
            }) => Some((node_id.clone(), *status)),
            _ => None,
        })
        .collect()
}

/// Every node of `w` is reported once, as it ended in the state, and none is pending.
fn assert_every_node_reported_once(w: &Workflow, sim: &Sim<'_>) {
    let reports = reported(sim);
    for node in &w.nodes {
        let mine: Vec<NodeStatus> = reports
            .iter()
            .filter(|(id, _)| *id == node.id)
            .map(|(_, s)| *s)
            .collect();
        let state = status(sim, &node.id);
        assert_ne!(state, NodeStatus::Pending, "'{}' left pending", node.id);
        assert_eq!(mine, vec![state], "'{}' reported as {mine:?}", node.id);
    }
}

#[test]
fn exit_handlers_the_outcome_did_not_select_end_skipped() {
    let w = wf(EXITS);
    let mut sim = Sim::new(&w)
        .agent("Worker", |_| Reply::ok(json!(1)))
        .agent("Echo", echo);
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
    assert_every_node_reported_once(&w, &sim);
    for unselected in ["alert", "undo"] {
        assert_eq!(status(&sim, unselected), NodeStatus::Skipped);
    }

    let mut sim = Sim::new(&w)
        .agent("Worker", |_| Reply::fail("no"))
        .agent("Echo", echo);
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_every_node_reported_once(&w, &sim);
    for unselected in ["celebrate", "undo"] {
        assert_eq!(status(&sim, unselected), NodeStatus::Skipped);
    }
    let error = sim.state.nodes["celebrate"].error.clone();
    assert_eq!(
        error.as_deref(),
        Some("not selected: the run ended failure")
    );

    let mut sim = Sim::new(&w)
        .agent("Worker", |_| Reply::silence())
        .agent("Echo", echo);
    sim.at(ms(100), Event::CancelRequested { reason: None });
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Cancelled));
    assert_every_node_reported_once(&w, &sim);
    for unselected in ["alert", "celebrate"] {
        assert_eq!(status(&sim, unselected), NodeStatus::Skipped);
    }
}

#[test]
fn a_run_that_fails_at_its_input_skips_every_node() {
    let w = wf(CHAIN);
    let mut sim = Sim::new(&w).agent("Doubler", doubler);
    assert_eq!(
        sim.run(json!({"value": "five"})).status,
        Some(RunStatus::Failure)
    );
    assert_every_node_reported_once(&w, &sim);
    assert_eq!(status(&sim, "a"), NodeStatus::Skipped);
    let error = sim.state.nodes["b"].error.clone();
    assert_eq!(error.as_deref(), Some("the run ended before reaching it"));
}

#[test]
fn nodes_behind_a_failure_and_their_inner_nodes_end_skipped() {
    let w = wf(r#"
name: Behind
workflow:
  description: d
  on_exit: {on_success: celebrate}
  nodes:
    - {id: bad, type: agent, agent_name: Bad}
    - {id: after, type: agent, agent_name: Echo, depends_on: [bad]}
    - {id: m, type: map, node: each, items: "{{after.output.xs}}", depends_on: [after]}
    - {id: each, type: agent, agent_name: Echo}
    - {id: celebrate, type: agent, agent_name: Echo, input: {}}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w)
        .agent("Bad", |_| Reply::fail("broken"))
        .agent("Echo", echo);
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_every_node_reported_once(&w, &sim);
    for node in ["after", "m", "each", "celebrate"] {
        assert_eq!(status(&sim, node), NodeStatus::Skipped, "{node}");
    }
}
