//! Metrics over a real nats-server: nodes serve `/metrics` on an ephemeral loopback port,
//! runs succeed, fail and retry, and a scrape over HTTP counts exactly what happened: runs
//! started and ended by status, the nodes that ran, the agent call attempts, with no run id
//! on any label; with two replicas racing on the same runs, the sum over both scrapes
//! still counts every run, node and attempt once.

use std::net::SocketAddr;
use std::time::Duration;

use agent_sdk::workflow::{invoke, RunResult};
use futures::future::join_all;
use serde_json::json;
use workflow_node::shell::{Config, MetricsConfig, Otlp, WorkflowNode};

use crate::support;
use crate::support::fixtures::{doubler, BROKEN, CHAIN};
use crate::support::mesh::{mesh, settled, workflows};
use crate::support::metrics::{scrape, scrape_until, Scrape};

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = concat!(
    "agents:",
    doubler!(),
    r#"
  - name: Fatal
    fail_first: 100
    error: bad request
    error_kind: invalid
    rules: [{output: {ok: true}}]
  - name: Flaky
    fail_first: 2
    error: upstream unavailable
    error_kind: transient
    rules: [{output: {ok: true}}]
"#,
);

const RETRIED: &str = r#"
name: Retried
workflow:
  description: an agent that fails twice, retried until it answers
  nodes:
    - id: call
      type: agent
      agent_name: Flaky
      retry_strategy: {limit: 3, retry_policy: Always, backoff: {duration: 50ms, factor: 1}}
  output_mapping: {ok: "{{call.output.ok}}"}
"#;

const FANOUT: &str = r#"
name: Fanout
workflow:
  description: ten calls at once, their results landing on either replica
  nodes:
    - id: each
      type: map
      items: "{{workflow.input.items}}"
      node: item
    - {id: item, type: agent, agent_name: Doubler, input: {value: "{{_map_item}}"}}
  output_mapping: {values: "{{each.output}}"}
"#;

/// Metrics served on a free loopback port, the pending counts read often.
fn config() -> Config {
    Config {
        card_wait: Duration::from_millis(500),
        metrics: MetricsConfig {
            addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            otlp: Otlp::Off,
            pending_interval: Duration::from_millis(100),
        },
        ..Config::default()
    }
}

async fn run(client: &async_nats::Client, workflow: &str, input: serde_json::Value) -> RunResult {
    invoke(client, "mesh", workflow, &input, TIMEOUT, |_| {})
        .await
        .expect("a result")
}

#[tokio::test]
async fn a_scrape_counts_the_runs_nodes_and_agent_calls_of_a_few_runs() {
    let m = mesh(STUBS, &[CHAIN, BROKEN, RETRIED], config()).await;
    let addr = m.node.metrics_addr().expect("metrics are served");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");

    let mut ids = Vec::new();
    for i in 0..3 {
        let r = run(&m.client, "Chain", json!({"value": i})).await;
        assert_eq!(r.status, "success", "{:?}", r.error);
        ids.extend(r.execution_id);
    }
    let r = run(&m.client, "Broken", json!({})).await;
    assert_eq!(r.status, "failure");
    ids.extend(r.execution_id);
    let r = run(&m.client, "Retried", json!({})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    ids.extend(r.execution_id);
    assert_eq!(ids.len(), 5, "every run has an id");
    for w in ["Chain", "Broken", "Retried"] {
        settled(&m.client, w).await;
    }

    let s = scrape(addr).await;
    assert!(
        s.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        s.content_type
    );
    assert!(s
        .text
        .contains("# TYPE workflow_runs_started_total counter\n"));
    assert!(s
        .text
        .contains("# TYPE workflow_run_duration_seconds histogram\n"));

    let started = |w: &str| s.sum("workflow_runs_started_total", &[("workflow", w)]);
    assert_eq!(
        (started("Chain"), started("Broken"), started("Retried")),
        (3.0, 1.0, 1.0)
    );
    let ended = |w: &str, status: &str| {
        s.sum(
            "workflow_runs_ended_total",
            &[("workflow", w), ("status", status)],
        )
    };
    assert_eq!(ended("Chain", "success"), 3.0);
    assert_eq!(ended("Broken", "failure"), 1.0);
    assert_eq!(ended("Retried", "success"), 1.0);
    assert_eq!(
        s.sum("workflow_runs_ended_total", &[]),
        5.0,
        "no other ends"
    );
    assert_eq!(s.sum("workflow_runs_in_flight", &[]), 0.0);
    let durations = |w: &str, status: &str| {
        let labels = [("workflow", w), ("status", status), ("le", "+Inf")];
        let count = s.sum(
            "workflow_run_duration_seconds_count",
            &[("workflow", w), ("status", status)],
        );
        assert_eq!(
            count,
            s.sum("workflow_run_duration_seconds_bucket", &labels)
        );
        count
    };
    assert_eq!(durations("Chain", "success"), 3.0);
    assert_eq!(durations("Broken", "failure"), 1.0);

    let nodes = |w: &str, status: &str| {
        s.sum(
            "workflow_node_duration_seconds_count",
            &[("workflow", w), ("node_type", "agent"), ("status", status)],
        )
    };
    assert_eq!(nodes("Chain", "success"), 6.0, "two nodes a run");
    assert_eq!(nodes("Broken", "failure"), 1.0);
    assert_eq!(nodes("Retried", "success"), 1.0);

    let calls = |agent: &str, outcome: &str| {
        s.sum(
            "workflow_agent_call_duration_seconds_count",
            &[("agent", agent), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("Doubler", "success"), 6.0);
    assert_eq!(
        calls("Fatal", "failure"),
        1.0,
        "not retried: no retry policy"
    );
    assert_eq!(calls("Flaky", "failure"), 2.0);
    assert_eq!(calls("Flaky", "success"), 1.0);
    let retries = |agent: &str| s.sum("workflow_agent_call_retries_total", &[("agent", agent)]);
    assert_eq!((retries("Flaky"), retries("Fatal")), (2.0, 0.0));
    assert!(s.has(
        "workflow_agent_call_retries_total",
        &[("workflow", "Retried"), ("outcome", "failure")]
    ));

    // Each run's start and its two results at least (agents may send status updates too).
    let events = s.sum(
        "workflow_events_processed_total",
        &[("workflow", "Chain"), ("outcome", "ok")],
    );
    assert!(events >= 9.0, "{events} events processed");
    assert_eq!(
        s.sum("workflow_cas_conflicts_total", &[]),
        0.0,
        "one replica"
    );

    for id in &ids {
        assert!(!s.text.contains(id.as_str()), "run id {id} is on a label");
    }

    // The pending counts come from a periodic read of each workflow's consumer: once
    // every event is acked, a read shows none pending and none unacked.
    scrape_until(addr, |s| {
        ["Chain", "Broken", "Retried"].iter().all(|w| {
            let wf = [("workflow", *w)];
            s.has("workflow_events_pending", &wf)
                && s.sum("workflow_events_pending", &wf) == 0.0
                && s.sum("workflow_events_unacked", &wf) == 0.0
        })
    })
    .await;
}

#[tokio::test]
async fn an_unknown_path_is_not_found_and_a_node_without_an_address_serves_nothing() {
    let m = mesh(STUBS, &[CHAIN], config()).await;
    let addr = m.node.metrics_addr().expect("metrics are served");
    let status = test_harness::http::get(addr, "/").await.status;
    assert_eq!(status, 404);

    let plain = Config {
        metrics: MetricsConfig {
            otlp: Otlp::Off,
            ..MetricsConfig::default()
        },
        ..Config::default()
    };
    let other = WorkflowNode::start(m.client.clone(), workflows(&[BROKEN]), plain)
        .await
        .expect("node");
    assert_eq!(other.metrics_addr(), None);
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_on_the_same_runs_count_each_run_node_and_call_once() {
    const RUNS: usize = 6;
    const ITEMS: usize = 10;
    let m = mesh(STUBS, &[FANOUT], config()).await;
    let replica = WorkflowNode::start(m.client.clone(), workflows(&[FANOUT]), config())
        .await
        .expect("a second replica");
    let addrs = [
        m.node.metrics_addr().expect("served"),
        replica.metrics_addr().expect("served"),
    ];
    assert_ne!(addrs[0], addrs[1]);

    let items: Vec<usize> = (0..ITEMS).collect();
    let results =
        join_all((0..RUNS).map(|_| run(&m.client, "Fanout", json!({"items": items})))).await;
    for r in &results {
        assert_eq!(r.status, "success", "{:?}", r.error);
    }
    settled(&m.client, "Fanout").await;

    let scrapes: Vec<Scrape> = join_all(addrs.map(scrape)).await;
    let total = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrapes.iter().map(|s| s.sum(name, labels)).sum()
    };
    let wf = ("workflow", "Fanout");
    assert_eq!(total("workflow_runs_started_total", &[wf]), RUNS as f64);
    assert_eq!(
        total("workflow_runs_ended_total", &[wf, ("status", "success")]),
        RUNS as f64
    );
    assert_eq!(total("workflow_runs_in_flight", &[wf]), 0.0);
    assert_eq!(
        total(
            "workflow_node_duration_seconds_count",
            &[wf, ("node_type", "map"), ("status", "success")]
        ),
        RUNS as f64,
        "one map a run"
    );
    assert_eq!(
        total(
            "workflow_agent_call_duration_seconds_count",
            &[wf, ("agent", "Doubler"), ("outcome", "success")]
        ),
        (RUNS * ITEMS) as f64,
        "every item's call once"
    );
    eprintln!(
        "compare-and-swap conflicts: {}, events per replica: {:?}",
        total("workflow_cas_conflicts_total", &[wf]),
        scrapes
            .iter()
            .map(|s| s.sum("workflow_events_processed_total", &[wf]))
            .collect::<Vec<_>>()
    );
    replica.shutdown().await;
}

#[tokio::test]
async fn an_event_delivered_again_is_counted_as_a_redelivery_and_its_run_once() {
    use async_nats::jetstream::consumer::PullConsumer;
    use async_nats::jetstream::AckKind;
    use futures::StreamExt;
    use workflow_node::core::{Event, ExecutionId};
    use workflow_node::shell::{run::names, Caller, Envelope};

    // The consumer is made with a short ack wait by a first node, which then stops.
    let short = Config {
        ack_wait: Duration::from_secs(1),
        ..config()
    };
    let m = mesh(STUBS, &[CHAIN], short.clone()).await;
    let client = m.client.clone();
    m.node.shutdown().await;

    // A start, taken by the test and not acked: the stream delivers it again.
    let execution = ExecutionId("0123456789abcdef0123456789abcdef".into());
    let envelope = Envelope {
        event: Event::Started {
            input: json!({"value": 2}),
        },
        caller: Some(Caller::default()),
        attach: false,
        definition: None,
        wake: None,
    };
    let js = async_nats::jetstream::new(client.clone());
    let subject = messages::subjects::run_events("mesh", "Chain", &execution.0);
    let payload = serde_json::to_vec(&envelope).expect("json");
    // Sealed as a replica seals its events (with the deployment's secret): others are refused.
    let secret = js
        .get_key_value(names::secrets_bucket("mesh"))
        .await
        .expect("secrets bucket")
        .get("calls")
        .await
        .expect("read")
        .expect("the secret");
    let seal = workflow_node::shell::mesh::seal::Seal::new(&secret);
    let mut h = async_nats::HeaderMap::new();
    h.insert(messages::headers::MSG_ID, "held-start");
    let mac = seal.event_mac(&subject, "held-start", &payload);
    h.insert(workflow_node::shell::mesh::seal::EVENT_MAC, mac.as_str());
    js.publish_with_headers(subject, h, payload.into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let consumer: PullConsumer = js
        .get_consumer_from_stream(names::CONSUMER, names::event_stream("mesh", "Chain"))
        .await
        .expect("consumer");
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .expect("fetch");
    let held = batch.next().await.expect("an event").expect("a message");
    assert_eq!(held.info().expect("info").delivered, 1);

    let node = WorkflowNode::start(client.clone(), workflows(&[CHAIN]), short)
        .await
        .expect("node");
    let addr = node.metrics_addr().expect("served");

    // Held (its lease renewed), it shows as delivered and not acked ...
    let held = std::sync::Arc::new(held);
    let renew = {
        let held = held.clone();
        tokio::spawn(async move {
            loop {
                let _ = held.ack_with(AckKind::Progress).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    scrape_until(addr, |s| {
        s.sum("workflow_events_unacked", &[("workflow", "Chain")]) == 1.0
    })
    .await;
    renew.abort();
    // ... until it is given back, and the node has it delivered again.
    held.ack_with(AckKind::Nak(None)).await.expect("nak");
    let s = scrape_until(addr, |s| {
        s.sum("workflow_runs_ended_total", &[("workflow", "Chain")]) == 1.0
    })
    .await;
    assert_eq!(
        s.sum(
            "workflow_events_redelivered_total",
            &[("workflow", "Chain")]
        ),
        1.0
    );
    assert_eq!(
        s.sum("workflow_runs_started_total", &[("workflow", "Chain")]),
        1.0
    );
    assert_eq!(
        s.sum(
            "workflow_runs_ended_total",
            &[("workflow", "Chain"), ("status", "success")]
        ),
        1.0
    );
    node.shutdown().await;
}

#[tokio::test]
async fn a_node_pushes_its_metrics_to_a_configured_otlp_endpoint_when_it_shuts_down() {
    let otlp = test_harness::otlp::Receiver::start().await;
    let config = Config {
        metrics: MetricsConfig {
            addr: None,
            otlp: Otlp::Http(format!("http://{}/v1/metrics", otlp.addr())),
            ..MetricsConfig::default()
        },
        ..config()
    };
    let m = mesh(STUBS, &[CHAIN], config).await;
    assert_eq!(m.node.metrics_addr(), None, "no address asked for");
    for i in 0..2 {
        let r = run(&m.client, "Chain", json!({"value": i})).await;
        assert_eq!(r.status, "success", "{:?}", r.error);
    }
    settled(&m.client, "Chain").await;
    // The export interval (60 s unless OTEL_METRIC_EXPORT_INTERVAL says otherwise) has
    // not passed: the counts arrive with the shutdown's flush.
    m.node.shutdown().await;
    let received = otlp.metrics();
    assert_eq!(
        support::metrics::last_sum(&received, "workflow.runs.started", "Chain").map(|s| s.0),
        Some(2)
    );
    assert_eq!(
        support::metrics::last_sum(&received, "workflow.runs.ended", "Chain").map(|s| s.0),
        Some(2)
    );
}
