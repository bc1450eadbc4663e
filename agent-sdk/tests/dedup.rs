//! Agents against a real nats-server run a task id once: copies of a request (same task
//! id), sent while the call runs or after it finished, share its answer.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use anyhow::Result;
use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use common::*;
use messages::payload::wrap;
use messages::subjects;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// `Counter`: answers `{"run": n}`, n counting its calls; held at `gate` unless the input
/// says `{"probe": true}`.
fn counter(calls: Arc<AtomicUsize>, gate: Arc<Semaphore>) -> AgentBuilder {
    AgentBuilder::new("Counter").handler(handler_fn(move |req: NodeRequest| {
        let (calls, gate) = (calls.clone(), gate.clone());
        async move {
            let run = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if req.input["probe"] != json!(true) {
                let _ = gate.acquire().await;
            }
            Ok(json!({"run": run}))
        }
    }))
}

/// Publishes a workflow-style call of `task` (attempt 1 of node `count` in run `exec`) with
/// reply subject `reply`.
async fn send(client: &Client, exec: &str, input: Value, reply: &str) -> Result<()> {
    let body: Bytes = workflow_body(&node_request(exec, "count", 1), None, wrap(input));
    client
        .publish_with_reply_and_headers(
            subjects::agent_request("mesh", "Counter"),
            reply.to_owned(),
            HeaderMap::new(),
            body,
        )
        .await?;
    Ok(())
}

/// The `output` of the next reply on `sub`.
async fn output(sub: &mut async_nats::Subscriber) -> Result<Value> {
    let msg = next(sub).await?;
    let response: messages::Response = serde_json::from_slice(&msg.payload)?;
    Ok(node_result(&task(response)?)?.output.unwrap_or_default())
}

#[tokio::test]
async fn copies_of_a_request_share_one_run_of_the_handler() -> Result<()> {
    let (_server, client) = setup().await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let _agent = counter(calls.clone(), gate.clone())
        .serve(client.clone())
        .await?;
    let inboxes: Vec<String> = (0..4).map(|_| client.new_inbox()).collect();
    let mut subs = Vec::new();
    for inbox in &inboxes {
        subs.push(client.subscribe(inbox.clone()).await?);
    }

    // Three copies while the first runs: one with its reply address (dropped), one with
    // another (answered too).
    send(&client, "e1", json!({}), &inboxes[0]).await?;
    send(&client, "e1", json!({}), &inboxes[0]).await?;
    send(&client, "e1", json!({}), &inboxes[1]).await?;
    // The agent reads requests in order: once this probe is answered, it has seen them all.
    send(&client, "probe", json!({"probe": true}), &inboxes[3]).await?;
    assert_eq!(output(&mut subs[3]).await?, json!({"run": 2}));

    gate.add_permits(100);
    assert_eq!(output(&mut subs[0]).await?, json!({"run": 1}));
    assert_eq!(output(&mut subs[1]).await?, json!({"run": 1}));

    // A copy after the call ended gets the same answer again.
    send(&client, "e1", json!({}), &inboxes[2]).await?;
    assert_eq!(output(&mut subs[2]).await?, json!({"run": 1}));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the handler ran once for e1"
    );

    // The dropped copy got no answer of its own: the next message on its inbox is this
    // probe's.
    send(&client, "probe2", json!({"probe": true}), &inboxes[0]).await?;
    assert_eq!(output(&mut subs[0]).await?, json!({"run": 3}));
    Ok(())
}

#[tokio::test]
async fn an_agent_without_memory_runs_a_finished_task_again() -> Result<()> {
    let (_server, client) = setup().await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(100));
    let _agent = counter(calls.clone(), gate)
        .dedup(0, std::time::Duration::from_secs(60))
        .serve(client.clone())
        .await?;
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await?;
    send(&client, "e1", json!({}), &inbox).await?;
    assert_eq!(output(&mut sub).await?, json!({"run": 1}));
    send(&client, "e1", json!({}), &inbox).await?;
    assert_eq!(output(&mut sub).await?, json!({"run": 2}));
    Ok(())
}
