//! Per-node error policy: `on_failure` / `error_policy.on_failure` (halt, continue,
//! skip_dependents), the workflow's default, and how it meets maps, loops, forks, joins and
//! exit handlers.

use super::*;

/// `a` fails; `b` depends on it; `x` is independent; `c` needs `b` and `x`.
fn diamond(policy: &str) -> Workflow {
    wf(&format!(
        r#"
name: Policy
workflow:
  description: d
  nodes:
    - {{id: a, type: agent, agent_name: Bad, {policy}}}
    - {{id: b, type: agent, agent_name: Echo, depends_on: [a], input: {{a: "{{{{a.output}}}}"}}}}
    - {{id: x, type: agent, agent_name: Echo, input: {{x: 1}}}}
    - {{id: c, type: agent, agent_name: Echo, depends_on: [b, x], input: {{}}}}
  output_mapping: {{a: "{{{{a.output}}}}", x: "{{{{x.output.x}}}}"}}
"#
    ))
}

fn bad(_: &workflow_node::core::Dispatch) -> Reply {
    Reply::fail("boom")
}

fn sim<'w>(w: &'w Workflow) -> Sim<'w> {
    Sim::new(w).agent("Bad", bad).agent("Echo", echo)
}

#[test]
fn halt_is_the_default_and_fails_the_run() {
    let w = diamond("input: {}");
    let mut sim = sim(&w);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(out.error.unwrap().node_id.as_deref(), Some("a"));
    assert_eq!(status(&sim, "b"), NodeStatus::Skipped);
}

#[test]
fn continue_records_the_failure_with_a_null_output_and_the_run_goes_on_to_succeed() {
    for spelling in [
        "on_failure: continue",
        "error_policy: {on_failure: continue}",
    ] {
        let w = diamond(spelling);
        let mut sim = sim(&w);
        let out = sim.run(json!({}));
        assert_eq!(out.status, Some(RunStatus::Success), "{spelling}");
        assert_eq!(out.error, None, "{spelling}");
        assert_eq!(out.output, Some(json!({"a": null, "x": 1})), "{spelling}");
        assert_eq!(status(&sim, "a"), NodeStatus::Failure);
        assert_eq!(sim.state.nodes["a"].output, Some(json!(null)));
        assert!(sim.state.nodes["a"]
            .error
            .as_deref()
            .unwrap()
            .contains("boom"));
        assert_eq!(status(&sim, "b"), NodeStatus::Success);
        assert_eq!(status(&sim, "c"), NodeStatus::Success);
        let b_input = &sim
            .dispatches()
            .iter()
            .find(|d| d.node_id == "b")
            .unwrap()
            .input;
        assert_eq!(b_input, &json!({"a": null}), "{spelling}");
        // The failure is in the progress, as the node's own end.
        assert!(sim.commands.iter().any(|c| matches!(c,
            Command::Progress(Progress::NodeFinished { node_id, status: NodeStatus::Failure, .. })
                if node_id == "a")));
    }
}

#[test]
fn a_node_after_a_continued_failure_can_branch_on_it() {
    let w = wf(r#"
name: Branch
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Bad, on_failure: continue}
    - {id: fallback, type: agent, agent_name: Echo, depends_on: [a], when: "{{a.output}} == null", input: {fb: true}}
    - {id: normal, type: agent, agent_name: Echo, depends_on: [a], when: "{{a.output}} != null", input: {}}
  output_mapping: {fb: "{{fallback.output.fb}}"}
"#);
    let mut sim = sim(&w);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"fb": true})));
    assert_eq!(status(&sim, "normal"), NodeStatus::Skipped);
}

#[test]
fn a_continued_failure_is_seen_as_failure_by_status_in_conditions_and_templates() {
    let w = wf(r#"
name: ByStatus
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Bad, on_failure: continue}
    - {id: fallback, type: agent, agent_name: Echo, depends_on: [a], when: "{{a.status}} == 'failure'", input: {was: "{{a.status}}", why: "{{a.error}}"}}
    - {id: normal, type: agent, agent_name: Echo, depends_on: [a], when: "{{a.status}} == 'success'", input: {}}
  output_mapping: {was: "{{fallback.output.was}}", said: "{{ a.status == 'failure' ? 'fell back' : 'fine' }}"}
"#);
    let mut sim = sim(&w);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let output = out.output.unwrap();
    assert_eq!(output["was"], json!("failure"));
    assert_eq!(output["said"], json!("fell back"));
    assert_eq!(status(&sim, "normal"), NodeStatus::Skipped);
    let fallback_input = &sim
        .dispatches()
        .iter()
        .find(|d| d.node_id == "fallback")
        .unwrap()
        .input;
    assert!(fallback_input["why"].as_str().unwrap().contains("boom"));
}

#[test]
fn a_conditional_that_fails_under_continue_takes_no_branch() {
    let w = wf(r#"
name: Cond
workflow:
  description: d
  nodes:
    - {id: pick, type: conditional, condition: "{{workflow.input.n}} > 1", true_branch: big, false_branch: small, on_failure: continue}
    - {id: big, type: agent, agent_name: Echo, depends_on: [pick], input: {}}
    - {id: small, type: agent, agent_name: Echo, depends_on: [pick], input: {}}
    - {id: other, type: agent, agent_name: Echo, input: {o: 1}}
  output_mapping: {o: "{{other.output.o}}"}
"#);
    let mut s = sim(&w);
    // Ordering an object with a number is an error: the condition fails.
    let out = s.run(json!({"n": {"x": 1}}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(status(&s, "pick"), NodeStatus::Failure);
    for branch in ["big", "small"] {
        assert_eq!(status(&s, branch), NodeStatus::Skipped);
        let why = s.state.nodes[branch].error.clone().unwrap();
        assert!(why.contains("no branch taken: 'pick' failed"), "{why}");
    }
    assert_eq!(dispatched(&s), vec!["other".to_string()]);
}

#[test]
fn skip_dependents_skips_every_node_downstream_and_the_rest_goes_on() {
    let w = diamond("on_failure: skip_dependents");
    let mut sim = sim(&w);
    let out = sim.run(json!({}));
    // `a`'s output is null, so the mapping resolves; the run succeeds.
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"a": null, "x": 1})));
    assert_eq!(status(&sim, "a"), NodeStatus::Failure);
    assert_eq!(status(&sim, "x"), NodeStatus::Success);
    assert_eq!(status(&sim, "b"), NodeStatus::Skipped);
    let why_b = sim.state.nodes["b"].error.clone().unwrap();
    assert!(
        why_b.contains("'a' failed (on_failure: skip_dependents)"),
        "{why_b}"
    );
    // `c` also needs `x`, which succeeded: it is skipped all the same, transitively.
    assert_eq!(status(&sim, "c"), NodeStatus::Skipped);
    let why_c = sim.state.nodes["c"].error.clone().unwrap();
    assert!(
        why_c.contains("'b' was skipped because 'a' failed"),
        "{why_c}"
    );
    assert!(!dispatched(&sim).contains(&"c".to_string()));
}

#[test]
fn a_tolerated_failure_does_not_stop_the_run_under_fail_fast() {
    let w = wf(r#"
name: FF
workflow:
  description: d
  fail_fast: true
  nodes:
    - {id: a, type: agent, agent_name: Bad, on_failure: continue}
    - {id: slow, type: agent, agent_name: Slow, input: {}}
    - {id: after, type: agent, agent_name: Echo, depends_on: [slow], input: {done: true}}
  output_mapping: {done: "{{after.output.done}}"}
"#);
    let mut sim = sim(&w).agent("Slow", |d| Reply::ok(d.input.clone()).after(ms(500)));
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"done": true})));
}

#[test]
fn the_workflow_default_applies_to_nodes_without_their_own() {
    let yaml = r#"
name: Default
workflow:
  description: d
  error_policy: {on_failure: continue}
  nodes:
    - {id: a, type: agent, agent_name: Bad}
    - {id: b, type: agent, agent_name: Echo, depends_on: [a], input: {}}
    - {id: h, type: agent, agent_name: Bad, depends_on: [b] EXTRA}
  output_mapping: {}
"#;
    let w = wf(&yaml.replace(" EXTRA", ""));
    let mut s = sim(&w);
    assert_eq!(s.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(status(&s, "b"), NodeStatus::Success);
    // A node's own policy wins over the default.
    let w = wf(&yaml.replace(" EXTRA", ", on_failure: halt"));
    let mut s = sim(&w);
    let out = s.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(out.error.unwrap().node_id.as_deref(), Some("h"));
    // Seed 000's workflow-level spelling.
    let w = wf(&yaml
        .replace("{on_failure: continue}", "{on_stage_failure: continue}")
        .replace(" EXTRA", ""));
    assert_eq!(sim(&w).run(json!({})).status, Some(RunStatus::Success));
}

#[test]
fn a_map_item_that_fails_under_continue_gives_null_and_the_map_goes_on() {
    let w = wf(r#"
name: M
workflow:
  description: d
  nodes:
    - id: each
      type: map
      items: "{{workflow.input.xs}}"
      node: one
    - {id: one, type: agent, agent_name: Picky, input: {x: "{{_map_item}}"}, on_failure: continue}
  output_mapping: {results: "{{each.output.results}}"}
"#);
    let picky = |d: &workflow_node::core::Dispatch| {
        if d.input["x"] == json!(2) {
            Reply::fail("no twos")
        } else {
            Reply::ok(d.input.clone())
        }
    };
    let mut sim = Sim::new(&w).agent("Picky", picky);
    let out = sim.run(json!({"xs": [1, 2, 3]}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(
        out.output,
        Some(json!({"results": [{"x": 1}, null, {"x": 3}]}))
    );
}

#[test]
fn a_loop_iteration_that_fails_under_continue_gives_null_and_the_loop_goes_on() {
    let w = wf(r#"
name: L
workflow:
  description: d
  nodes:
    - id: again
      type: loop
      node: step
      condition: "{{_loop_iteration}} < 2"
      max_iterations: 5
    - {id: step, type: agent, agent_name: Bad, input: {}, on_failure: continue}
  output_mapping: {n: "{{again.output.iterations_completed}}"}
"#);
    let mut sim = sim(&w);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(out.output, Some(json!({"n": 3})));
}

#[test]
fn a_fork_under_continue_fails_alone_and_a_join_all_takes_its_null() {
    let w = wf(r#"
name: F
workflow:
  description: d
  nodes:
    - id: both
      type: fork
      on_failure: continue
      branches:
        - {id: good, agent_name: Echo, input: {g: 1}, output_key: g}
        - {id: bad, agent_name: Bad, input: {}, output_key: b}
    - {id: other, type: agent, agent_name: Echo, input: {o: 1}}
    - {id: meet, type: join, depends_on: [both, other], wait_for: [both, other], strategy: all}
  output_mapping: {meet: "{{meet.output}}"}
"#);
    let mut sim = sim(&w);
    let out = sim.run(json!({}));
    assert_eq!(status(&sim, "both"), NodeStatus::Failure);
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(
        out.output,
        Some(json!({"meet": {"both": null, "other": {"o": 1}}}))
    );
}

#[test]
fn a_join_all_is_skipped_by_a_skip_dependents_failure_and_a_join_any_still_meets() {
    let yaml = r#"
name: J
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Bad, on_failure: skip_dependents}
    - {id: b, type: agent, agent_name: Echo, input: {b: 1}}
    - {id: meet, type: join, depends_on: [a, b], wait_for: [a, b], strategy: STRATEGY}
  output_mapping: {}
"#;
    let w = wf(&yaml.replace("STRATEGY", "all"));
    let mut s = sim(&w);
    assert_eq!(s.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(status(&s, "meet"), NodeStatus::Skipped);
    let why = s.state.nodes["meet"].error.clone().unwrap();
    assert!(why.contains("skip_dependents"), "{why}");
    let w = wf(&yaml.replace("STRATEGY", "any"));
    let mut s = sim(&w);
    assert_eq!(s.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(status(&s, "meet"), NodeStatus::Success);
}

#[test]
fn an_exit_handler_under_continue_does_not_fail_a_successful_run() {
    let yaml = r#"
name: E
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {ok: true}}
    - {id: notify, type: agent, agent_name: Bad, input: {} EXTRA}
  on_exit: {always: notify}
  output_mapping: {ok: "{{a.output.ok}}"}
"#;
    let w = wf(&yaml.replace(" EXTRA", ""));
    assert_eq!(sim(&w).run(json!({})).status, Some(RunStatus::Failure));
    let w = wf(&yaml.replace(" EXTRA", ", on_failure: continue"));
    let mut s = sim(&w);
    let out = s.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"ok": true})));
    assert_eq!(status(&s, "notify"), NodeStatus::Failure);
}

#[test]
fn the_policy_survives_a_crash_after_every_commit() {
    let w = diamond("on_failure: skip_dependents");
    let mut s = sim(&w);
    s.outbox = true;
    s.crash_after_commit = (0..40).collect();
    let out = s.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.finishes, 1);
    assert_eq!(status(&s, "c"), NodeStatus::Skipped);
}

fn problems(yaml: &str) -> String {
    match parse_str(yaml, "t.yaml") {
        Ok(_) => panic!("expected problems in:\n{yaml}"),
        Err(p) => p
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[test]
fn bad_policies_are_refused_naming_the_node_and_field() {
    let base = r#"
name: V
workflow:
  description: d
  NODEWIDE
  nodes:
    - {id: a, type: agent, agent_name: A, POLICY}
    - {id: m, type: map, with_items: [1], node: inner}
    - {id: inner, type: agent, agent_name: A, INNER}
  output_mapping: {}
"#;
    let case = |nodewide: &str, policy: &str, inner: &str| {
        problems(
            &base
                .replace("NODEWIDE", nodewide)
                .replace("POLICY", policy)
                .replace(", INNER", inner),
        )
    };
    let p = case("", "on_failure: ignore", "");
    assert!(
        p.contains("on_failure")
            && p.contains("expected halt, continue or skip_dependents, found 'ignore'"),
        "{p}"
    );
    let p = case("", "on_failure: retry", "");
    assert!(p.contains("retry_strategy"), "{p}");
    let p = case(
        "",
        "on_failure: continue, error_policy: {on_failure: halt}",
        "",
    );
    assert!(p.contains("not both"), "{p}");
    let p = case(
        "",
        "error_policy: {on_failure: continue, retry: {max_attempts: 3}}",
        "",
    );
    assert!(
        p.contains("error_policy.retry") && p.contains("unknown field"),
        "{p}"
    );
    let p = case("", "error_policy: continue", "");
    assert!(
        p.contains("error_policy") && p.contains("expected a mapping"),
        "{p}"
    );
    let p = case("", "error_policy: {}", "");
    assert!(
        p.contains("error_policy.on_failure") && p.contains("missing field"),
        "{p}"
    );
    let p = case("", "input: {}", ", on_failure: skip_dependents");
    assert!(
        p.contains("inner") && p.contains("skip_dependents does not apply"),
        "{p}"
    );
    let p = case("error_policy: {on_failure: rollback}", "input: {}", "");
    assert!(p.contains("'rollback' is not supported"), "{p}");
    // `abort` (seed 001) is read as halt.
    let ok = base
        .replace("NODEWIDE", "")
        .replace("POLICY", "on_failure: abort")
        .replace(", INNER", "");
    let w = parse_str(&ok, "t.yaml").unwrap();
    assert_eq!(
        w.on_failure_of(w.node("a").unwrap()),
        workflow_node::definition::OnFailure::Halt
    );
}
