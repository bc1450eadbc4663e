//! Crash test with real processes: the only replica is killed (`kill -9`) while a run's
//! call is in flight to an agent that never answers in time, and another replica starts.
//! The call's timeout, kept as the run's wake (one timer entry per run), must still fire
//! and fail the run.

use std::time::Duration;

use agent_sdk::workflow::invoke;
use futures::StreamExt;
use messages::subjects;
use serde_json::json;

use crate::support;
use crate::support::crash::replicas::{write_file, Logs, Spawner};

const STUBS: &str = r#"
agents:
  - name: Silent
    delay: 1h
    rules: [{output: {late: true}}]
"#;

const WORKFLOW: &str = r#"
name: Timed
workflow:
  description: one call that never answers in time
  nodes:
    - {id: wait, type: agent, agent_name: Silent, input: {}, timeout: 2s}
  output_mapping: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_still_times_out_after_its_replica_is_killed() {
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let stub_file = agent_sdk::stub::load_stub_file(write_file(dir.path(), "stubs.yaml", STUBS))
        .expect("stub file");
    let _stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", stub_file)
        .await
        .expect("stubs");
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "timed.yaml", WORKFLOW),
        ack_wait: 1.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let mut first = spawner.spawn(1, &server.url());
    first.wait_ready(Duration::from_secs(30)).await;

    // The agent's requests, seen by the test too: the call is in flight once one comes.
    let mut calls = client
        .subscribe(subjects::agent_request("mesh", "Silent"))
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");
    let caller = client.clone();
    let run = tokio::spawn(async move {
        invoke(
            &caller,
            "mesh",
            "Timed",
            &json!({}),
            Duration::from_secs(60),
            |_| {},
        )
        .await
    });
    let call = tokio::time::timeout(Duration::from_secs(30), calls.next()).await;
    assert!(
        matches!(call, Ok(Some(_))),
        "the call never went out; logs:\n{}",
        logs.tail()
    );
    first.kill();

    let mut second = spawner.spawn(2, &server.url());
    second.wait_ready(Duration::from_secs(30)).await;
    let result = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run ended within a minute")
        .expect("the caller's task")
        .expect("a result");
    assert_eq!(result.status, "failure", "logs:\n{}", logs.tail());
    let error = result.error.unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
}
