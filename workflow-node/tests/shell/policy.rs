//! Per-node error policy and the `timed_out` outcome over a real nats-server: what the
//! caller, `tasks/get`, the runs bucket and the operator's CLI see,
//! with two replicas sharing the runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use agent_sdk::workflow::{get_run, invoke, RunResult};
use messages::workflow::{NodePhase, RunOutcome, RunPhase, WorkflowDataPart};
use messages::TaskState;
use serde_json::{json, Value};
use workflow_node::core::{NodeStatus, RunStatus};
use workflow_node::shell::Inspector;
use workflow_node::shell::{Config, MetricsConfig, Otlp, WorkflowNode};

use crate::support;
use crate::support::fixtures::{doubler, echo};

const TIMEOUT: Duration = Duration::from_secs(60);

const STUBS: &str = concat!(
    "agents:",
    echo!(),
    doubler!(),
    r#"
  - name: Broken
    rules: [{fail: "the lookup service is down", error_kind: unavailable}]
  - name: Slow
    delay: 10s
    rules: [{output: {found: true}}]
"#,
);

const POLICY: &str = r#"
name: Policy
workflow:
  description: two optional lookups, then a fallback
  nodes:
    - {id: lookup, type: agent, agent_name: Broken, input: {}, on_failure: continue}
    - {id: slow_lookup, type: agent, agent_name: Slow, input: {}, timeout: 300ms, error_policy: {on_failure: skip_dependents}}
    - {id: use_slow, type: agent, agent_name: Echo, depends_on: [slow_lookup]}
    - {id: fallback, type: agent, agent_name: Doubler, depends_on: [lookup], when: "{{lookup.output}} == null", input: {value: "{{workflow.input.value}}"}}
  output_mapping: {lookup: "{{lookup.output}}", result: "{{fallback.output.value}}"}
"#;

const HALT: &str = r#"
name: Halt
workflow:
  description: a lookup that times out under the default policy
  nodes:
    - {id: slow_lookup, type: agent, agent_name: Slow, input: {}, timeout: 300ms}
    - {id: after, type: agent, agent_name: Echo, depends_on: [slow_lookup]}
  output_mapping: {}
"#;

const DEADLINE: &str = r#"
name: Deadline
max_workflow_execution_time_seconds: 1
workflow:
  description: waits longer than it may
  nodes:
    - {id: lookup, type: agent, agent_name: Slow, input: {}, timeout: 1h}
    - {id: report, type: agent, agent_name: Echo, input: {status: "{{workflow.status}}"}}
  on_exit: {on_failure: report}
  output_mapping: {}
"#;

async fn mesh() -> support::mesh::Mesh {
    let config = Config {
        metrics: MetricsConfig {
            addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            otlp: Otlp::Off,
            ..MetricsConfig::default()
        },
        ..Config::default()
    };
    support::mesh::mesh(STUBS, &[POLICY, HALT, DEADLINE], config).await
}

async fn run(
    m: &support::mesh::Mesh,
    workflow: &str,
    input: Value,
) -> (RunResult, Vec<RunOutcome>) {
    let mut outcomes = Vec::new();
    let r = invoke(&m.client, "mesh", workflow, &input, TIMEOUT, |p| {
        if let WorkflowDataPart::ExecutionResult(e) = p {
            outcomes.push(e.status);
        }
    })
    .await
    .expect("the run");
    (r, outcomes)
}

fn bin(server: &test_harness::NatsServer, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .env_remove("NATS_URL")
        .env_remove("MESH_NKEY_SEED_FILE")
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(args)
        .args(["--nats-url", &server.url()])
        .output()
        .expect("the binary");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn tolerated_failures_let_the_run_succeed_and_every_view_shows_them() {
    let m = mesh().await;
    // A second replica shares the runs: events go to whichever pulls them.
    let replica = WorkflowNode::start(
        m.client.clone(),
        support::mesh::workflows(&[POLICY, HALT, DEADLINE]),
        Config::default(),
    )
    .await
    .expect("a second replica");
    let runs = (0..4).map(|i| run(&m, "Policy", json!({"value": 20 + i})));
    for (i, (r, outcomes)) in futures::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(r.status, "success", "{:?}", r.error);
        assert_eq!(
            r.output,
            Some(json!({"lookup": null, "result": 2 * (20 + i)}))
        );
        let node = |id: &str| r.nodes.get(id).map(String::as_str);
        assert_eq!(node("lookup"), Some("failure"), "{:?}", r.nodes);
        assert_eq!(node("slow_lookup"), Some("timed_out"), "{:?}", r.nodes);
        assert_eq!(node("use_slow"), Some("skipped"), "{:?}", r.nodes);
        assert_eq!(node("fallback"), Some("success"), "{:?}", r.nodes);
        assert_eq!(outcomes, vec![RunOutcome::Success]);

        // tasks/get says the same, from the run's record.
        let execution = r.execution_id.clone().expect("an execution id");
        let state = get_run(&m.client, "mesh", "Policy", &execution, None)
            .await
            .expect("tasks/get");
        assert_eq!(state.state, TaskState::Completed);
        assert_eq!(state.run.status, RunPhase::Success);
        assert_eq!(state.run.nodes["lookup"], NodePhase::Failure);
        assert_eq!(state.run.nodes["slow_lookup"], NodePhase::TimedOut);
        assert_eq!(state.run.nodes["use_slow"], NodePhase::Skipped);
    }
    replica.shutdown().await;

    // The record keeps the failure with a null output, and `runs show` prints it.
    let inspector = Inspector::open(m.client.clone(), "mesh").await.unwrap();
    let found = inspector.list(Some("Policy")).await.unwrap();
    assert_eq!(found.len(), 4);
    let one = &found[0];
    let state = &one.record.state;
    assert_eq!(state.status, RunStatus::Success);
    assert_eq!(state.node_status("slow_lookup"), NodeStatus::TimedOut);
    assert_eq!(state.nodes["lookup"].output, Some(Value::Null));
    assert!(state.nodes["use_slow"]
        .error
        .as_deref()
        .unwrap()
        .contains("'slow_lookup' failed (on_failure: skip_dependents)"));
    let shown = bin(&m.server, &["runs", "show", &one.execution.0, "--json"]);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["status"], "success");
    let statuses: Vec<(&str, &str)> = shown["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n["status"].as_str().unwrap()))
        .collect();
    assert!(statuses.contains(&("slow_lookup", "timed_out")), "{shown}");
    assert!(statuses.contains(&("lookup", "failure")), "{shown}");
}

#[tokio::test]
async fn a_timed_out_node_under_halt_fails_the_run_and_a_deadline_times_it_out() {
    let m = mesh().await;
    let (r, outcomes) = run(&m, "Halt", json!({})).await;
    assert_eq!(r.status, "failure", "{:?}", r.error);
    assert_eq!(
        r.nodes.get("slow_lookup").map(String::as_str),
        Some("timed_out")
    );
    assert_eq!(r.nodes.get("after").map(String::as_str), Some("skipped"));
    assert_eq!(outcomes, vec![RunOutcome::Failure]);

    let (r, outcomes) = run(&m, "Deadline", json!({})).await;
    assert_eq!(r.status, "timed_out", "{:?}", r.error);
    assert_eq!(outcomes, vec![RunOutcome::TimedOut]);
    let error = r.error.unwrap_or_default();
    assert!(error.contains("Workflow Deadline timed out"), "{error}");
    assert!(
        error.contains("max_workflow_execution_time_seconds (1 s)"),
        "{error}"
    );
    assert_eq!(r.nodes.get("lookup").map(String::as_str), Some("cancelled"));
    assert_eq!(r.nodes.get("report").map(String::as_str), Some("success"));

    let execution = r.execution_id.expect("an execution id");
    let state = get_run(&m.client, "mesh", "Deadline", &execution, None)
        .await
        .expect("tasks/get");
    assert_eq!(state.state, TaskState::Failed);
    assert_eq!(state.run.status, RunPhase::TimedOut);

    // `runs list --status timed_out` finds it, and only it.
    let listed = bin(
        &m.server,
        &["runs", "list", "--json", "--status", "timed_out"],
    );
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![execution.as_str()], "{listed}");
    assert_eq!(listed[0]["status"], "timed_out");

    // Metrics label runs and nodes with the status.
    for w in ["Halt", "Deadline"] {
        support::mesh::settled(&m.client, w).await;
    }
    let addr = m.node.metrics_addr().expect("metrics are served");
    let s = support::metrics::scrape(addr).await;
    let ended = |w: &str, status: &str| {
        s.sum(
            "workflow_runs_ended_total",
            &[("workflow", w), ("status", status)],
        )
    };
    assert_eq!(ended("Deadline", "timed_out"), 1.0, "{}", s.text);
    assert_eq!(ended("Halt", "failure"), 1.0, "{}", s.text);
    let nodes = |w: &str, status: &str| {
        s.sum(
            "workflow_node_duration_seconds_count",
            &[("workflow", w), ("node_type", "agent"), ("status", status)],
        )
    };
    assert_eq!(nodes("Halt", "timed_out"), 1.0, "{}", s.text);
}
