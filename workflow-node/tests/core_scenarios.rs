//! Scenario tests of the core on the simulator: every rule of the execution semantics, on
//! virtual time, with a serde round trip of the state before every event.

use std::time::Duration;

use serde_json::json;
use workflow_node::core::sim::{Reply, Sim};
use workflow_node::core::{Command, Event, NodeStatus, Progress, RunStatus};
use workflow_node::definition::{parse_str, Workflow};

fn wf(yaml: &str) -> Workflow {
    match parse_str(yaml, "test.yaml") {
        Ok(w) => w,
        Err(problems) => panic!(
            "invalid test workflow:\n{}",
            problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

fn echo(d: &workflow_node::core::Dispatch) -> Reply {
    Reply::ok(d.input.clone())
}

fn status(sim: &Sim<'_>, node: &str) -> NodeStatus {
    sim.state.node_status(node)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const CHAIN: &str = r#"
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

fn doubler(d: &workflow_node::core::Dispatch) -> Reply {
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

const BRANCHY: &str = r#"
name: Branchy
workflow:
  description: d
  nodes:
    - id: check
      type: conditional
      condition: "'{{workflow.input.label}}' == \"it's\""
      true_branch: yes
      false_branch: no
    - {id: yes, type: agent, agent_name: Echo, depends_on: [check], input: {side: yes}}
    - {id: no, type: agent, agent_name: Echo, depends_on: [check], input: {side: no}}
    - id: merge
      type: agent
      agent_name: Echo
      depends_on: [yes, no]
      input: {side: {coalesce: ["{{yes.output.side}}", "{{no.output.side}}"]}}
  output_mapping: {side: "{{merge.output.side}}"}
"#;

#[test]
fn a_conditional_over_a_value_with_a_quote_takes_one_branch_and_the_merge_runs() {
    let w = wf(BRANCHY);
    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"label": "it's"}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(status(&sim, "yes"), NodeStatus::Success);
    assert_eq!(status(&sim, "no"), NodeStatus::Skipped);
    assert_eq!(out.output, Some(json!({"side": "yes"})));

    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"label": "other"}));
    assert_eq!(status(&sim, "yes"), NodeStatus::Skipped);
    assert_eq!(out.output, Some(json!({"side": "no"})));
}

const SWITCH: &str = r#"
name: Switchy
workflow:
  description: d
  nodes:
    - id: route
      type: switch
      cases:
        - {when: "{{workflow.input.n}} < 10", then: small}
        - {when: "{{workflow.input.n}} < 100", then: medium}
      DEFAULT
    - {id: small, type: agent, agent_name: Echo, depends_on: [route]}
    - {id: medium, type: agent, agent_name: Echo, depends_on: [route]}
    - {id: large, type: agent, agent_name: Echo, depends_on: [route]}
  output_mapping: {n: {coalesce: ["{{small.output.n}}", "{{medium.output.n}}", "{{large.output.n}}"]}}
"#;

#[test]
fn a_switch_takes_the_first_matching_case_or_the_default() {
    let w = wf(&SWITCH.replace("DEFAULT", "default: large"));
    for (n, taken) in [(5, "small"), (50, "medium"), (500, "large")] {
        let mut sim = Sim::new(&w).agent("Echo", echo);
        let out = sim.run(json!({"n": n}));
        assert_eq!(out.output, Some(json!({"n": n})));
        for node in ["small", "medium", "large"] {
            let want = if node == taken {
                NodeStatus::Success
            } else {
                NodeStatus::Skipped
            };
            assert_eq!(status(&sim, node), want, "n={n} node={node}");
        }
    }
}

#[test]
fn a_switch_without_match_or_default_skips_every_target_and_the_run_ends_once() {
    // Without a default, `large` is no target of the switch: it just depends on it.
    let w = wf(&SWITCH.replace("DEFAULT", ""));
    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"n": 1000}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(
        out.finishes, 1,
        "a run whose last node is skipped ends exactly once"
    );
    assert_eq!(status(&sim, "small"), NodeStatus::Skipped);
    assert_eq!(status(&sim, "medium"), NodeStatus::Skipped);
    assert_eq!(dispatched(&sim), vec!["large"]);
    assert_eq!(out.output, Some(json!({"n": 1000})));
}

fn retry_wf(strategy: &str) -> Workflow {
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

fn flaky(
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
    assert!(out
        .error
        .unwrap()
        .message
        .contains("did not answer within 10 s"));
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
fn the_workflow_deadline_fails_the_run_and_cancels_running_calls() {
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
    assert_eq!(out.status, Some(RunStatus::Failure));
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

fn map_wf(items: &str, extra: &str) -> Workflow {
    wf(&format!(
        r#"
name: M
workflow:
  description: d
  nodes:
    - {{id: m, type: map, node: each, {items} {extra}}}
    - {{id: each, type: agent, agent_name: Slow, input: {{x: "{{{{_map_item}}}}", i: "{{{{_map_index}}}}"}}}}
  output_mapping: {{results: "{{{{m.output.results}}}}"}}
"#
    ))
}

#[test]
fn a_map_keeps_item_order_and_respects_its_concurrency_limit() {
    let w = map_wf("items: \"{{workflow.input.xs}}\"", ", concurrency_limit: 3");
    // Later items answer sooner, so completion order is the reverse of item order.
    let mut sim = Sim::new(&w).agent("Slow", |d| {
        let x = d.input["x"].as_u64().unwrap();
        Reply::ok(json!(x * 10)).after(ms(1000 - x * 10))
    });
    let xs: Vec<u64> = (0..10).collect();
    let out = sim.run(json!({"xs": xs}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let want: Vec<u64> = xs.iter().map(|x| x * 10).collect();
    assert_eq!(out.output, Some(json!({"results": want})));
    assert_eq!(sim.max_running, 3);
    let progress = sim
        .commands
        .iter()
        .filter(|c| matches!(c, Command::Progress(Progress::MapProgress { .. })))
        .count();
    assert_eq!(progress, 10);
}

#[test]
fn a_map_over_an_empty_list_succeeds_with_no_results() {
    let w = map_wf("items: \"{{workflow.input.xs}}\"", "");
    let mut sim = Sim::new(&w).agent("Slow", echo);
    let out = sim.run(json!({"xs": []}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"results": []})));
    // A missing list is null, which is empty too.
    let out = Sim::new(&w).agent("Slow", echo).run(json!({}));
    assert_eq!(out.output, Some(json!({"results": []})));
}

#[test]
fn with_items_maps_a_literal_list() {
    let w = map_wf("withItems: [a, b]", "");
    let mut sim = Sim::new(&w).agent("Slow", |d| Reply::ok(d.input.clone()));
    let out = sim.run(json!({}));
    assert_eq!(
        out.output,
        Some(json!({"results": [{"x": "a", "i": 0}, {"x": "b", "i": 1}]}))
    );
}

#[test]
fn a_map_fails_on_too_many_items_a_non_list_or_one_failed_item() {
    let w = map_wf("withParam: \"{{workflow.input.xs}}\"", ", max_items: 2");
    let out = Sim::new(&w)
        .agent("Slow", echo)
        .run(json!({"xs": [1, 2, 3]}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("3 items exceed max_items (2)"));
    let out = Sim::new(&w).agent("Slow", echo).run(json!({"xs": "nope"}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("resolved to a string, expected an array"));

    let w = map_wf("items: \"{{workflow.input.xs}}\"", "");
    let mut sim = Sim::new(&w).agent("Slow", |d| {
        if d.input["x"] == json!(2) {
            Reply::fail("bad item").after(ms(5))
        } else {
            Reply::silence()
        }
    });
    let out = sim.run(json!({"xs": [1, 2, 3]}));
    let err = out.error.unwrap();
    assert!(
        err.message.contains("item 1 failed") && err.message.contains("bad item"),
        "{}",
        err.message
    );
    let cancels = sim
        .commands
        .iter()
        .filter(|c| matches!(c, Command::CancelCall { .. }))
        .count();
    assert_eq!(cancels, 2, "the other items are cancelled");
}

const FORK: &str = r#"
name: F
workflow:
  description: d
  nodes:
    - id: f
      type: fork
      fail_fast: FF
      branches:
        - {id: one, agent_name: A, input: {n: 1}, output_key: first}
        - {id: two, agent_name: B, input: {n: 2}, output_key: second}
  output_mapping: {all: "{{f.output}}"}
"#;

#[test]
fn a_fork_merges_branch_outputs_by_output_key() {
    let w = wf(&FORK.replace("FF", "true"));
    let out = Sim::new(&w)
        .agent("A", echo)
        .agent("B", echo)
        .run(json!({}));
    assert_eq!(
        out.output,
        Some(json!({"all": {"first": {"n": 1}, "second": {"n": 2}}}))
    );
}

#[test]
fn fork_fail_fast_cancels_the_other_branches_and_without_it_waits_for_all() {
    let w = wf(&FORK.replace("FF", "true"));
    let mut sim = Sim::new(&w)
        .agent("A", |_| Reply::fail("a broke"))
        .agent("B", |_| Reply::silence());
    let out = sim.run(json!({}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("branch 'one': agent 'A' failed: a broke"));
    assert!(sim
        .commands
        .iter()
        .any(|c| matches!(c, Command::CancelCall { agent, .. } if agent == "B")));

    let w = wf(&FORK.replace("FF", "false"));
    let mut sim = Sim::new(&w)
        .agent("A", |_| Reply::fail("a broke"))
        .agent("B", |_| Reply::ok(json!({})).after(ms(500)));
    let start = sim.now;
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(
        sim.now.0 - start.0,
        500,
        "the fork waited for the slow branch"
    );
    assert!(!sim
        .commands
        .iter()
        .any(|c| matches!(c, Command::CancelCall { .. })));
}

fn join_wf(strategy: &str) -> Workflow {
    wf(&format!(
        r#"
name: J
workflow:
  description: d
  nodes:
    - {{id: fast, type: agent, agent_name: Fast}}
    - {{id: mid, type: agent, agent_name: Mid}}
    - {{id: slow, type: agent, agent_name: Slow}}
    - {{id: j, type: join, depends_on: [fast, mid, slow], wait_for: [fast, mid, slow], {strategy}}}
    - {{id: after, type: agent, agent_name: Fast, depends_on: [j], input: {{}}}}
  output_mapping: {{j: "{{{{j.output}}}}"}}
"#
    ))
}

fn join_sim(w: &Workflow) -> Sim<'_> {
    Sim::new(w)
        .agent("Fast", |_| Reply::ok(json!("f")).after(ms(10)))
        .agent("Mid", |_| Reply::ok(json!("m")).after(ms(20)))
        .agent("Slow", |_| Reply::ok(json!("s")).after(ms(1000)))
}

fn after_started_at(sim: &Sim<'_>) -> u64 {
    let start = sim.events[0].0;
    let d = sim.dispatches();
    let pos = d
        .iter()
        .position(|d| d.node_id == "after")
        .expect("after ran");
    // The dispatch deadline is start time + timeout (300 s default).
    d[pos].deadline.0 - 300_000 - start.0
}

#[test]
fn joins_fire_as_soon_as_their_strategy_is_met() {
    let w = join_wf("strategy: any");
    let mut sim = join_sim(&w);
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(after_started_at(&sim), 10);

    let w = join_wf("strategy: n_of_m, n: 2");
    let mut sim = join_sim(&w);
    let out = sim.run(json!({}));
    assert_eq!(after_started_at(&sim), 20);
    assert_eq!(out.output, Some(json!({"j": {"fast": "f", "mid": "m"}})));

    let w = join_wf("strategy: all");
    let mut sim = join_sim(&w);
    sim.run(json!({}));
    assert_eq!(after_started_at(&sim), 1000);
}

const LOOP: &str = r#"
name: L
workflow:
  description: d
  nodes:
    - id: poll
      type: loop
      node: check
      condition: "{{check.output.ready}} == false"
      max_iterations: MAX
      EXTRA
    - {id: check, type: agent, agent_name: Poller, input: {i: "{{_loop_iteration}}"}}
  output_mapping: {loop: "{{poll.output}}", last: "{{check.output.i}}"}
"#;

fn poller(ready_at: u64) -> impl FnMut(&workflow_node::core::Dispatch) -> Reply {
    move |d| {
        let i = d.input["i"].as_u64().unwrap();
        Reply::ok(json!({"ready": i >= ready_at, "i": i}))
    }
}

#[test]
fn a_loop_repeats_until_its_condition_is_false_and_its_inner_output_stays_addressable() {
    let w = wf(&LOOP.replace("MAX", "10").replace("EXTRA", ""));
    let out = Sim::new(&w).agent("Poller", poller(3)).run(json!({}));
    assert_eq!(
        out.output,
        Some(
            json!({"loop": {"iterations_completed": 4, "stopped_reason": "condition_false"}, "last": 3})
        )
    );
}

#[test]
fn a_loop_reaching_max_iterations_ends_and_succeeds_or_fails_as_told() {
    let w = wf(&LOOP.replace("MAX", "3").replace("EXTRA", ""));
    let mut sim = Sim::new(&w).agent("Poller", poller(100));
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(
        out.output.unwrap()["loop"],
        json!({"iterations_completed": 3, "stopped_reason": "max_iterations"})
    );
    assert_eq!(sim.dispatches().len(), 3);

    let w = wf(&LOOP
        .replace("MAX", "3")
        .replace("EXTRA", "on_iterations_exhausted: fail"));
    let out = Sim::new(&w).agent("Poller", poller(100)).run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert!(out.error.unwrap().message.contains("max_iterations (3)"));
}

#[test]
fn a_loop_waits_its_delay_between_iterations() {
    let w = wf(&LOOP.replace("MAX", "10").replace("EXTRA", "delay: 5s"));
    let mut sim = Sim::new(&w).agent("Poller", poller(2));
    let start = sim.now.0;
    sim.run(json!({}));
    let at: Vec<u64> = sim
        .dispatches()
        .iter()
        .map(|d| d.deadline.0 - 300_000 - start)
        .collect();
    assert_eq!(at, vec![0, 5000, 10000]);
}

const APPROVAL: &str = r#"
name: A
workflow:
  description: d
  nodes:
    - {id: gate, type: approval, approvers: [alice], message: "ship {{workflow.input.v}}?", EXTRA}
    - {id: ship, type: agent, agent_name: Echo, depends_on: [gate], input: {}}
  output_mapping: {gate: "{{gate.output}}"}
"#;

fn decide(approved: bool, by: &str) -> Event {
    Event::ApprovalDecided {
        node: "gate".into(),
        approved,
        by: Some(by.into()),
        comment: Some("ok".into()),
    }
}

#[test]
fn an_approval_waits_for_an_allowed_approver() {
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1h"));
    let mut sim = Sim::new(&w).agent("Echo", echo);
    sim.at(ms(10), decide(true, "mallory"));
    sim.at(ms(20), decide(true, "alice"));
    let out = sim.run(json!({"v": 2}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(
        out.output,
        Some(json!({"gate": {"approved": true, "by": "alice", "comment": "ok"}}))
    );
    let asked = sim.commands.iter().find_map(|c| match c {
        Command::RequestApproval { message, .. } => message.clone(),
        _ => None,
    });
    assert_eq!(asked.as_deref(), Some("ship 2?"));
}

#[test]
fn a_rejected_approval_fails_the_run() {
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1h"));
    let mut sim = Sim::new(&w).agent("Echo", echo);
    sim.at(ms(10), decide(false, "alice"));
    let out = sim.run(json!({}));
    assert!(out.error.unwrap().message.contains("rejected by alice: ok"));
    assert_eq!(status(&sim, "ship"), NodeStatus::Skipped);
}

#[test]
fn an_approval_timeout_applies_on_timeout() {
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1m, on_timeout: approve"));
    let out = Sim::new(&w).agent("Echo", echo).run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1m"));
    let out = Sim::new(&w).agent("Echo", echo).run(json!({}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("no decision within 60 s"));
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

fn dispatched(sim: &Sim<'_>) -> Vec<String> {
    sim.dispatches().iter().map(|d| d.node_id.clone()).collect()
}

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
