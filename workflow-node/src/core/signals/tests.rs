//! Unit tests of `signals.rs`: a wait node takes a signal, keeps one that came early,
//! refuses what its schema or signers refuse, takes each id once, and times out.

use std::time::Duration;

use serde_json::{json, Value};

use super::super::testkit::{with_nodes, Run};
use super::super::types::{Event, Millis, NodeStatus, RunStatus, TimerId};
use super::{Signal, MAX_KEPT_SIGNALS};

fn signal(name: &str, id: &str, data: Value, by: Option<&str>) -> Event {
    Event::SignalReceived {
        signal: Signal {
            name: name.into(),
            id: id.into(),
            data,
            by: by.map(str::to_owned),
            at: Millis(0),
        },
    }
}

const WAIT: &str = r#"
    - id: w
      type: wait
      signal: paid
      correlation: "{{workflow.input.order}}"
      schema: {type: object, required: [amount]}
      timeout: 60s
"#;

#[test]
fn a_waiting_node_takes_its_signal_and_the_run_ends_with_it() {
    let wf = with_nodes("", WAIT);
    let (mut run, _) = Run::start(&wf, json!({"order": "o-1"}));
    assert_eq!(run.status("w"), NodeStatus::Waiting);
    let Some(super::Detail::Wait(w)) = &run.st.nodes["w"].detail else {
        panic!("no wait detail")
    };
    assert_eq!(w.key.as_deref(), Some("o-1"));
    assert_eq!(w.deadline, Some(Millis(run.now.0 + 60_000)));
    run.apply(signal("paid", "s1", json!({"amount": 3}), None));
    assert_eq!(run.status("w"), NodeStatus::Success);
    let out = run.st.nodes["w"].output.clone().unwrap();
    assert_eq!(out["data"], json!({"amount": 3}));
    assert_eq!(out["signal_id"], json!("s1"));
    assert_eq!(run.st.status, RunStatus::Success);
}

#[test]
fn a_payload_its_schema_refuses_or_another_name_leaves_the_node_waiting() {
    let wf = with_nodes("", WAIT);
    let (mut run, _) = Run::start(&wf, json!({"order": "o-1"}));
    run.apply(signal("paid", "s1", json!({"nope": 1}), None));
    run.apply(signal("other", "s2", json!({"amount": 1}), None));
    assert_eq!(run.status("w"), NodeStatus::Waiting);
    assert!(run.st.signals.kept.is_empty(), "nothing may keep them");
    run.apply(signal("paid", "s1", json!({"amount": 1}), None));
    assert_eq!(
        run.status("w"),
        NodeStatus::Success,
        "a refused id may be sent again, corrected"
    );
}

#[test]
fn a_signal_sent_before_the_node_waits_is_kept_and_taken_once() {
    let wf = with_nodes(
        "",
        r#"
    - {id: a, type: agent, agent_name: A}
    - {id: w, type: wait, signal: go, depends_on: [a]}
"#,
    );
    let (mut run, _) = Run::start(&wf, json!({}));
    run.apply(signal("go", "s1", json!(1), None));
    run.apply(signal("go", "s1", json!(2), None));
    assert_eq!(run.st.signals.kept.len(), 1, "the same id is kept once");
    let task = super::super::types::TaskKey::single("a");
    run.succeed(task, 1, json!("done"));
    assert_eq!(run.status("w"), NodeStatus::Success);
    assert_eq!(run.st.nodes["w"].output.as_ref().unwrap()["data"], json!(1));
    assert!(run.st.signals.kept.is_empty());
}

#[test]
fn kept_signals_are_bounded() {
    let wf = with_nodes(
        "",
        r#"
    - {id: a, type: agent, agent_name: A}
    - {id: w, type: wait, signal: go, depends_on: [a]}
"#,
    );
    let (mut run, _) = Run::start(&wf, json!({}));
    for i in 0..MAX_KEPT_SIGNALS + 3 {
        run.apply(signal("go", &format!("s{i}"), json!(i), None));
    }
    assert_eq!(run.st.signals.kept.len(), MAX_KEPT_SIGNALS);
    run.apply(signal("nobody-waits", "x", json!(0), None));
    assert_eq!(run.st.signals.kept.len(), MAX_KEPT_SIGNALS);
    let (mut run, _) = Run::start(&wf, json!({}));
    let big = json!("x".repeat(super::MAX_KEPT_SIGNAL_BYTES));
    run.apply(signal("go", "big", big, None));
    assert!(
        run.st.signals.kept.is_empty(),
        "a payload too large is not kept"
    );
}

#[test]
fn signers_are_checked_and_a_pause_keeps_the_signal_until_resumed() {
    let wf = with_nodes(
        "",
        "    - {id: w, type: wait, signal: go, signers: [alice]}\n",
    );
    let (mut run, _) = Run::start(&wf, json!({}));
    run.apply(signal("go", "s1", json!(1), Some("mallory")));
    assert_eq!(run.status("w"), NodeStatus::Waiting);
    run.apply(Event::PauseRequested { reason: None });
    run.apply(signal("go", "s2", json!(2), Some("alice")));
    assert_eq!(run.status("w"), NodeStatus::Waiting, "paused: kept");
    assert_eq!(run.st.signals.kept.len(), 1);
    run.apply(Event::ResumeRequested);
    assert_eq!(run.status("w"), NodeStatus::Success);
    assert_eq!(
        run.st.nodes["w"].output.as_ref().unwrap()["by"],
        json!("alice")
    );
}

#[test]
fn a_wait_times_out_with_the_timeout_kind() {
    let wf = with_nodes("", WAIT);
    let (mut run, _) = Run::start(&wf, json!({"order": 7}));
    run.wait(Duration::from_secs(60));
    run.fire(TimerId::WaitTimeout { node: "w".into() });
    assert_eq!(run.status("w"), NodeStatus::TimedOut);
    assert_eq!(run.st.nodes["w"].error_kind.as_deref(), Some("timeout"));
    assert!(
        run.error("w").contains("no signal 'paid'"),
        "{}",
        run.error("w")
    );
    assert_eq!(run.st.status, RunStatus::Failure);
}

#[test]
fn a_correlation_that_resolves_to_no_key_fails_the_node() {
    let wf = with_nodes("", WAIT);
    let (run, _) = Run::start(&wf, json!({"order": {"a": 1}}));
    assert_eq!(run.status("w"), NodeStatus::Failure);
    assert!(run.error("w").contains("correlation"), "{}", run.error("w"));
}
