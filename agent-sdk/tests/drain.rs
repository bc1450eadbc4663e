//! Stopping an agent against a real nats-server: it answers every request it took (those
//! still in its subscription's buffer as well as those running), and its answers are at
//! the server when `stop` returns, so a process that exits right after loses none.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_sdk::{handler_fn, AgentBuilder};
use anyhow::{Context, Result};
use async_nats::Client;
use common::*;
use futures::StreamExt;
use messages::{subjects, Response};
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};

/// Returns once the server has taken everything `client` sent before (a message to itself
/// comes back after them).
async fn roundtrip(client: &Client) -> Result<()> {
    let inbox = client.new_inbox();
    let mut echo = client.subscribe(inbox.clone()).await?;
    client.publish(inbox, bytes::Bytes::new()).await?;
    next(&mut echo).await?;
    Ok(())
}

/// Publishes call `i` to `agent`, its reply to `{replies}.{i}`.
async fn send(client: &Client, agent: &str, replies: &str, i: usize) -> Result<()> {
    let req = node_request(&format!("run{i}"), "n", 1);
    let body = workflow_body(&req, None, messages::payload::wrap(json!({"i": i})));
    client
        .publish_with_reply(
            subjects::agent_request("mesh", agent),
            format!("{replies}.{i}"),
            body,
        )
        .await?;
    Ok(())
}

/// The call number a reply answers (its subject's last token), checked to be a success.
fn answered(msg: &async_nats::Message) -> Result<usize> {
    let response: Response = serde_json::from_slice(&msg.payload)?;
    let result = node_result(&task(response)?)?;
    anyhow::ensure!(
        result.status == messages::ResultStatus::Success,
        "a failed call: {result:?}"
    );
    let i = msg.subject.rsplit('.').next().context("a reply subject")?;
    Ok(i.parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_delivered_before_a_stop_are_all_answered() -> Result<()> {
    const CALLS: usize = 400;
    let (server, caller) = setup().await?;
    let agent_client = async_nats::connect(server.url()).await?;
    let agent = AgentBuilder::new("Drained")
        .max_in_flight(CALLS)
        .handler(handler_fn(|req| async move { Ok::<Value, _>(req.input) }))
        .serve(agent_client.clone())
        .await?;
    let replies = caller.new_inbox();
    let mut answers = caller.subscribe(format!("{replies}.*")).await?;
    for i in 0..CALLS {
        send(&caller, "Drained", &replies, i).await?;
    }
    // Every request is on its way to the agent (the only subscriber) before it stops:
    // whatever it has not read yet is still its to answer.
    roundtrip(&caller).await?;
    agent.stop().await;
    drop(agent_client);
    let mut seen = BTreeSet::new();
    while seen.len() < CALLS {
        let msg = tokio::time::timeout(WAIT, answers.next())
            .await
            .with_context(|| format!("{} of {CALLS} calls answered", seen.len()))?
            .context("the reply subscription ended")?;
        seen.insert(answered(&msg)?);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_ends_during_the_stop_is_answered_before_stop_returns() -> Result<()> {
    let (server, caller) = setup().await?;
    let agent_client = async_nats::connect(server.url()).await?;
    let running = Arc::new(Notify::new());
    let gate = Arc::new(Semaphore::new(0));
    let agent = AgentBuilder::new("Stopping")
        .handler(handler_fn({
            let (running, gate) = (running.clone(), gate.clone());
            move |req| {
                let (running, gate) = (running.clone(), gate.clone());
                async move {
                    running.notify_one();
                    let _ = gate.acquire().await;
                    Ok::<Value, _>(req.input)
                }
            }
        }))
        .serve(agent_client.clone())
        .await?;
    let replies = caller.new_inbox();
    let mut answers = caller.subscribe(format!("{replies}.*")).await?;
    send(&caller, "Stopping", &replies, 7).await?;
    tokio::time::timeout(WAIT, running.notified())
        .await
        .context("the handler never ran")?;
    let stopping = tokio::spawn(agent.stop());
    gate.add_permits(1);
    stopping.await?;
    // What a process does next: its connection goes, with whatever it had not sent.
    drop(agent_client);
    let msg = next(&mut answers)
        .await
        .context("the running call's reply")?;
    assert_eq!(answered(&msg)?, 7);
    Ok(())
}
