//! The node keeps processing through what would otherwise stop it quietly: its consumer
//! or event stream deleted under it, and events queued behind a slow one longer than the
//! ack wait. Real nats-server per test.

use std::time::Duration;

use serde_json::{json, Value};

use agent_sdk::workflow::{invoke, RunResult};
use workflow_node::shell::{run::names, Config};

use crate::support;
use crate::support::mesh::{settled, Mesh};

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = support::fixtures::ECHO_STUBS;

const ECHO: &str = r#"
name: EchoOnce
workflow:
  description: one agent
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
  output_mapping: {n: "{{echo.output.n}}"}
"#;

const MIXED: &str = r#"
name: Mixed
workflow:
  description: echo, or call an agent that has no card (its dispatch waits for one)
  nodes:
    - {id: pick, type: conditional, condition: "{{workflow.input.ghost}} == true", true_branch: ghost, false_branch: echo}
    - {id: ghost, type: agent, agent_name: NobodyHome, depends_on: [pick]}
    - {id: echo, type: agent, agent_name: Echo, depends_on: [pick], input: {n: "{{workflow.input.n}}"}}
  output_mapping: {n: "{{echo.output.n}}"}
"#;

async fn mesh(workflows: &[&str], config: Config) -> Mesh {
    support::mesh::mesh(STUBS, workflows, config).await
}

async fn run(m: &Mesh, workflow: &str, input: Value) -> RunResult {
    invoke(&m.client, "mesh", workflow, &input, TIMEOUT, |_| {})
        .await
        .expect("a result")
}

#[tokio::test]
async fn runs_go_on_after_the_consumer_and_then_the_stream_are_deleted() {
    let m = mesh(&[ECHO], Config::default()).await;
    assert_eq!(run(&m, "EchoOnce", json!({"n": 1})).await.status, "success");
    let js = async_nats::jetstream::new(m.client.clone());
    let stream = names::event_stream("mesh", "EchoOnce");

    js.delete_consumer_from_stream(names::CONSUMER, &stream)
        .await
        .expect("delete the consumer");
    let r = run(&m, "EchoOnce", json!({"n": 2})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"n": 2})));

    js.delete_stream(&stream).await.expect("delete the stream");
    let r = run(&m, "EchoOnce", json!({"n": 3})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"n": 3})));
    assert!(m.node.health().broken().is_empty(), "pulling again");
}

#[tokio::test]
async fn events_queued_behind_a_slow_one_are_not_redelivered() {
    // One worker, so every event waits behind the one in hand; the ghost's dispatch holds
    // the worker for three ack waits while it waits for a card that never comes.
    let config = Config {
        workers: 1,
        ack_wait: Duration::from_millis(500),
        card_wait: Duration::from_millis(1500),
        ..Config::default()
    };
    let m = mesh(&[MIXED], config).await;
    let ghost = run(&m, "Mixed", json!({"ghost": true, "n": -1}));
    let echoes = (0..20).map(|n| run(&m, "Mixed", json!({"ghost": false, "n": n})));
    let echoes = futures::future::join_all(echoes);
    let (ghost, echoes) = tokio::join!(ghost, echoes);
    assert_eq!(ghost.status, "failure");
    assert!(ghost.error.unwrap_or_default().contains("no card"));
    for (n, r) in echoes.iter().enumerate() {
        assert_eq!(r.output, Some(json!({"n": n})), "run {n}: {:?}", r.error);
    }
    let js = async_nats::jetstream::new(m.client.clone());
    for workflow in ["Mixed"] {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
            .get_consumer_from_stream(names::CONSUMER, names::event_stream("mesh", workflow))
            .await
            .expect("consumer");
        let delivered = consumer.info().await.expect("consumer info").delivered;
        let mut stream = js
            .get_stream(names::event_stream("mesh", workflow))
            .await
            .expect("stream");
        let stored = stream
            .info()
            .await
            .expect("stream info")
            .state
            .last_sequence;
        // Every delivery takes a consumer sequence: more deliveries than events stored
        // means some were delivered again.
        assert_eq!(
            delivered.consumer_sequence, stored,
            "{workflow}: events were redelivered while they waited in the replica's queue"
        );
    }
}

/// A fork of `n` agent nodes, each sent an input of about 1 kB.
fn wide(n: usize) -> String {
    let mut yaml = String::from(
        "name: Wide\nworkflow:\n  description: one node, then many at once\n  nodes:\n    - {id: first, type: agent, agent_name: Echo, input: {n: 0}}\n",
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "    - {{id: n{i}, type: agent, agent_name: Echo, depends_on: [first], input: {{pad: \"{}\"}}}}\n",
            "x".repeat(1000)
        ));
    }
    yaml.push_str("  output_mapping: {n: \"{{first.output.n}}\"}\n");
    yaml
}

#[tokio::test]
async fn an_event_that_cannot_be_stored_fails_its_run_with_the_cause_instead_of_looping() {
    let config = Config {
        max_state_bytes: Some(16 * 1024),
        ..Config::default()
    };
    let m = mesh(&[&wide(30)], config).await;
    // The first node's result starts 30 calls at once: the commit that records them is
    // larger than the node may store, every time it is tried.
    let r = run(&m, "Wide", json!({})).await;
    assert_eq!(r.status, "failure");
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("bytes, over the limit of 16384 bytes"),
        "{error}"
    );
    assert!(error.contains("could not be processed"), "{error}");
    // The event is done with, not tried again and again.
    settled(&m.client, "Wide").await;
}
