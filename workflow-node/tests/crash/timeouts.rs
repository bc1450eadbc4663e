//! Crash test with real processes: the only replica is killed (`kill -9`) while a run's
//! call is in flight to an agent that never answers in time, and another replica starts.
//! The call's timeout, kept as the run's wake (one timer entry per run), must still fire
//! and fail the run.

use std::time::Duration;

use futures::StreamExt;
use messages::subjects;

use crate::support::crash::rig::Rig;

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
    let rig = Rig::start(STUBS, "timed.yaml", WORKFLOW).await;
    let mut first = rig.spawner.spawn(1, &rig.url());
    first.wait_ready(Duration::from_secs(30)).await;

    // The agent's requests, seen by the test too: the call is in flight once one comes.
    let mut calls = rig
        .client
        .subscribe(subjects::agent_request("mesh", "Silent"))
        .await
        .expect("subscribe");
    rig.client.flush().await.expect("flush");
    let run = rig.invoke("Timed", Duration::from_secs(60));
    let call = tokio::time::timeout(Duration::from_secs(30), calls.next()).await;
    assert!(
        matches!(call, Ok(Some(_))),
        "the call never went out; logs:\n{}",
        rig.logs.tail()
    );
    first.kill();

    let mut second = rig.spawner.spawn(2, &rig.url());
    second.wait_ready(Duration::from_secs(30)).await;
    let result = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run ended within a minute")
        .expect("the caller's task")
        .expect("a result");
    assert_eq!(result.status, "failure", "logs:\n{}", rig.logs.tail());
    let error = result.error.unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
}
