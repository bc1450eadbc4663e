//! Unit tests of `engine.rs`.

use serde_json::json;

use super::super::testkit::{dispatches, with_nodes, workflow, Run};
use super::super::types::{Command, Event, FailureClass, NodeStatus, Progress, RunStatus, TaskKey};
use super::super::TimerId;

const ONE: &str = r#"
name: One
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: A}
  output_mapping: {a: "{{a.output}}"}
"#;

#[test]
fn a_second_start_changes_nothing() {
    let wf = workflow(ONE);
    let (mut run, _) = Run::start(&wf, json!({"first": true}));
    let before = run.st.clone();
    assert!(run.apply(Event::Started { input: json!({}) }).is_empty());
    assert_eq!(run.st, before);
}

#[test]
fn an_unstarted_run_absorbs_every_event_but_started_and_cancel() {
    let wf = workflow(ONE);
    let mut run = Run::unstarted(&wf);
    let before = run.st.clone();
    let early = [
        Event::CallSucceeded {
            task: TaskKey::single("a"),
            attempt: 1,
            output: json!("early"),
        },
        Event::TimerFired {
            timer: TimerId::Deadline,
        },
        Event::ApprovalDecided {
            node: "a".into(),
            approved: true,
            by: None,
            comment: None,
        },
    ];
    for event in early {
        assert!(run.apply(event).is_empty());
        assert_eq!(run.st, before, "the run is still waiting for its start");
    }
    assert!(run
        .fail(TaskKey::single("a"), 1, FailureClass::Failed)
        .is_empty());
    let out = run.apply(Event::Started { input: json!({}) });
    assert_eq!(dispatches(&out).len(), 1, "the start still dispatches");
}

#[test]
fn a_cancel_that_overtakes_the_start_ends_the_run_cancelled_as_it_starts() {
    let wf = workflow(ONE);
    let mut run = Run::unstarted(&wf);
    assert!(run
        .apply(Event::CancelRequested { reason: None })
        .is_empty());
    assert!(run.st.cancel_requested, "the cancel is kept");
    let out = run.apply(Event::Started { input: json!({}) });
    assert!(dispatches(&out).is_empty(), "nothing is called");
    assert_eq!(run.st.status, RunStatus::Cancelled);
    assert!(out.iter().any(|c| matches!(
        c,
        Command::Finish { status: RunStatus::Cancelled, error: Some(e), .. } if e.message.contains("before it started")
    )));
}

#[test]
fn a_terminal_run_absorbs_every_event() {
    let wf = workflow(ONE);
    let (mut run, _) = Run::start(&wf, json!({}));
    let out = run.succeed(TaskKey::single("a"), 1, json!("done"));
    assert!(out.iter().any(|c| matches!(c, Command::Finish { .. })));
    assert_eq!(run.st.status, RunStatus::Success);
    let before = run.st.clone();
    let late = [
        Event::Started { input: json!({}) },
        Event::CallSucceeded {
            task: TaskKey::single("a"),
            attempt: 1,
            output: json!("again"),
        },
        Event::TimerFired {
            timer: TimerId::Deadline,
        },
        Event::CancelRequested { reason: None },
    ];
    for event in late {
        assert!(run.apply(event).is_empty());
        assert_eq!(run.st, before);
    }
    let out = run.fail(TaskKey::single("a"), 1, FailureClass::Failed);
    assert!(out.is_empty());
}

#[test]
fn a_second_cancel_and_a_redelivered_deadline_change_nothing() {
    let wf = workflow(ONE);
    let (mut run, _) = Run::start(&wf, json!({}));
    let deadline = TimerId::Deadline;
    run.wait(wf.max_execution_time);
    assert!(!run.fire(deadline.clone()).is_empty());
    let before = run.st.clone();
    assert!(run.fire(deadline).is_empty());
    assert_eq!(run.st, before);

    let (mut run, _) = Run::start(&wf, json!({}));
    run.apply(Event::CancelRequested { reason: None });
    let before = run.st.clone();
    let again = Event::CancelRequested {
        reason: Some("again".into()),
    };
    assert!(run.apply(again).is_empty());
    assert_eq!(run.st, before);
}

#[test]
fn exit_handlers_the_outcome_did_not_select_end_skipped_once() {
    let wf = with_nodes(
        "  on_exit: {on_success: yay, on_failure: alert}\n",
        r#"
    - {id: a, type: agent, agent_name: A}
    - {id: yay, type: agent, agent_name: A, input: {}}
    - {id: alert, type: agent, agent_name: A, input: {}}
"#,
    );
    let (mut run, _) = Run::start(&wf, json!({}));
    run.succeed(TaskKey::single("a"), 1, json!(1));
    let out = run.succeed(TaskKey::single("yay"), 1, json!(2));
    assert_eq!(run.st.status, RunStatus::Success);
    assert_eq!(run.status("alert"), NodeStatus::Skipped);
    assert_eq!(run.error("alert"), "not selected: the run ended success");
    let skipped: Vec<&str> = out
        .iter()
        .filter_map(|c| match c {
            Command::Progress(Progress::NodeFinished {
                node_id,
                status: NodeStatus::Skipped,
                ..
            }) => Some(node_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(skipped, vec!["alert"]);
    assert!(
        matches!(out.last(), Some(Command::Finish { .. })),
        "the skips are reported before the final result"
    );
}

fn join(strategy: &str) -> crate::definition::Workflow {
    workflow(&format!(
        r#"
name: J
workflow:
  description: d
  fail_fast: false
  nodes:
    - {{id: p, type: agent, agent_name: A}}
    - {{id: q, type: agent, agent_name: A}}
    - {{id: r, type: agent, agent_name: A}}
    - {{id: j, type: join, depends_on: [p, q, r], wait_for: [p, q, r], {strategy}}}
  output_mapping: {{j: "{{{{j.output}}}}"}}
"#
    ))
}

#[test]
fn join_any_ends_at_the_first_success_with_only_that_output() {
    let wf = join("strategy: any");
    let (mut run, _) = Run::start(&wf, json!({}));
    run.succeed(TaskKey::single("q"), 1, json!("Q"));
    assert_eq!(run.status("j"), NodeStatus::Success);
    assert_eq!(run.st.nodes["j"].output, Some(json!({"q": "Q"})));
}

#[test]
fn join_n_of_m_waits_for_n_successes() {
    let wf = join("strategy: n_of_m, n: 2");
    let (mut run, _) = Run::start(&wf, json!({}));
    run.fail(TaskKey::single("p"), 1, FailureClass::Failed);
    run.succeed(TaskKey::single("q"), 1, json!("Q"));
    assert_eq!(run.status("j"), NodeStatus::Pending);
    run.succeed(TaskKey::single("r"), 1, json!("R"));
    assert_eq!(run.status("j"), NodeStatus::Success);
    assert_eq!(run.st.nodes["j"].output, Some(json!({"q": "Q", "r": "R"})));
}

#[test]
fn a_failed_node_a_join_waits_for_skips_the_join() {
    let wf = join("strategy: all");
    let (mut run, _) = Run::start(&wf, json!({}));
    run.succeed(TaskKey::single("p"), 1, json!("P"));
    run.fail(TaskKey::single("q"), 1, FailureClass::Failed);
    assert_eq!(run.status("j"), NodeStatus::Pending, "r has not ended");
    run.succeed(TaskKey::single("r"), 1, json!("R"));
    assert_eq!(run.status("j"), NodeStatus::Skipped);
    assert_eq!(run.error("j"), "dependency 'q' did not succeed");
}

#[test]
fn a_join_that_cannot_be_met_is_skipped_saying_why() {
    let wf = with_nodes(
        "",
        r#"
    - {id: p, type: agent, agent_name: A}
    - {id: q, type: agent, agent_name: A, when: "{{workflow.input.go}} == true"}
    - {id: j, type: join, depends_on: [p, q], wait_for: [p, q], strategy: n_of_m, n: 2}
"#,
    );
    let (mut run, _) = Run::start(&wf, json!({"go": false}));
    assert_eq!(run.status("q"), NodeStatus::Skipped);
    run.succeed(TaskKey::single("p"), 1, json!("P"));
    assert_eq!(run.status("j"), NodeStatus::Skipped);
    assert_eq!(
        run.error("j"),
        "join strategy n_of_m (n = 2) cannot be met: 1 of 2 nodes succeeded"
    );
}

#[test]
fn a_failed_node_with_fail_fast_starts_nothing_new() {
    let wf = with_nodes(
        "",
        r#"
    - {id: a, type: agent, agent_name: A}
    - {id: b, type: agent, agent_name: A}
    - {id: c, type: agent, agent_name: A, depends_on: [b]}
"#,
    );
    let (mut run, _) = Run::start(&wf, json!({}));
    run.fail(TaskKey::single("a"), 1, FailureClass::Failed);
    assert_eq!(run.status("b"), NodeStatus::Running, "running calls go on");
    let out = run.succeed(TaskKey::single("b"), 1, json!(1));
    assert!(dispatches(&out).is_empty());
    assert_eq!(run.status("c"), NodeStatus::Skipped);
    assert_eq!(run.st.status, RunStatus::Failure);
}
