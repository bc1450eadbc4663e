//! Helpers shared by the integration tests: a server and client per test, and workflow-style
//! requests built from the `messages` types.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use futures::StreamExt;
use messages::{
    AgentReply, Message, Outcome, Part, Request, Response, Role, Task, WorkflowNodeRequest,
    WorkflowNodeResult,
};
use serde_json::Value;

/// How long any single await in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// A fresh server and a connected client.
pub async fn setup() -> Result<(test_harness::NatsServer, Client)> {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await?;
    Ok((server, client))
}

/// The `workflow_node_request` of node `node` of run `exec`, attempt `attempt`, slot 0.
pub fn node_request(exec: &str, node: &str, attempt: u32) -> WorkflowNodeRequest {
    WorkflowNodeRequest {
        workflow_name: "Wf".into(),
        node_id: node.into(),
        input_schema: None,
        output_schema: None,
        suggested_output_filename: None,
        execution_id: Some(exec.into()),
        sub_task_id: Some(sub_task(exec, node, attempt)),
        map_index: None,
        loop_iteration: None,
        attempt: Some(attempt),
    }
}

/// `{exec}_{node}_0_{attempt}`.
pub fn sub_task(exec: &str, node: &str, attempt: u32) -> String {
    format!("{exec}_{node}_0_{attempt}")
}

/// The JSON-RPC body of a workflow's call: request part, optional instruction, input part.
pub fn workflow_body(req: &WorkflowNodeRequest, instruction: Option<&str>, input: Part) -> Bytes {
    let id = req.sub_task_id.clone().unwrap_or_default();
    let mut parts = vec![Part::data_part(req)];
    parts.extend(instruction.map(Part::text));
    parts.push(input);
    let mut message = Message::new(id.clone(), Role::User, parts);
    message.task_id = Some(id.clone());
    message.context_id = req.execution_id.clone();
    Bytes::from(serde_json::to_vec(&Request::message_send(id, message)).unwrap())
}

/// Sends `body` to `agent` and returns the parsed reply.
pub async fn request(
    client: &Client,
    agent: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(Response, Option<HeaderMap>)> {
    let msg = tokio::time::timeout(
        WAIT,
        client.request_with_headers(
            messages::subjects::agent_request("mesh", agent),
            headers,
            body,
        ),
    )
    .await
    .context("no reply in time")??;
    let response: Response = serde_json::from_slice(&msg.payload).with_context(|| {
        format!(
            "reply is not a response: {}",
            String::from_utf8_lossy(&msg.payload)
        )
    })?;
    Ok((response, msg.headers))
}

/// The task of a successful JSON-RPC response.
pub fn task(response: Response) -> Result<Task> {
    match response.outcome {
        Outcome::Result(r) => match *r {
            AgentReply::Task(t) => Ok(t),
            other => bail!("not a task: {other:?}"),
        },
        Outcome::Error(e) => bail!("JSON-RPC error: {e:?}"),
    }
}

/// The `workflow_node_result` of a task, which must be its first part.
pub fn node_result(task: &Task) -> Result<WorkflowNodeResult> {
    let first = task
        .status
        .message
        .as_ref()
        .and_then(|m| m.parts.first())
        .context("no parts")?;
    let data = first.as_data().context("first part is not data")?;
    Ok(serde_json::from_value(Value::Object(data.clone()))?)
}

/// Calls a workflow-style request and returns the task and its result.
pub async fn call_node(
    client: &Client,
    agent: &str,
    req: &WorkflowNodeRequest,
    input: Value,
) -> Result<(Task, WorkflowNodeResult)> {
    let body = workflow_body(req, None, messages::payload::wrap(input));
    let (response, _) = request(client, agent, HeaderMap::new(), body).await?;
    let task = task(response)?;
    let result = node_result(&task)?;
    Ok((task, result))
}

/// The next message of `sub`, within [`WAIT`].
pub async fn next(sub: &mut async_nats::Subscriber) -> Result<async_nats::Message> {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .context("nothing arrived in time")?
        .context("subscription ended")
}
