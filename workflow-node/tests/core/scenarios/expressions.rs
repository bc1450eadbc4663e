//! Expressions over statuses and run metadata, and defaults from
//! schemas.

use super::*;
use workflow_node::core::sim::Reply;

const STATUSES: &str = r#"
name: Statuses
workflow:
  description: d
  version: "2.1"
  nodes:
    - {id: a, type: agent, agent_name: A}
    - id: b
      type: agent
      agent_name: Echo
      depends_on: [a]
      when: "{{a.status}} == 'success' and length({{a.output.items}}) > 1"
      input:
        label: "{{ a.output.items[0] == 'x' ? 'starts with x' : 'other' }}"
        n: "{{ length(a.output.items) }}"
        first: "{{ coalesce(a.output.missing, a.output.items[1]) }}"
        all: "{{ concat(a.output.items, ['z']) }}"
        text: "{{ toJSON(a.output.items) }}"
        parsed: "{{ fromJSON(a.output.json) }}"
        meta: "{{workflow.name}} {{workflow.version}} {{run.id}} {{run.started_at}}"
    - id: report
      type: agent
      agent_name: Echo
      input:
        a: "{{a.status}}"
        b: "{{b.status}}"
        why: "{{a.error}}"
        verdict: "{{ workflow.status == 'success' ? 'fine' : concat('broken: ', a.status) }}"
  on_exit: report
  output_mapping: {b: "{{b.output}}"}
"#;

fn input_of<'s>(sim: &'s Sim<'_>, node: &str) -> &'s serde_json::Value {
    let found = sim.dispatches().into_iter().find(|d| d.node_id == node);
    &found
        .unwrap_or_else(|| panic!("{node} was never called"))
        .input
}

#[test]
fn conditions_and_templates_see_node_statuses_run_metadata_ternaries_and_functions() {
    let w = wf(STATUSES);
    let mut sim = Sim::new(&w)
        .agent("A", |_| {
            Reply::ok(json!({"items": ["x", "y"], "json": "{\"k\": [1]}"}))
        })
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(
        input_of(&sim, "b"),
        &json!({
            "label": "starts with x",
            "n": 2,
            "first": "y",
            "all": ["x", "y", "z"],
            "text": "[\"x\",\"y\"]",
            "parsed": {"k": [1]},
            "meta": "Statuses 2.1 sim 1970-01-01T00:16:40.000Z",
        })
    );
    assert_eq!(
        input_of(&sim, "report"),
        &json!({"a": "success", "b": "success", "why": null, "verdict": "fine"})
    );
}

#[test]
fn an_exit_handler_sees_a_failed_nodes_status_and_error_and_a_skipped_one() {
    let w = wf(STATUSES);
    let mut sim = Sim::new(&w)
        .agent("A", |_| Reply::fail("no items today"))
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    let report = input_of(&sim, "report");
    assert_eq!(report["a"], json!("failure"));
    assert_eq!(report["b"], json!("skipped"));
    assert_eq!(report["verdict"], json!("broken: failure"));
    assert!(
        report["why"]
            .as_str()
            .is_some_and(|w| w.contains("no items today")),
        "{report}"
    );
}

#[test]
fn a_when_over_a_status_skips_and_a_pending_node_reads_pending() {
    let w = wf(STATUSES);
    // One item: `when` is false, b is skipped; b's status in the report says so.
    let mut sim = Sim::new(&w)
        .agent("A", |_| Reply::ok(json!({"items": ["q"]})))
        .agent("Echo", echo);
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(status(&sim, "b"), NodeStatus::Skipped);
    assert_eq!(input_of(&sim, "report")["b"], json!("skipped"));
}

#[test]
fn run_started_at_is_the_runs_start_on_every_attempt_and_replay() {
    // A retried call is dispatched later, by another event (and in real life perhaps by
    // another replica): its input still names the time the run started, from the record.
    let w = wf(r#"
name: Meta
workflow:
  description: d
  nodes:
    - id: a
      type: agent
      agent_name: Flaky
      input: {at: "{{run.started_at}}", id: "{{run.id}}"}
      retry_strategy: {limit: 2, backoff: {duration: 5s}}
  output_mapping: {at: "{{a.output.at}}"}
"#);
    let mut calls = 0;
    let mut sim = Sim::new(&w).agent("Flaky", move |d| {
        calls += 1;
        if calls < 3 {
            Reply::fail("not yet")
        } else {
            Reply::ok(d.input.clone())
        }
    });
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    let inputs: Vec<&serde_json::Value> = sim.dispatches().iter().map(|d| &d.input).collect();
    assert_eq!(inputs.len(), 3);
    assert!(sim.now.0 >= 1_010_000, "the retries came later");
    for input in inputs {
        assert_eq!(
            input,
            &json!({"at": "1970-01-01T00:16:40.000Z", "id": "sim"})
        );
    }
}

const DEFAULTS: &str = r#"
name: Defaults
workflow:
  description: d
  input_schema:
    type: object
    required: [text, mode]
    properties:
      text: {type: string}
      mode: {type: string, enum: [fast, careful], default: careful}
      options:
        type: object
        default: {}
        properties:
          retries: {type: integer, default: 2}
          tags: {type: array, default: [a]}
  output_schema:
    type: object
    required: [label, note]
    properties:
      label: {type: string}
      note: {type: string, default: none}
  nodes:
    - id: classify
      type: agent
      agent_name: Classifier
      input: {text: "{{workflow.input.text}}", mode: "{{workflow.input.mode}}", retries: "{{workflow.input.options.retries}}"}
      output_schema_override:
        type: object
        required: [label, confidence]
        properties:
          label: {type: string}
          confidence: {type: number, default: 0.5}
  output_mapping:
    label: "{{classify.output.label}}"
    confidence: "{{classify.output.confidence}}"
    options: "{{workflow.input.options}}"
"#;

#[test]
fn defaults_of_the_input_schema_nested_ones_too_are_applied_before_validation_and_templates() {
    let w = wf(DEFAULTS);
    let mut sim = Sim::new(&w).agent("Classifier", |_| Reply::ok(json!({"label": "spam"})));
    let out = sim.run(json!({"text": "hi"}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    // `mode` is required and absent: its default makes the input valid.
    assert_eq!(
        input_of(&sim, "classify"),
        &json!({"text": "hi", "mode": "careful", "retries": 2})
    );
    // The record keeps the completed input: every replica sees the same.
    assert_eq!(
        sim.state.input,
        json!({"text": "hi", "mode": "careful", "options": {"retries": 2, "tags": ["a"]}})
    );
    // The output contract's default completed the agent's answer (`confidence` is
    // required), and the output schema's default the run's output.
    assert_eq!(
        out.output,
        Some(json!({
            "label": "spam",
            "confidence": 0.5,
            "options": {"retries": 2, "tags": ["a"]},
            "note": "none"
        }))
    );
    let started = sim.commands.iter().find_map(|c| match c {
        Command::Progress(Progress::RunStarted { input }) => Some(input.clone()),
        _ => None,
    });
    assert_eq!(
        started.as_ref().map(|i| &i["mode"]),
        Some(&json!("careful"))
    );
}

#[test]
fn given_values_win_over_defaults_and_a_wrong_one_still_fails() {
    let w = wf(DEFAULTS);
    let mut sim = Sim::new(&w).agent("Classifier", |_| {
        Reply::ok(json!({"label": "ham", "confidence": 0.9}))
    });
    let out = sim.run(json!({"text": "hi", "mode": "fast", "options": {"retries": 0}}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(
        input_of(&sim, "classify"),
        &json!({"text": "hi", "mode": "fast", "retries": 0})
    );
    assert_eq!(
        out.output.as_ref().map(|o| &o["confidence"]),
        Some(&json!(0.9))
    );

    let mut sim = Sim::new(&w).agent("Classifier", echo);
    let out = sim.run(json!({"text": "hi", "mode": "slow"}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    let message = out.error.map(|e| e.message).unwrap_or_default();
    assert!(
        message.contains("input_schema") && message.contains("slow"),
        "{message}"
    );
    // A required field without a default is still required.
    let mut sim = Sim::new(&w).agent("Classifier", echo);
    let out = sim.run(json!({"mode": "fast"}));
    assert_eq!(out.status, Some(RunStatus::Failure));
}

#[test]
fn statuses_metadata_and_defaults_survive_crashes_and_redeliveries() {
    // Every event's replica dies after its commit (the outbox carries its commands out on
    // redelivery), and every event is delivered twice: the inputs sent are those of a run
    // without accidents.
    let w = wf(STATUSES);
    let clean = {
        let mut sim = Sim::new(&w)
            .agent("A", |_| {
                Reply::ok(json!({"items": ["x", "y"], "json": "1"}))
            })
            .agent("Echo", echo);
        sim.run(json!({}));
        sim.dispatches()
            .iter()
            .map(|d| d.input.clone())
            .collect::<Vec<_>>()
    };
    let mut sim = Sim::new(&w)
        .agent("A", |_| {
            Reply::ok(json!({"items": ["x", "y"], "json": "1"}))
        })
        .agent("Echo", echo);
    sim.outbox = true;
    sim.crash_after_commit = (0..40).step_by(2).collect();
    sim.redeliver = (1..40).step_by(2).collect();
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(out.finishes, 1);
    assert!(
        sim.redeliveries.len() >= 3,
        "{} redeliveries",
        sim.redeliveries.len()
    );
    let mut inputs: Vec<serde_json::Value> =
        sim.dispatches().iter().map(|d| d.input.clone()).collect();
    inputs.dedup();
    assert_eq!(inputs, clean);

    let w = wf(DEFAULTS);
    let mut sim = Sim::new(&w).agent("Classifier", |_| Reply::ok(json!({"label": "spam"})));
    sim.outbox = true;
    sim.crash_after_commit = [0, 1].into();
    sim.redeliver = [2, 3].into();
    let out = sim.run(json!({"text": "hi"}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(
        out.output.as_ref().map(|o| &o["confidence"]),
        Some(&json!(0.5))
    );
    assert_eq!(
        sim.state.input["options"],
        json!({"retries": 2, "tags": ["a"]})
    );
}
