//! Pausing and resuming a run: nothing is dispatched while paused, calls
//! in flight end and are recorded, the resume carries on, and the deadline and approval
//! timeouts stop only when the definition says so.

use super::*;
use workflow_node::core::{Dispatch, TimerId};

/// a -> b -> c, each call answering after 100 ms, with `settings` in the workflow block.
fn chain(settings: &str) -> Workflow {
    wf(&format!(
        r#"
name: Chain
max_workflow_execution_time_seconds: 60
workflow:
  description: d
  {settings}
  nodes:
    - {{id: a, type: agent, agent_name: Slow, timeout: 1h}}
    - {{id: b, type: agent, agent_name: Slow, depends_on: [a], timeout: 1h}}
    - {{id: c, type: agent, agent_name: Slow, depends_on: [b], timeout: 1h}}
  output_mapping: {{c: "{{{{c.output}}}}"}}
"#
    ))
}

fn slow(d: &Dispatch) -> Reply {
    Reply::ok(json!({"from": d.node_id})).after(ms(100))
}

/// When each call was dispatched (its 1 h timeout minus the deadline), by node.
fn dispatch_times(sim: &Sim<'_>) -> Vec<(String, u64)> {
    sim.dispatches()
        .iter()
        .map(|d| (d.node_id.clone(), d.deadline.0 - 3_600_000))
        .collect()
}

fn pause() -> Event {
    Event::PauseRequested {
        reason: Some("maintenance".into()),
    }
}

#[test]
fn a_paused_run_finishes_its_calls_in_flight_and_dispatches_nothing_until_resumed() {
    let w = chain("pause: {suspend_deadline: true}");
    let mut sim = Sim::new(&w).agent("Slow", slow);
    let t0 = sim.now.0;
    sim.at(ms(50), pause());
    sim.apply(Event::Started { input: json!({}) });
    let out = sim.run_to_end();
    // Nothing left to happen: a ended while paused, b waits, the deadline is suspended.
    assert_eq!(out.status, None);
    assert_eq!(status(&sim, "a"), NodeStatus::Success);
    assert_eq!(status(&sim, "b"), NodeStatus::Running);
    assert_eq!(dispatched(&sim), vec!["a"]);
    assert!(sim.state.paused.is_some());
    assert!(!sim.armed_timers().contains(&TimerId::Deadline));
    let deadline = sim.state.deadline;

    // Resumed 10 min later (far past the 60 s deadline, which was suspended).
    sim.now = Millis(t0 + 600_000);
    sim.apply(Event::ResumeRequested);
    let out = sim.run_to_end();
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(dispatched(&sim), vec!["a", "b", "c"]);
    let times = dispatch_times(&sim);
    assert_eq!(times[1], ("b".to_string(), t0 + 600_000));
    assert_eq!(sim.state.deadline.0, deadline.0 + 600_000 - 50);
}

use workflow_node::core::Millis;

#[test]
fn by_default_the_deadline_keeps_running_while_paused() {
    let w = chain("");
    let mut sim = Sim::new(&w).agent("Slow", slow);
    sim.at(ms(50), pause());
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::TimedOut));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("max_workflow_execution_time_seconds (60 s)"));
    assert_eq!(status(&sim, "a"), NodeStatus::Success);
    assert_eq!(
        dispatched(&sim),
        vec!["a"],
        "nothing dispatched while paused"
    );
    // b waited in the queue and never ran.
    assert_eq!(status(&sim, "b"), NodeStatus::Skipped);
}

#[test]
fn pausing_twice_or_resuming_a_run_not_paused_changes_nothing() {
    let w = chain("pause: {suspend_deadline: true}");
    let mut sim = Sim::new(&w).agent("Slow", slow);
    sim.apply(Event::Started { input: json!({}) });
    let before = sim.state.clone();
    sim.apply(Event::ResumeRequested);
    assert_eq!(sim.state, before);
    sim.apply(pause());
    let paused = sim.state.clone();
    let n = sim.commands.len();
    sim.apply(pause());
    assert_eq!(sim.state, paused);
    assert_eq!(sim.commands.len(), n);
}

#[test]
fn callers_are_told_of_a_pause_with_its_reason_and_of_the_resume() {
    let w = chain("");
    let mut sim = Sim::new(&w).agent("Slow", slow);
    sim.apply(Event::Started { input: json!({}) });
    let told = |sim: &Sim<'_>| -> Vec<Progress> {
        sim.commands
            .iter()
            .filter_map(|c| match c {
                Command::Progress(p @ (Progress::RunPaused { .. } | Progress::RunResumed)) => {
                    Some(p.clone())
                }
                _ => None,
            })
            .collect()
    };
    sim.apply(pause());
    sim.apply(pause()); // already paused: nothing new to tell
    assert_eq!(
        told(&sim),
        vec![Progress::RunPaused {
            reason: Some("maintenance".into())
        }]
    );
    sim.apply(Event::ResumeRequested);
    sim.apply(Event::ResumeRequested); // not paused: nothing new
    assert_eq!(told(&sim).len(), 2);
    assert_eq!(told(&sim)[1], Progress::RunResumed);
}

#[test]
fn a_retry_whose_backoff_ends_while_paused_waits_for_the_resume() {
    let w = wf(r#"
name: R
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Flaky, timeout: 1h, retry_strategy: {limit: 2, backoff: {duration: 1s}}}
  output_mapping: {a: "{{a.output}}"}
"#);
    let mut calls = 0;
    let mut sim = Sim::new(&w).agent("Flaky", move |_| {
        calls += 1;
        if calls == 1 {
            Reply::fail("first try fails").after(ms(10))
        } else {
            Reply::ok(json!("ok")).after(ms(10))
        }
    });
    let t0 = sim.now.0;
    sim.at(ms(20), pause());
    sim.at(ms(30_000), Event::ResumeRequested);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let times = dispatch_times(&sim);
    assert_eq!(times.len(), 2);
    assert_eq!(times[1].1, t0 + 30_000, "the retry waited for the resume");
}

#[test]
fn a_paused_map_lets_its_running_items_end_and_starts_no_new_one() {
    let w = wf(r#"
name: M
workflow:
  description: d
  nodes:
    - {id: m, type: map, node: each, items: "{{workflow.input.xs}}", concurrency_limit: 2}
    - {id: each, type: agent, agent_name: Slow, timeout: 1h, input: {x: "{{_map_item}}"}}
  output_mapping: {results: "{{m.output.results}}"}
"#);
    let mut sim = Sim::new(&w).agent("Slow", slow);
    let t0 = sim.now.0;
    sim.at(ms(50), pause());
    sim.at(ms(5_000), Event::ResumeRequested);
    let out = sim.run(json!({"xs": [1, 2, 3, 4, 5]}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let times: Vec<u64> = dispatch_times(&sim).iter().map(|(_, t)| t - t0).collect();
    assert_eq!(times, vec![0, 0, 5_000, 5_000, 5_100]);
}

const GATE: &str = r#"
name: G
workflow:
  description: d
  SETTINGS
  nodes:
    - {id: gate, type: approval, timeout: 10s, on_timeout: reject}
  output_mapping: {gate: "{{gate.output}}"}
"#;

#[test]
fn approval_timeouts_stop_while_paused_only_when_the_definition_says_so() {
    // Suspended: paused at 1 s, resumed at 60 s, the 10 s timeout passes at 69 s.
    let w = wf(&GATE.replace("SETTINGS", "pause: {suspend_approval_timeouts: true}"));
    let mut sim = Sim::new(&w);
    let t0 = sim.now.0;
    sim.at(ms(1_000), pause());
    sim.at(ms(60_000), Event::ResumeRequested);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    let ended = sim.events.last().map(|(at, _)| at.0 - t0);
    assert_eq!(ended, Some(69_000));
    // Not suspended: it passes at 10 s, while the run is paused.
    let w = wf(&GATE.replace("SETTINGS", ""));
    let mut sim = Sim::new(&w);
    sim.at(ms(1_000), pause());
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(sim.events.last().map(|(at, _)| at.0 - t0), Some(10_000));
}

#[test]
fn a_cancel_ends_the_pause_and_runs_the_cancel_handlers() {
    let w = wf(r#"
name: C
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 1h}
    - {id: b, type: agent, agent_name: Slow, depends_on: [a], timeout: 1h}
    - {id: cleanup, type: agent, agent_name: Slow, timeout: 1h}
  on_exit: {on_cancel: cleanup}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Slow", slow);
    sim.at(ms(50), pause());
    sim.at(ms(1_000), Event::CancelRequested { reason: None });
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Cancelled));
    assert_eq!(dispatched(&sim), vec!["a", "cleanup"]);
    assert_eq!(status(&sim, "cleanup"), NodeStatus::Success);
    assert_eq!(status(&sim, "b"), NodeStatus::Skipped);
}

#[test]
fn a_pause_after_a_cancel_is_refused_so_the_exit_handlers_are_not_held() {
    let w = wf(r#"
name: C
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow, timeout: 1h}
    - {id: cleanup, type: agent, agent_name: Slow, timeout: 1h}
  on_exit: {on_cancel: cleanup}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Slow", slow);
    sim.at(ms(50), Event::CancelRequested { reason: None });
    sim.at(ms(60), pause());
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Cancelled));
    assert_eq!(sim.state.paused, None, "the pause after the cancel held");
    let told_paused = sim
        .commands
        .iter()
        .any(|c| matches!(c, Command::Progress(Progress::RunPaused { .. })));
    assert!(
        !told_paused,
        "callers were told of a pause that cannot hold"
    );
}
