//! Agent and workflow nodes: input and output, `when`, retries with backoff, timeouts.

use super::*;

pub(crate) const CHAIN: &str = r#"
name: Chain
workflow:
  description: two steps
  input_schema: {type: object, properties: {value: {type: integer}}, required: [value]}
  output_schema: {type: object, required: [result]}
  nodes:
    - {id: a, type: agent, agent_name: Doubler, input: {value: "{{workflow.input.value}}"}}
    - {id: b, type: agent, agent_name: Doubler, depends_on: [a]}
  output_mapping:
    result: "{{b.output.value}}"
"#;

pub(crate) fn doubler(d: &workflow_node::core::Dispatch) -> Reply {
    let v = d.input["value"].as_i64().unwrap_or(0);
    Reply::ok(json!({"value": v * 2}))
}

#[test]
fn a_chain_passes_implicit_input_and_maps_the_output() {
    let w = wf(CHAIN);
    let mut sim = Sim::new(&w).agent("Doubler", doubler);
    let out = sim.run(json!({"value": 5}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"result": 20})));
    assert_eq!(out.finishes, 1);
    let d = sim.dispatches();
    assert_eq!(d.len(), 2);
    assert_eq!(
        d[1].input,
        json!({"value": 10}),
        "b gets a's output as implicit input"
    );
    assert_eq!(d[0].sub_task_id, "sim_a_x_1");
}

#[test]
fn invalid_input_fails_before_any_dispatch_listing_every_violation() {
    let w = wf(CHAIN);
    let mut sim = Sim::new(&w).agent("Doubler", doubler);
    let out = sim.run(json!({"value": "five"}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert!(sim.dispatches().is_empty());
    let msg = out.error.unwrap().message;
    assert!(
        msg.contains("input_schema") && msg.contains("/value"),
        "{msg}"
    );
}

#[test]
fn output_violating_output_schema_fails_the_run() {
    let w = wf(&CHAIN.replace("required: [result]", "required: [result, missing]"));
    let mut sim = Sim::new(&w).agent("Doubler", doubler);
    let out = sim.run(json!({"value": 1}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert!(out.error.unwrap().message.contains("output_schema"));
}

#[test]
fn when_false_skips_and_a_node_whose_dependencies_are_all_skipped_is_skipped() {
    let w = wf(r#"
name: When
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Echo, when: "{{workflow.input.go}} == true"}
    - {id: b, type: agent, agent_name: Echo, depends_on: [a]}
    - {id: c, type: agent, agent_name: Echo}
  output_mapping: {b: "{{b.output}}", c: "{{c.output.x}}"}
"#);
    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"go": false, "x": 1}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.finishes, 1);
    assert_eq!(status(&sim, "a"), NodeStatus::Skipped);
    assert_eq!(status(&sim, "b"), NodeStatus::Skipped);
    assert_eq!(status(&sim, "c"), NodeStatus::Success);
    assert_eq!(out.output, Some(json!({"b": null, "c": 1})));
}

pub(crate) fn retry_wf(strategy: &str) -> Workflow {
    wf(&format!(
        r#"
name: Retry
workflow:
  description: d
  nodes:
    - {{id: a, type: agent, agent_name: Flaky, timeout: 10s {strategy}}}
  output_mapping: {{ok: "{{{{a.output.ok}}}}"}}
"#
    ))
}

pub(crate) fn flaky(
    fails: u32,
    kind: Option<&'static str>,
) -> impl FnMut(&workflow_node::core::Dispatch) -> Reply {
    let mut calls = 0;
    move |_d| {
        calls += 1;
        if calls <= fails {
            Reply {
                after: ms(10),
                answer: workflow_node::core::sim::Answer::Fail(
                    "boom".into(),
                    kind.map(String::from),
                ),
            }
        } else {
            Reply::ok(json!({"ok": true})).after(ms(10))
        }
    }
}

#[test]
fn retries_back_off_exponentially_and_then_succeed() {
    let w = retry_wf(", retry_strategy: {limit: 3, backoff: {duration: 1s, factor: 2}}");
    let mut sim = Sim::new(&w).agent("Flaky", flaky(2, None));
    let start = sim.now;
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let times: Vec<u64> = sim
        .events
        .iter()
        .filter(|(_, e)| matches!(e, Event::TimerFired { .. }))
        .map(|(t, _)| t.0 - start.0)
        .collect();
    // attempt 1 fails at 10 ms, retry at +1 s; attempt 2 fails at 1020, retry at +2 s.
    assert_eq!(times, vec![1010, 3020]);
    let attempts: Vec<u32> = sim.dispatches().iter().map(|d| d.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
}

#[test]
fn retries_stop_at_limit_plus_one_attempts_and_say_so() {
    let w = retry_wf(", retry_strategy: {limit: 2, backoff: {duration: 1s}}");
    let mut sim = Sim::new(&w).agent("Flaky", flaky(10, None));
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(sim.dispatches().len(), 3);
    let err = out.error.unwrap();
    assert_eq!(err.node_id.as_deref(), Some("a"));
    assert!(
        err.message.contains("attempt 3 of 3") && err.message.contains("boom"),
        "{}",
        err.message
    );
}

#[test]
fn no_retry_strategy_means_one_attempt() {
    let w = retry_wf("");
    let mut sim = Sim::new(&w).agent("Flaky", flaky(1, None));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_eq!(sim.dispatches().len(), 1);
}

#[test]
fn retry_policies_pick_the_failures_they_retry() {
    // OnError does not retry an answered failure.
    let w = retry_wf(", retry_strategy: {limit: 3, retry_policy: OnError}");
    let mut sim = Sim::new(&w).agent("Flaky", flaky(1, None));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_eq!(sim.dispatches().len(), 1);
    // OnError retries a timeout.
    let mut calls = 0;
    let mut sim = Sim::new(&w).agent("Flaky", move |_| {
        calls += 1;
        if calls == 1 {
            Reply::silence()
        } else {
            Reply::ok(json!({"ok": true}))
        }
    });
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(sim.dispatches().len(), 2);
    assert!(
        sim.commands
            .iter()
            .any(|c| matches!(c, Command::CancelCall { .. })),
        "the timed-out call is cancelled"
    );
    // OnFailure does not retry a timeout.
    let w = retry_wf(", retry_strategy: {limit: 3, retryPolicy: OnFailure}");
    let mut sim = Sim::new(&w).agent("Flaky", |_| Reply::silence());
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert!(out.error.unwrap().message.contains("timed out after 10 s"));
    assert_eq!(sim.dispatches().len(), 1);
    // An unreachable agent is an error, retried by Always, and said plainly.
    let w = retry_wf(", retry_strategy: {limit: 1}");
    let mut sim = Sim::new(&w);
    let out = sim.run(json!({}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("has no card on the mesh"));
    assert_eq!(sim.dispatches().len(), 2);
}

#[test]
fn non_retryable_error_kinds_never_retry() {
    let w = retry_wf(", retry_strategy: {limit: 3, non_retryable_errors: [invalid_request]}");
    let mut sim = Sim::new(&w).agent("Flaky", flaky(5, Some("invalid_request")));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_eq!(sim.dispatches().len(), 1);
    let mut sim = Sim::new(&w).agent("Flaky", flaky(1, Some("transient")));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
}

fn slow_wf(extra: &str) -> Workflow {
    wf(&format!(
        r#"
name: Slow
workflow:
  description: d
  nodes:
    - {{id: a, type: agent, agent_name: Slow, timeout: 500ms {extra}}}
  output_mapping: {{}}
"#
    ))
}

#[test]
fn a_timeout_says_so_in_words_with_the_error_kind_timeout() {
    let w = slow_wf("");
    let mut sim = Sim::new(&w).agent("Slow", |_| Reply::silence());
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    let err = out.error.unwrap();
    assert_eq!(
        err.message,
        "node 'a' failed: agent 'Slow' timed out after 0.5 s"
    );
    assert_eq!(err.kind.as_deref(), Some("timeout"));
    let node = &sim.state.nodes["a"];
    assert_eq!(node.error_kind.as_deref(), Some("timeout"));
}

#[test]
fn non_retryable_errors_can_name_timeout() {
    let w = slow_wf(", retry_strategy: {limit: 3, non_retryable_errors: [timeout]}");
    let mut sim = Sim::new(&w).agent("Slow", |_| Reply::silence());
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Failure));
    assert_eq!(sim.dispatches().len(), 1, "a timeout is not retried");
    // Other kinds listed leave timeouts retried.
    let w = slow_wf(", retry_strategy: {limit: 1, non_retryable_errors: [fatal]}");
    let mut sim = Sim::new(&w).agent("Slow", |_| Reply::silence());
    let out = sim.run(json!({}));
    assert_eq!(sim.dispatches().len(), 2);
    assert!(out
        .error
        .unwrap()
        .message
        .contains("timed out after 0.5 s (attempt 2 of 2)"));
}

#[test]
fn an_agent_error_kind_reaches_the_node_and_the_run_error() {
    let w = retry_wf("");
    let mut sim = Sim::new(&w).agent("Flaky", flaky(1, Some("invalid_request")));
    let out = sim.run(json!({}));
    assert_eq!(out.error.unwrap().kind.as_deref(), Some("invalid_request"));
    let node = &sim.state.nodes["a"];
    assert_eq!(node.error_kind.as_deref(), Some("invalid_request"));
}

#[test]
fn the_workflow_retry_strategy_is_the_default_for_every_agent_node() {
    let w = wf(r#"
name: R
workflow:
  description: d
  retry_strategy: {limit: 1, backoff: {duration: 1s}}
  nodes:
    - {id: a, type: agent, agent_name: Flaky}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Flaky", flaky(1, None));
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(sim.dispatches().len(), 2);
}

#[test]
fn the_default_node_timeout_comes_from_the_file() {
    let w = wf(r#"
name: T
default_node_timeout_seconds: 7
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Slow}
  output_mapping: {}
"#);
    let mut sim = Sim::new(&w).agent("Slow", |_| Reply::silence());
    let start = sim.now;
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(sim.now.0 - start.0, 7000);
}

#[test]
fn a_node_failing_to_resolve_its_input_fails_with_the_reason() {
    let w = wf(r#"
name: I
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {x: "{{workflow.input.v}}"}, instruction: "do {{workflow.input.v}}"}
  output_mapping: {x: "{{a.output.x}}"}
"#);
    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"v": [1]}));
    assert_eq!(out.output, Some(json!({"x": [1]})));
    assert_eq!(sim.dispatches()[0].instruction.as_deref(), Some("do [1]"));
}
