//! Expressions and defaults over a real nats-server: a request
//! that leaves out a required field with a default is accepted and completed; an agent's
//! answer is completed by the node's output contract; templates see node statuses, run and
//! workflow metadata, ternaries and functions; an exit handler sees a failed node's status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sdk::workflow::{invoke, RunResult};
use messages::workflow::WorkflowDataPart;
use serde_json::{json, Value};
use workflow_node::shell::Config;

use crate::support;
use crate::support::fixtures::echo;

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = concat!(
    "agents:",
    echo!(),
    r#"
  - name: Labeler
    rules: [{output: {label: "{{input.text}}"}}]
  - name: Fatal
    fail_first: 5
    error: bad request
    error_kind: invalid
    rules: [{output: {ok: true}}]
"#,
);

const TRIAGE: &str = r#"
name: Triage
workflow:
  description: defaults, statuses, metadata, ternaries and functions
  version: "3.2.1"
  input_schema:
    type: object
    required: [text, mode]
    properties:
      text: {type: string}
      mode: {type: string, enum: [fast, careful], default: careful}
      options: {type: object, default: {}, properties: {depth: {type: integer, default: 2}}}
  nodes:
    - id: label
      type: agent
      agent_name: Labeler
      input: {text: "{{workflow.input.text}}"}
      output_schema_override:
        type: object
        required: [label, score]
        properties: {label: {type: string}, score: {type: number, default: 0.5}}
    - id: summary
      type: agent
      agent_name: Echo
      depends_on: [label]
      when: "{{label.status}} == 'success' and {{label.output.score}} < 1"
      input:
        verdict: "{{ label.output.score > 0.4 ? 'likely' : 'unlikely' }}"
        size: "{{ length(workflow.input.text) }}"
        tags: "{{ concat([workflow.input.mode], ['d', toJSON(workflow.input.options.depth)]) }}"
        first: "{{ coalesce(label.output.missing, label.output.label) }}"
        status: "{{label.status}}"
        run: "{{run.id}}"
        started: "{{run.started_at}}"
        workflow: "{{workflow.name}}@{{workflow.version}}"
  output_mapping:
    summary: "{{summary.output}}"
    options: "{{workflow.input.options}}"
"#;

const GUARDED: &str = r#"
name: Guarded
workflow:
  description: an exit handler that reports what failed
  nodes:
    - {id: risky, type: agent, agent_name: Fatal}
    - id: report
      type: agent
      agent_name: Echo
      input:
        risky: "{{risky.status}}"
        outcome: "{{ workflow.status == 'success' ? 'fine' : concat('run ', workflow.status, ', risky ', risky.status) }}"
        why: "{{risky.error}}"
  on_exit: report
  output_mapping: {}
"#;

async fn run(
    client: &async_nats::Client,
    workflow: &str,
    input: Value,
) -> (RunResult, BTreeMap<String, Value>) {
    let outputs: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    let seen = outputs.clone();
    let result = invoke(client, "mesh", workflow, &input, TIMEOUT, move |part| {
        if let WorkflowDataPart::NodeExecutionResult(r) = part {
            if let Some(output) = &r.output {
                let mut seen = seen.lock().expect("not poisoned");
                seen.insert(r.node_id.clone(), output.clone());
            }
        }
    })
    .await
    .expect("a result");
    let outputs = outputs.lock().expect("not poisoned").clone();
    (result, outputs)
}

fn config() -> Config {
    Config {
        card_wait: Duration::from_millis(500),
        ..Config::default()
    }
}

#[tokio::test]
async fn defaults_complete_the_input_and_an_answer_and_templates_see_statuses_and_metadata() {
    let m = support::mesh::mesh(STUBS, &[TRIAGE], config()).await;
    // `mode` is required: the node accepts the request because its default fills it in.
    let (r, _) = run(&m.client, "Triage", json!({"text": "hello"})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    let output = r.output.expect("an output");
    let summary = &output["summary"];
    assert_eq!(summary["verdict"], json!("likely"), "{output}");
    assert_eq!(summary["size"], json!(5));
    assert_eq!(summary["tags"], json!(["careful", "d", "2"]));
    assert_eq!(summary["first"], json!("hello"));
    assert_eq!(summary["status"], json!("success"));
    assert_eq!(summary["workflow"], json!("Triage@3.2.1"));
    assert_eq!(output["options"], json!({"depth": 2}));
    // The run's id as the caller knows it; its start as RFC 3339, from the record.
    assert_eq!(summary["run"].as_str(), r.execution_id.as_deref());
    let started = summary["started"].as_str().expect("a string");
    assert!(
        started.len() == 24 && started.ends_with('Z') && started.as_bytes()[10] == b'T',
        "{started}"
    );

    // A value given wins over the default; a value outside the enum is refused at once.
    let (r, _) = run(&m.client, "Triage", json!({"text": "x", "mode": "fast"})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    let tags = &r.output.expect("an output")["summary"]["tags"];
    assert_eq!(tags[0], json!("fast"));
    let (r, _) = run(&m.client, "Triage", json!({"text": "x", "mode": "slow"})).await;
    assert_eq!(r.status, "failure");
    assert!(r.execution_id.is_none(), "refused before a run was created");
    let (r, _) = run(&m.client, "Triage", json!({"mode": "fast"})).await;
    assert_eq!(
        r.status, "failure",
        "text has no default and stays required"
    );
}

#[tokio::test]
async fn an_exit_handler_sees_the_failed_nodes_status_and_error() {
    let m = support::mesh::mesh(STUBS, &[GUARDED], config()).await;
    let (r, outputs) = run(&m.client, "Guarded", json!({})).await;
    assert_eq!(r.status, "failure");
    let report = outputs.get("report").expect("the exit handler's output");
    assert_eq!(report["risky"], json!("failure"), "{report}");
    assert_eq!(report["outcome"], json!("run failure, risky failure"));
    assert!(
        report["why"]
            .as_str()
            .is_some_and(|w| w.contains("bad request")),
        "{report}"
    );
}
