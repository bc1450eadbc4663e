//! Traces over OTLP to a real receiver (`test_harness::otlp`, decoding the protobuf the
//! exporters send), across replicas and a crash.
//!
//! A workflow calls two agents and a sub-workflow; one of the agents calls the
//! sub-workflow too, from its handler. Two `workflow-node serve` processes host both
//! workflows with `OTEL_*` pointing at the receiver; the agents and the caller run here,
//! exporting to the same receiver. One replica is killed (SIGKILL) while the runs are in
//! flight. Each run must still come out as one trace whose tree is caller → workflow.run
//! → workflow.node → agent.call → agent.handle → (the sub-workflow's) workflow.run ..., with
//! every span's parent in the trace and times nested.
//!
//! One test per process: `telemetry::init` installs the process's global subscriber.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use agent_sdk::telemetry;
use agent_sdk::{handler_fn, AgentBuilder, AgentError, CallOptions, Mesh, NodeRequest};
use serde_json::json;
use test_harness::otlp::{Receiver, Span, Trace};
use tracing::Instrument;

use support::process::{self, Child};

const PARENT: &str = r#"
name: Parent
default_node_timeout_seconds: 30
workflow:
  description: two agents, then a sub-workflow
  nodes:
    - {id: first, type: agent, agent_name: Alpha, input: {x: "{{workflow.input.x}}"}}
    - {id: second, type: agent, agent_name: Beta, depends_on: [first], input: {x: "{{first.output.a}}"}}
    - {id: sub, type: workflow, workflow_name: Child, depends_on: [second], input: {x: "{{second.output.b}}"}}
  output_mapping: {result: "{{sub.output.c}}"}
"#;

const CHILD: &str = r#"
name: Child
default_node_timeout_seconds: 30
workflow:
  description: one agent
  nodes:
    - {id: only, type: agent, agent_name: Alpha, input: {x: "{{workflow.input.x}}"}}
  output_mapping: {c: "{{only.output.a}}"}
"#;

/// Runs started at once.
const RUNS: i64 = 3;

/// Replica `id`: `workflow-node serve` on `dir`, exporting to `otlp` as instance `r{id}`.
fn replica(id: usize, dir: &std::path::Path, nats: &str, otlp: &str) -> Child {
    Child::spawn(
        process::workflow_node()
            .arg("serve")
            .arg(dir)
            .args([
                "--nats-url",
                nats,
                "--ack-wait",
                "1",
                "--card-interval",
                "1",
            ])
            .env("RUST_LOG", "workflow_node=warn")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
            .env("OTEL_SERVICE_NAME", "workflow-node")
            .env(
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("service.instance.id=r{id}"),
            )
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            // A swallowed export (replica 0's) holds its flush, and so its acks, until the
            // kill, however slow the machine.
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", "120000")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    )
}

#[test]
fn runs_across_replicas_and_a_kill_make_one_trace_each_without_orphans() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let receiver = runtime.block_on(Receiver::start());
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    std::env::set_var("OTEL_SERVICE_NAME", "test-agents");
    std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "50");
    let telemetry = telemetry::Telemetry::builder("test")
        .log_default(None)
        .init();
    assert!(telemetry.is_exporting());
    runtime.block_on(scenario(&receiver));
    runtime.block_on(telemetry.shutdown());
}

async fn scenario(receiver: &Receiver) {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("parent.yaml"), PARENT).unwrap();
    std::fs::write(dir.path().join("child.yaml"), CHILD).unwrap();

    receiver.swallow("r0");
    let spawn = |i: usize| replica(i, dir.path(), &server.url(), &receiver.endpoint());
    let mut r0 = spawn(0);

    // Agents, here: Alpha adds one; Beta waits to be let go, calls Child from its handler
    // and doubles what it gets.
    let alpha = AgentBuilder::new("Alpha")
        .description("adds one")
        .handler(handler_fn(|req: NodeRequest| async move {
            Ok(json!({"a": req.input["x"].as_i64().unwrap_or(0) + 1}))
        }));
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (go_tx, go) = tokio::sync::watch::channel(false);
    let c = client.clone();
    let beta = AgentBuilder::new("Beta")
        .description("calls Child")
        .handler(handler_fn(move |req: NodeRequest| {
            let (c, entered, mut go) = (c.clone(), entered_tx.clone(), go.clone());
            async move {
                let _ = entered.send(());
                let _ = go.wait_for(|g| *g).await;
                let mut options = CallOptions::new(Duration::from_secs(60));
                options.headers = req.onward_headers();
                let x = req.input["x"].clone();
                let out = Mesh::new(c.clone())
                    .defaults(options)
                    .agent("Child")
                    .call(json!({"x": x}))
                    .await
                    .map_err(|e| AgentError::new(e.to_string()))?;
                Ok(json!({"b": out["c"].as_i64().unwrap_or(0) * 2}))
            }
        }));
    let _alpha = alpha.serve(client.clone()).await.expect("Alpha serves");
    let _beta = beta.serve(client.clone()).await.expect("Beta serves");

    r0.line("serving ").await;

    // The callers, each in a span of its own: its context goes in the request.
    let mut calls = Vec::new();
    let mut roots = Vec::new();
    for i in 0..RUNS {
        let span = tracing::info_span!("caller", run = i);
        let trace_id = telemetry::span_context(&span)
            .expect("the caller's span has a context")
            .trace_id()
            .to_string();
        roots.push(trace_id);
        let c = client.clone();
        calls.push(tokio::spawn(
            async move {
                Mesh::new(c.clone())
                    .defaults(CallOptions::new(Duration::from_secs(90)))
                    .agent("Parent")
                    .call(json!({"x": i * 10}))
                    .await
            }
            .instrument(span),
        ));
    }

    // Every run has reached Beta, on replica 0, whose spans so far are swallowed, and
    // whose events that ended spans wait for their export to be acked.
    for _ in 0..RUNS {
        tokio::time::timeout(Duration::from_secs(30), entered.recv())
            .await
            .expect("every run reaches Beta")
            .expect("Beta serves");
    }
    assert!(
        receiver.wait_for_swallowed(Duration::from_secs(10)).await,
        "replica 0 exported spans (swallowed)"
    );
    let mut r1 = spawn(1);
    r1.line("serving ").await;
    drop(r0);
    eprintln!("killed replica 0");
    go_tx.send(true).unwrap();

    for (i, call) in calls.into_iter().enumerate() {
        let out = call.await.unwrap().expect("the run succeeds");
        // x+1 → Beta calls Child: x+2, doubled → Child: +1.
        let x = i as i64 * 10;
        assert_eq!(out, json!({"result": (x + 2) * 2 + 1}), "run {i}");
    }

    for trace_id in roots {
        let trace = receiver
            .wait_for_spans(Duration::from_secs(60), |spans| {
                let trace = Trace::of(spans, &trace_id);
                complete(&trace).then_some(trace)
            })
            .await
            .unwrap_or_else(|spans| {
                let trace = Trace::of(&spans, &trace_id);
                panic!("trace {trace_id} incomplete:\n{}", trace.render())
            });
        eprintln!("trace {trace_id}:\n{}", trace.render());
        check(&trace);
    }
}

/// Every span the scenario makes, in one trace.
fn complete(t: &Trace) -> bool {
    let runs = t.named("workflow.run").count();
    let handles = t.named("agent.handle").count();
    let nodes = t.named("workflow.node").count();
    let calls = t.named("agent.call").count();
    t.named("caller").count() == 1
        && runs == 3
        && nodes >= 5
        && calls >= 5
        && handles == 4
        && t.orphans().is_empty()
}

fn check(t: &Trace) {
    let tree = t.render();
    assert!(t.orphans().is_empty(), "orphans in\n{tree}");
    let roots = t.roots();
    assert_eq!(roots.len(), 1, "one root\n{tree}");
    assert_eq!(roots[0].name, "caller");

    let parent = t
        .named("workflow.run")
        .find(|s| s.attr("workflow.name") == Some("Parent"))
        .expect("the Parent run");
    assert_eq!(t.path(parent), ["workflow.run", "caller"], "{tree}");
    assert_eq!(parent.attr("workflow.status"), Some("success"));
    assert!(parent.attr("workflow.execution_id").is_some());
    assert!(parent.attr("workflow.task_id").is_some());
    assert_eq!(parent.service_name, "workflow-node");
    // Every span of the workflow node came from replica 1 (replica 0's were swallowed),
    // the ones that ended on replica 0 emitted again by replica 1 from the outbox.
    for s in t.spans.iter().filter(|s| s.service_name == "workflow-node") {
        assert_eq!(
            s.resource.get("service.instance.id").map(String::as_str),
            Some("r1")
        );
    }
    // The run started on replica 0: its span starts before anything replica 1 did.
    let first_node = t
        .named("workflow.node")
        .find(|s| s.attr("node.id") == Some("first"))
        .expect("first");
    assert!(parent.start_unix_nano <= first_node.start_unix_nano);

    for node in ["first", "second", "sub"] {
        let n = t
            .named("workflow.node")
            .find(|s| s.attr("node.id") == Some(node))
            .unwrap_or_else(|| panic!("node {node}\n{tree}"));
        assert_eq!(
            t.parent(n).map(|p| p.span_id.as_str()),
            Some(parent.span_id.as_str())
        );
        assert_eq!(n.attr("node.status"), Some("success"));
    }

    // The agent Alpha, called by the first node.
    let first_call = t
        .named("agent.call")
        .find(|s| s.attr("node.id") == Some("first"))
        .expect("first's call");
    assert_eq!(first_call.attr("outcome"), Some("success"));
    assert_eq!(first_call.attr("agent.name"), Some("Alpha"));
    assert!(first_call.attr("sub_task.id").is_some());
    let alpha = t
        .children(&first_call.span_id)
        .next()
        .expect("Alpha's span");
    assert_eq!(alpha.name, "agent.handle");
    assert_eq!(alpha.service_name, "test-agents");
    assert_eq!(
        t.path(alpha),
        [
            "agent.handle",
            "agent.call",
            "workflow.node",
            "workflow.run",
            "caller"
        ],
        "{tree}"
    );

    // Child, called from Beta's handler.
    let children: Vec<&Span> = t
        .named("workflow.run")
        .filter(|s| s.attr("workflow.name") == Some("Child"))
        .collect();
    assert_eq!(children.len(), 2, "{tree}");
    let paths: Vec<Vec<String>> = children.iter().map(|c| t.path(c)).collect();
    let via_beta = [
        "workflow.run",
        "agent.handle",
        "agent.call",
        "workflow.node",
        "workflow.run",
        "caller",
    ];
    let via_node = [
        "workflow.run",
        "agent.call",
        "workflow.node",
        "workflow.run",
        "caller",
    ];
    assert!(paths.iter().any(|p| p == &via_beta), "{tree}");
    assert!(paths.iter().any(|p| p == &via_node), "{tree}");
    for child in &children {
        let node = t.children(&child.span_id).next().expect("Child's node");
        let call = t.children(&node.span_id).next().expect("Child's call");
        let handle = t.children(&call.span_id).next().expect("Alpha in Child");
        assert_eq!(handle.attr("agent.name"), Some("Alpha"));
    }

    // Each span lies within its parent (same clock; the shell's times are whole ms).
    const SLACK: u64 = 3_000_000;
    for s in &t.spans {
        assert!(s.end_unix_nano >= s.start_unix_nano, "{s:?}");
        if let Some(p) = t.parent(s) {
            assert!(
                s.start_unix_nano + SLACK >= p.start_unix_nano
                    && s.end_unix_nano <= p.end_unix_nano + SLACK,
                "{} ({}) is not within {} ({})\n{tree}",
                s.name,
                s.span_id,
                p.name,
                p.span_id
            );
        }
    }
}
