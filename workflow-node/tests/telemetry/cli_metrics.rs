//! Metrics from the real `workflow-node serve` binary: with `--metrics-addr 127.0.0.1:0`
//! it prints where `/metrics` is and a scrape counts its runs; with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` set it pushes the same instruments over OTLP/HTTP
//! (protobuf), and its SIGTERM drain exports what the last interval had not. The OTLP
//! requests are decoded with `opentelemetry-proto` by a receiver started by the test.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agent_sdk::workflow::invoke;
use serde_json::json;

use crate::support;
use crate::support::fixtures::{doubler, BROKEN, CHAIN};
use crate::support::process::{self, Child};

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = concat!(
    "agents:",
    doubler!(),
    r#"
  - name: Fatal
    fail_first: 100
    error: bad request
    rules: [{output: {ok: true}}]
"#,
);

/// A server, stub agents in this process, and the workflow files.
struct Setup {
    server: test_harness::NatsServer,
    client: async_nats::Client,
    dir: tempfile::TempDir,
    _stubs: Vec<agent_sdk::AgentHandle>,
}

impl Setup {
    /// Waits until requests to Chain and Broken find a responder. `serve` prints "serving"
    /// once its subscriptions are written to its socket, which may be a moment before the
    /// server has read them. The probe (`{}`, not a JSON-RPC request) is refused at once
    /// and starts no run.
    async fn served(&self) {
        use async_nats::RequestErrorKind;
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        for workflow in ["Chain", "Broken"] {
            let subject = messages::subjects::agent_request("mesh", workflow);
            loop {
                match self.client.request(subject.clone(), "{}".into()).await {
                    Err(e) if e.kind() == RequestErrorKind::NoResponders => {
                        assert!(
                            tokio::time::Instant::now() < deadline,
                            "nothing serves {workflow}"
                        );
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    _ => break,
                }
            }
        }
    }
}

async fn setup() -> Setup {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("stubs.yaml"), STUBS).expect("stubs");
    std::fs::create_dir(dir.path().join("wf")).expect("dir");
    std::fs::write(dir.path().join("wf/chain.yaml"), CHAIN).expect("workflow");
    std::fs::write(dir.path().join("wf/broken.yaml"), BROKEN).expect("workflow");
    let file = agent_sdk::stub::load_stub_file(dir.path().join("stubs.yaml")).expect("stubs");
    let stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", file)
        .await
        .expect("stubs");
    Setup {
        server,
        client,
        dir,
        _stubs: stubs,
    }
}

/// `workflow-node serve` on the setup's workflows with `args` and `env`, and no `OTEL_*`
/// setting of the test's own environment.
fn spawn_serve(dir: &Path, url: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut command = process::workflow_node();
    command
        .arg("serve")
        .arg(dir.join("wf"))
        .args(["--nats-url", url])
        .args(args)
        .env("RUST_LOG", "warn");
    for key in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ] {
        command.env_remove(key);
    }
    command.envs(env.iter().copied());
    Child::spawn(&mut command)
}

/// SIGTERM, then `serve`'s exit status.
async fn terminate(mut serve: Child) -> std::process::ExitStatus {
    serve.terminate();
    serve.exited().await
}

/// Waits until every event of `workflow` is processed and acked.
async fn settled(client: &async_nats::Client, workflow: &str) {
    let js = async_nats::jetstream::new(client.clone());
    let stream = workflow_node::shell::run::names::event_stream("mesh", workflow);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
            .get_consumer_from_stream(workflow_node::shell::run::names::CONSUMER, stream.as_str())
            .await
            .expect("consumer");
        let info = consumer.info().await.expect("info");
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn runs(client: &async_nats::Client, chains: i64, broken: usize) {
    for i in 0..chains {
        let r = invoke(
            client,
            "mesh",
            "Chain",
            &json!({"value": i}),
            TIMEOUT,
            |_| {},
        )
        .await
        .expect("a result");
        assert_eq!(r.status, "success", "{:?}", r.error);
    }
    for _ in 0..broken {
        let r = invoke(client, "mesh", "Broken", &json!({}), TIMEOUT, |_| {})
            .await
            .expect("a result");
        assert_eq!(r.status, "failure");
    }
    settled(client, "Chain").await;
    settled(client, "Broken").await;
}

#[tokio::test]
async fn serve_prints_its_metrics_address_and_a_scrape_counts_its_runs() {
    let s = setup().await;
    let url = s.server.url();
    let mut serve = spawn_serve(s.dir.path(), &url, &["--metrics-addr", "127.0.0.1:0"], &[]);
    let address = serve.line("metrics at http://").await;
    let addr: SocketAddr = address
        .strip_suffix("/metrics")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("an address: {address}"));
    assert_ne!(addr.port(), 0);
    s.served().await;

    runs(&s.client, 2, 1).await;
    let m = support::metrics::scrape(addr).await;
    let started = |w| m.sum("workflow_runs_started_total", &[("workflow", w)]);
    assert_eq!((started("Chain"), started("Broken")), (2.0, 1.0));
    let ended = |w, status| {
        m.sum(
            "workflow_runs_ended_total",
            &[("workflow", w), ("status", status)],
        )
    };
    assert_eq!(
        (ended("Chain", "success"), ended("Broken", "failure")),
        (2.0, 1.0)
    );
    let calls = |agent, outcome| {
        m.sum(
            "workflow_agent_call_duration_seconds_count",
            &[("agent", agent), ("outcome", outcome)],
        )
    };
    assert_eq!(
        (calls("Doubler", "success"), calls("Fatal", "failure")),
        (4.0, 1.0)
    );
    assert_eq!(
        m.sum(
            "workflow_node_duration_seconds_count",
            &[("workflow", "Chain")]
        ),
        4.0
    );
    assert!(terminate(serve).await.success());
}

#[tokio::test]
async fn serve_exports_over_otlp_http_and_its_sigterm_drain_flushes_the_last_counts() {
    let s = setup().await;
    let otlp = test_harness::otlp::Receiver::start().await;
    let endpoint = format!("http://{}", otlp.addr());
    // An interval far beyond the test: only the drain's flush can export the counts.
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "3600000"),
        ("OTEL_SERVICE_NAME", "metrics-test"),
    ];
    let mut serve = spawn_serve(s.dir.path(), &s.server.url(), &[], &env);
    serve.line("serving ").await;
    s.served().await;
    runs(&s.client, 3, 1).await;
    assert!(otlp.metrics().is_empty(), "nothing before the drain");

    assert!(terminate(serve).await.success());
    let received = otlp.metrics();
    assert_eq!(
        support::metrics::last_sum(&received, "workflow.runs.started", "Chain"),
        Some((3, "metrics-test".to_string()))
    );
    assert_eq!(
        support::metrics::last_sum(&received, "workflow.runs.started", "Broken").map(|s| s.0),
        Some(1)
    );
    let names: std::collections::BTreeSet<&str> = received
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .map(|m| m.name.as_str())
        .collect();
    for name in [
        "workflow.runs.ended",
        "workflow.run.duration",
        "workflow.node.duration",
        "workflow.agent.call.duration",
        "workflow.events.processed",
        "workflow.runs.in_flight",
    ] {
        assert!(names.contains(name), "{name} not exported: {names:?}");
    }
}
