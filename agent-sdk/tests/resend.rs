//! A Mesh's call against a real nats-server resends a request that meets silence, with the
//! same task id, and takes the first final reply.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, CallOptions, Mesh};
use anyhow::{Context, Result};
use common::*;
use messages::{subjects, AgentReply, Method, Request, Response, Task, TaskState, TaskStatus};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// A stand-in callee on `agent`'s request subject: drops the first request, answers the
/// second twice (`{"copy": 1}`, then `{"copy": 2}`); returns the task ids it saw.
async fn flaky_callee(
    client: &async_nats::Client,
    agent: &str,
) -> Result<tokio::task::JoinHandle<Result<Vec<String>>>> {
    let mut requests = client
        .subscribe(subjects::agent_request("mesh", agent))
        .await?;
    client.flush().await?;
    let client = client.clone();
    Ok(tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let msg = next(&mut requests).await?;
            let request =
                Request::from_slice(&msg.payload).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            let Method::MessageSend(params) = request.method else {
                anyhow::bail!("not a message/send");
            };
            let task_id = params.message.task_id.clone().context("no task id")?;
            seen.push(task_id.clone());
            if seen.len() == 1 {
                continue;
            }
            let reply = msg.reply.clone().context("no reply subject")?;
            for copy in [1, 2] {
                let mut status = TaskStatus::new(TaskState::Completed);
                let parts = vec![messages::payload::wrap(json!({"copy": copy}))];
                status.message = Some(messages::Message::new(
                    format!("r{copy}"),
                    messages::Role::Agent,
                    parts,
                ));
                let task = Task {
                    id: task_id.clone(),
                    context_id: task_id.clone(),
                    status,
                    artifacts: None,
                    metadata: None,
                };
                let response = Response::result(request.id.clone(), AgentReply::Task(task));
                client
                    .publish(reply.clone(), serde_json::to_vec(&response)?.into())
                    .await?;
            }
        }
        Ok(seen)
    }))
}

#[tokio::test]
async fn a_request_met_by_silence_is_resent_with_the_same_task_id() -> Result<()> {
    let (_server, client) = setup().await?;
    let callee = flaky_callee(&client, "Flaky").await?;
    let mut options = CallOptions::new(WAIT);
    options.resend_interval = Duration::from_millis(200);
    let out = Mesh::new(client.clone())
        .defaults(options)
        .agent("Flaky")
        .call(json!({"x": 1}))
        .await?;
    assert_eq!(out, json!({"copy": 1}), "the first final reply wins");
    let seen = callee.await??;
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1], "the resend carries the same task id");
    Ok(())
}

#[tokio::test]
async fn copies_resent_to_a_busy_agent_get_signs_of_life_and_one_answer() -> Result<()> {
    let (_server, client) = setup().await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let _agent = AgentBuilder::new("Busy")
        .handler(handler_fn({
            let (calls, gate) = (calls.clone(), gate.clone());
            move |_| {
                let (calls, gate) = (calls.clone(), gate.clone());
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let _ = gate.acquire().await;
                    Ok(Value::from(7))
                }
            }
        }))
        .serve(client.clone())
        .await?;
    // The handler answers once the request has gone out three times.
    let mut requests = client
        .subscribe(subjects::agent_request("mesh", "Busy"))
        .await?;
    client.flush().await?;
    let release = tokio::spawn(async move {
        for _ in 0..3 {
            next(&mut requests).await?;
        }
        gate.add_permits(1);
        anyhow::Ok(())
    });
    let mut options = CallOptions::new(WAIT);
    options.resend_interval = Duration::from_millis(50);
    let out = Mesh::new(client.clone())
        .defaults(options)
        .agent("Busy")
        .call(json!({}))
        .await?;
    release.await??;
    assert_eq!(out, json!(7));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the copies did not run again"
    );
    Ok(())
}

#[tokio::test]
async fn a_call_whose_server_goes_away_ends_with_a_lost_connection_within_its_timeout() -> Result<()>
{
    let (mut server, client) = setup().await?;
    let mut requests = client
        .subscribe(subjects::agent_request("mesh", "Silent"))
        .await?;
    client.flush().await?;
    let mut options = CallOptions::new(Duration::from_secs(2));
    options.resend_interval = Duration::from_millis(200);
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            Mesh::new(client.clone())
                .defaults(options)
                .agent("Silent")
                .call(json!({}))
                .await
        }
    });
    next(&mut requests).await?;
    tokio::task::spawn_blocking(move || server.stop()).await??;
    let error = call.await?.expect_err("no server, no answer");
    let error = format!("{:#}", anyhow::Error::from(error));
    assert!(
        error.contains("lost the connection to the NATS server"),
        "{error}"
    );
    Ok(())
}

/// A callee that takes the request, says it is working, and goes away for good (every
/// replica of it restarting, say).
async fn callee_that_answers_once_then_vanishes(
    client: &async_nats::Client,
    agent: &str,
) -> Result<tokio::task::JoinHandle<Result<()>>> {
    let mut requests = client
        .subscribe(subjects::agent_request("mesh", agent))
        .await?;
    client.flush().await?;
    let client = client.clone();
    Ok(tokio::spawn(async move {
        let msg = next(&mut requests).await?;
        let request = Request::from_slice(&msg.payload).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let Method::MessageSend(params) = request.method else {
            anyhow::bail!("not a message/send");
        };
        let task_id = params.message.task_id.clone().context("no task id")?;
        let status_to = msg
            .headers
            .as_ref()
            .and_then(|h| h.get(messages::headers::STATUS_TO))
            .context("no status inbox")?
            .to_string();
        let update = messages::TaskStatusUpdateEvent {
            task_id: task_id.clone(),
            context_id: task_id,
            status: TaskStatus::new(TaskState::Working),
            is_final: false,
            metadata: None,
        };
        let response = Response::result(request.id.clone(), AgentReply::StatusUpdate(update));
        client
            .publish(status_to, serde_json::to_vec(&response)?.into())
            .await?;
        requests.unsubscribe().await?;
        client.flush().await?;
        Ok(())
    }))
}

#[tokio::test]
async fn no_responders_after_the_callee_took_the_request_is_waited_out_not_fatal() -> Result<()> {
    let (_server, client) = setup().await?;
    let callee = callee_that_answers_once_then_vanishes(&client, "Restarting").await?;
    let mut options = CallOptions::new(Duration::from_secs(2));
    options.resend_interval = Duration::from_millis(20);
    let err = Mesh::new(client.clone())
        .defaults(options)
        .agent("Restarting")
        .call(json!({}))
        .await
        .expect_err("nobody ever answers");
    callee.await??;
    // Before the callee showed a sign of life, no responders would end the call at once;
    // after it, the caller resends (meeting no responders) until its timeout.
    match err {
        agent_sdk::CallError::TimedOut { sends, .. } => assert!(sends >= 2, "sent {sends} times"),
        other => panic!("expected a timeout after resends, got {other:?}"),
    }
    Ok(())
}
