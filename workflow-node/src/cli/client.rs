//! Calling a workflow the way another agent would: a `message/send` with the input as a
//! DataPart, progress from the status subject, and the final Task.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use futures::{FutureExt, StreamExt};
use messages::a2a::{AgentReply, Message, Part, Role, TaskState};
use messages::jsonrpc::{Outcome, Request, Response};
use messages::payload::wrap;
use messages::reply::{decode_reply, output_part, Output, ReplyError};
use messages::workflow::WorkflowDataPart;
use messages::{headers, subjects};
use serde_json::Value;

/// How a run ended, as its caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// `success`, `failure` or `cancelled`.
    pub status: String,
    /// The output, on success.
    pub output: Option<Value>,
    /// The error, otherwise.
    pub error: Option<String>,
    /// The last status of each node seen in progress updates.
    pub nodes: BTreeMap<String, String>,
    /// The run's execution id (from its start update).
    pub execution_id: Option<String>,
}

/// Invokes `workflow` with `input`, calling `progress` with each update's DataPart.
pub async fn invoke(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    input: &Value,
    timeout: Duration,
    mut progress: impl FnMut(&WorkflowDataPart),
) -> Result<RunResult> {
    let status_inbox = client.new_inbox();
    let reply_inbox = client.new_inbox();
    let mut status = client.subscribe(status_inbox.clone()).await?;
    let mut replies = client.subscribe(reply_inbox.clone()).await?;
    let message_id = format!("run-{}", uuid::Uuid::new_v4().simple());
    let message = Message::new(message_id.clone(), Role::User, vec![wrap(input.clone())]);
    let request = Request::message_send(message_id.as_str(), message);
    let mut h = async_nats::HeaderMap::new();
    h.insert(headers::STATUS_TO, status_inbox.as_str());
    client
        .publish_with_reply_and_headers(
            subjects::agent_request(ns, workflow),
            reply_inbox,
            h,
            serde_json::to_vec(&request)?.into(),
        )
        .await?;
    client.flush().await?;
    let mut nodes = BTreeMap::new();
    let mut execution_id = None;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                bail!("no result from {workflow} within {} s", timeout.as_secs_f64())
            }
            Some(msg) = status.next() => on_status(&msg, &mut nodes, &mut execution_id, &mut progress),
            Some(msg) = replies.next() => {
                if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                    bail!("nothing serves {workflow} in namespace '{ns}' (no responders)");
                }
                // Updates published before the reply are already queued: take them first.
                while let Some(Some(msg)) = status.next().now_or_never() {
                    on_status(&msg, &mut nodes, &mut execution_id, &mut progress);
                }
                let reply = match decode_reply(&msg.payload) {
                    Ok(reply) => reply,
                    Err(ReplyError::NotJsonRpc(e)) => bail!("{workflow} sent a reply that is not JSON-RPC: {e}"),
                    Err(ReplyError::Rpc(e)) => bail!("{workflow} refused the request: {} ({})", e.message, e.code),
                };
                let AgentReply::Task(task) = reply else { continue };
                let parts = task.status.message.map(|m| m.parts).unwrap_or_default();
                let text: Vec<&str> = parts.iter().filter_map(Part::as_text).collect();
                let output = match output_part(&parts) {
                    Some(Output::Inline(v)) => Some(v),
                    Some(Output::Object(uri)) => Some(artifact_output(client, ns, &uri).await?),
                    None => None,
                };
                let (status, error) = match task.status.state {
                    TaskState::Completed => ("success", None),
                    TaskState::Canceled => ("cancelled", Some(text.join("\n"))),
                    _ => ("failure", Some(text.join("\n"))),
                };
                return Ok(RunResult { status: status.into(), output, error, nodes, execution_id });
            }
        }
    }
}

fn on_status(
    msg: &async_nats::Message,
    nodes: &mut BTreeMap<String, String>,
    execution_id: &mut Option<String>,
    progress: &mut impl FnMut(&WorkflowDataPart),
) {
    let Ok(response) = serde_json::from_slice::<Response>(&msg.payload) else {
        return;
    };
    let Outcome::Result(reply) = response.outcome else {
        return;
    };
    let AgentReply::StatusUpdate(update) = *reply else {
        return;
    };
    let parts = update.status.message.map(|m| m.parts).unwrap_or_default();
    for part in parts.iter().filter_map(Part::as_data) {
        let Ok(Some(data)) = WorkflowDataPart::from_data(part) else {
            continue;
        };
        match &data {
            WorkflowDataPart::ExecutionStart(s) => *execution_id = Some(s.execution_id.clone()),
            WorkflowDataPart::NodeExecutionResult(r) => {
                let s = serde_json::to_value(r.status)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from));
                nodes.insert(r.node_id.clone(), s.unwrap_or_default());
            }
            _ => {}
        }
        progress(&data);
    }
}

/// The output of a reply that carries it as an object-store artifact (a large output).
async fn artifact_output(client: &async_nats::Client, ns: &str, uri: &str) -> Result<Value> {
    let artifacts = agent_sdk::payload::Artifacts::new(client.clone(), ns);
    let value = artifacts
        .get_uri(uri)
        .await
        .map_err(|e| anyhow!("reading the output artifact {uri}: {e}"))?;
    Ok(value)
}
