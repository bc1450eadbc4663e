//! Calls lost without a trace, in a workflow with no `timeout`: the agents' process dies
//! after it took the request, or its reply is lost with its connection to the server (as
//! when that server restarts). Nothing comes back, and nothing would for the node's 300 s
//! default timeout; the node's liveness check must send the same attempt again after its
//! window of silence (`serve --call-check 1`), and the run must end right, its history
//! showing the check.
//!
//! The agents sit behind a fault proxy (`test_harness::proxy`): refusing their connection
//! is their process dying, as the server sees it (a reset, no reconnection); swallowing
//! what they send loses their reply.

use std::time::Duration;

use agent_sdk::workflow::{invoke_as, RunResult};
use futures::StreamExt;
use messages::subjects;
use serde_json::json;
use test_harness::proxy::{Fault, Proxy};
use workflow_node::shell::run::names;

use crate::support;
use crate::support::crash::replicas::{write_file, Logs, Spawner};

const WORKFLOW: &str = r#"
name: Lost
workflow:
  description: one call, no timeout
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
  output_mapping: {n: "{{echo.output.n}}"}
"#;

/// An Echo that never answers in a test's time: its process dies first.
const DOOMED: &str = r#"
agents:
  - name: Echo
    delay: 1h
    rules: [{output: {n: "{{input.n}}"}}]
"#;

/// An Echo that answers at once.
const PROMPT: &str = r#"
agents:
  - name: Echo
    rules: [{output: {n: "{{input.n}}"}}]
"#;

/// Serves the stub agents of `yaml` on a connection of their own to `url`.
async fn agents(
    url: &str,
    dir: &std::path::Path,
    name: &str,
    yaml: &str,
) -> (async_nats::Client, Vec<agent_sdk::AgentHandle>) {
    let client = async_nats::connect(url).await.expect("agents connect");
    let file = agent_sdk::stub::load_stub_file(write_file(dir, name, yaml)).expect("stub file");
    let handles = agent_sdk::stub::serve_stubs(client.clone(), "mesh", file)
        .await
        .expect("stubs");
    client.flush().await.expect("flush");
    (client, handles)
}

/// Starts a run of `Lost` as task `task`, bounded by a minute.
fn start(client: &async_nats::Client, task: &str) -> tokio::task::JoinHandle<RunResult> {
    let (client, task) = (client.clone(), task.to_string());
    tokio::spawn(async move {
        invoke_as(
            &client,
            "mesh",
            "Lost",
            &json!({"n": 7}),
            Duration::from_secs(60),
            task.as_str(),
            |_| {},
        )
        .await
        .expect("a final reply")
    })
}

/// Asserts the run ended right and its history shows a liveness check.
async fn assert_recovered(
    client: &async_nats::Client,
    task: &str,
    run: tokio::task::JoinHandle<RunResult>,
    logs: &Logs,
) {
    let result = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .unwrap_or_else(|_| panic!("no final reply in 90 s; logs:\n{}", logs.tail()))
        .expect("the caller's task");
    assert_eq!(
        result.status,
        "success",
        "{result:?}\nlogs:\n{}",
        logs.tail()
    );
    assert_eq!(result.output, Some(json!({"n": 7})));
    let inspector = workflow_node::shell::Inspector::open(client.clone(), "mesh")
        .await
        .expect("inspector");
    let execution = names::execution_id("Lost", task);
    let history = inspector
        .history("Lost", &execution)
        .await
        .expect("history");
    let checked = history
        .iter()
        .any(|e| e.detail.as_deref().is_some_and(|d| d.contains("check-")));
    assert!(checked, "no liveness check in the history: {history:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_agents_died_before_answering_is_sent_again_without_a_timeout() {
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let proxy = Proxy::for_url(&server.url()).await.expect("proxy");
    let doomed = agents(&proxy.url(), dir.path(), "doomed.yaml", DOOMED).await;
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "lost.yaml", WORKFLOW),
        ack_wait: 1.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let mut replica = spawner.spawn_with(1, &server.url(), &["--call-check", "1"]);
    replica.wait_ready(Duration::from_secs(30)).await;

    let mut calls = client
        .subscribe(subjects::agent_request("mesh", "Echo"))
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");
    let task = "lost-agents-1";
    let run = start(&client, task);
    let call = tokio::time::timeout(Duration::from_secs(30), calls.next()).await;
    assert!(matches!(call, Ok(Some(_))), "the call never went out");
    // The doomed agents took it (the only ones serving Echo); now their process dies:
    // its connection reset, never back, its in-memory call gone with it.
    proxy.set(Fault::Refuse);
    drop(doomed);
    // Agents started again, on a connection of their own.
    let _prompt = agents(&server.url(), dir.path(), "prompt.yaml", PROMPT).await;
    assert_recovered(&client, task, run, &logs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_with_the_agents_connection_is_asked_for_again() {
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let proxy = Proxy::for_url(&server.url()).await.expect("proxy");
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "lost.yaml", WORKFLOW),
        ack_wait: 1.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let mut replica = spawner.spawn_with(1, &server.url(), &["--call-check", "1"]);
    replica.wait_ready(Duration::from_secs(30)).await;
    let _agents = agents(&proxy.url(), dir.path(), "prompt.yaml", PROMPT).await;
    // A run through first: the replica has heard the agents' card before the black hole
    // (a card published while the replica was still subscribing would be lost in it, and
    // the call would never go out).
    let warm = start(&client, "lost-reply-warm-up")
        .await
        .expect("the warm-up");
    assert_eq!(warm.status, "success", "{warm:?}\nlogs:\n{}", logs.tail());

    let mut calls = client
        .subscribe(subjects::agent_request("mesh", "Echo"))
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");
    // What the agents send is lost from now on: the request reaches them, their reply
    // does not reach the server.
    proxy.set_up(Fault::BlackHole);
    let task = "lost-reply-1";
    let run = start(&client, task);
    let call = tokio::time::timeout(Duration::from_secs(30), calls.next()).await;
    assert!(
        matches!(call, Ok(Some(_))),
        "the call never went out; logs:\n{}",
        logs.tail()
    );
    // The agents answered into the black hole.
    let reply_subject = subjects::agent_response("mesh", "Lost", "");
    proxy.until_swallowed(reply_subject.as_bytes()).await;
    // Their server "restarts": the connection is reset, and the client connects again.
    proxy.set(Fault::Pass);
    proxy.cut();
    assert_recovered(&client, task, run, &logs).await;
}
