//! The A2A door's answers that are not streams: send, get, cancel and list, in the 0.3
//! shape (the caller writes them in 1.0 when asked). Each calls [`crate::ops`]: a message
//! goes onto the mesh unchanged but for the task id the door gives it, signed by the HTTP
//! side's key; a workflow's run is found, cancelled and followed as the web view does.
//!
//! Task ids are the door's (`run-` and a random UUID, as the web view's), in the scope of
//! requests without `Mesh-Caller`: the web view, this door and `tasks/get` by any face see
//! the same runs. A message naming a `taskId` of a workflow's run is a signal for the run's
//! waiting `wait` node (see `signal`; a run waiting for nothing answers -32004, an unknown
//! task -32001); one naming an agent's task continues nothing (-32004). A blocking send
//! that starts a run answers once the run ends, or as soon as it waits for a signal
//! (`input-required`).

use std::time::Duration;

use agent_sdk::workflow::new_task_id;
use agent_sdk::Timing;
use messages::jsonrpc::{codes, MessageSendParams, Method, Request};
use messages::{AgentReply, Task};
use serde_json::{json, Value};

use super::rpc::{PushConfig, RpcError, Version};
use crate::ops::call::{self, Callee};
use crate::ops::follow::Follow;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::runs::{Filter, RunRef};
use crate::ops::steer;
use crate::web::Ctx;

/// How long a blocking `message/send` waits for the task's end.
pub(super) const SEND_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a cancel waits for the run to end before answering the task as it is.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// A message ready to go onto the mesh: the request, its task id and context id.
pub(super) struct Outgoing {
    /// The `message/send` (JSON-RPC id = task id).
    pub(super) request: Request,
    /// The task id the door gave it.
    pub(super) task_id: String,
    /// The task's context: the client's, else the run's execution id (a workflow) or the
    /// task id (an agent), as the mesh answers.
    pub(super) context_id: String,
}

/// The refusal of an operation as A2A's error: the node's own code when it sent one.
pub(super) fn rpc_error(id: &Value, r: &Refusal) -> RpcError {
    let code = r.code.unwrap_or(match r.kind {
        RefusalKind::NotFound => codes::TASK_NOT_FOUND,
        RefusalKind::Conflict => codes::TASK_NOT_CANCELABLE,
        RefusalKind::NotPermitted => codes::NOT_PERMITTED,
        RefusalKind::Invalid => codes::INVALID_PARAMS,
        RefusalKind::NoResponder | RefusalKind::Unavailable | RefusalKind::Failed => {
            codes::INTERNAL_ERROR
        }
    });
    RpcError::new(id, code, r.message.clone())
}

/// Prepares `params` (a `message/send`'s, 0.3 shape) for `callee`; a message naming a
/// task is refused (see the module doc).
pub(super) async fn prepare(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    params: Value,
) -> Result<Outgoing, RpcError> {
    let params: MessageSendParams = serde_json::from_value(params)
        .map_err(|e| RpcError::new(id, codes::INVALID_PARAMS, e.to_string()))?;
    let MessageSendParams {
        mut message,
        metadata,
    } = params;
    if let Some(existing) = &message.task_id {
        return Err(
            match call::get(
                &ctx.client,
                &ctx.ns,
                callee.name(),
                existing,
                ctx.signer.as_ref(),
            )
            .await
            {
                Ok(_) => RpcError::new(
                    id,
                    codes::UNSUPPORTED_OPERATION,
                    format!(
                        "task {existing} takes no further messages: send a new message without \
                     taskId to start another task"
                    ),
                ),
                Err(_) => RpcError::new(
                    id,
                    codes::TASK_NOT_FOUND,
                    format!("task {existing} was specified but does not exist"),
                ),
            },
        );
    }
    let task_id = new_task_id();
    message.task_id = Some(task_id.clone());
    let context_id = message.context_id.clone().unwrap_or_else(|| match callee {
        Callee::Workflow(w) => crate::shell::run::names::caller_execution_id(w, None, &task_id).0,
        Callee::Agent(_) => task_id.clone(),
    });
    let request = Request {
        id: task_id.clone().into(),
        method: Method::MessageSend(MessageSendParams { message, metadata }),
    };
    Ok(Outgoing {
        request,
        task_id,
        context_id,
    })
}

/// `message/send`: the task once it ended (or, not `blocking`, once it was accepted).
/// A push config given with it is kept once the run is accepted.
pub(super) async fn send(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    params: Value,
    blocking: bool,
    push: Option<(PushConfig, Version)>,
) -> Result<Value, RpcError> {
    if let Some((task, message)) = to_waiting_task(callee, &params) {
        return super::signal::deliver(ctx, callee, id, &task, message, blocking).await;
    }
    let out = prepare(ctx, callee, id, params).await?;
    let accepted = std::sync::Arc::new(tokio::sync::Notify::new());
    let told = accepted.clone();
    let waits = std::sync::Arc::new(tokio::sync::Notify::new());
    let told_wait = waits.clone();
    let exchange = call::send(
        &ctx.client,
        &ctx.ns,
        callee.name(),
        &out.request,
        ctx.signer.clone(),
        Timing::new(SEND_TIMEOUT),
        move |update| {
            told.notify_one();
            if starts_a_wait(update) {
                told_wait.notify_one();
            }
        },
    );
    tokio::pin!(exchange);
    let early = if blocking && push.is_none() {
        None
    } else {
        tokio::select! {
            reply = &mut exchange => Some(reply),
            () = accepted.notified() => None,
        }
    };
    let reply = match early {
        Some(reply) => reply,
        None => {
            if let Some((config, version)) = push {
                super::push::set(ctx, callee, id, version, &out.task_id, config).await?;
            }
            if !blocking {
                return Ok(json!({"kind": "task", "id": out.task_id,
                    "contextId": out.context_id, "status": {"state": "submitted"}}));
            }
            loop {
                tokio::select! {
                    reply = &mut exchange => break reply,
                    () = waits.notified() => {
                        let task = get(ctx, callee, id, &out.task_id).await?;
                        if task["status"]["state"] == "input-required" {
                            return Ok(task);
                        }
                    }
                }
            }
        }
    };
    match reply.map_err(|r| rpc_error(id, &r))? {
        AgentReply::Task(t) => Ok(task_value(t, &out.task_id, &out.context_id)),
        other => Ok(serde_json::to_value(&other).unwrap_or(Value::Null)),
    }
}

/// The task id and message of a `message/send` to a workflow naming an existing task: a
/// message on a task that may wait for a signal (see `signal`).
fn to_waiting_task(callee: &Callee, params: &Value) -> Option<(String, messages::Message)> {
    if !matches!(callee, Callee::Workflow(_)) {
        return None;
    }
    let params: MessageSendParams = serde_json::from_value(params.clone()).ok()?;
    let task = params.message.task_id.clone()?;
    Some((task, params.message))
}

/// Whether a run's status update says a wait node started (the run may now need input).
fn starts_a_wait(update: &messages::TaskStatusUpdateEvent) -> bool {
    let start = update
        .status
        .message
        .as_ref()
        .and_then(|m| m.find_data::<messages::WorkflowNodeExecutionStart>());
    matches!(start, Some(Ok(s)) if s.node_type == "wait")
}

/// A task as the door answers it: named by the door's id and context, its output (the
/// status message's parts that are neither text nor the mesh's own progress) also given
/// as the artifact `output` once it completed.
pub(super) fn task_value(task: Task, task_id: &str, context_id: &str) -> Value {
    let completed = task.status.state == messages::a2a::TaskState::Completed;
    let mut v = serde_json::to_value(&task).unwrap_or(Value::Null);
    v["id"] = json!(task_id);
    v["contextId"] = json!(context_id);
    let parts: Vec<Value> = v["status"]["message"]["parts"]
        .as_array()
        .map(|parts| parts.iter().filter(|p| is_output(p)).cloned().collect())
        .unwrap_or_default();
    if completed && !parts.is_empty() {
        v["artifacts"] = json!([{"artifactId": "output", "name": "output", "parts": parts}]);
    }
    v
}

/// Whether a part is output: a file, or data that is not one of the mesh's own DataParts
/// (`workflow_run_state`, progress).
fn is_output(part: &Value) -> bool {
    match part["kind"].as_str() {
        Some("file") => true,
        Some("data") => !part["data"]["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("workflow_")),
        _ => false,
    }
}

/// How long a lookup of a workflow's task waits for the run's record when the task id is
/// new: the door hands the id out once the mesh stored the start, a moment before the run's
/// first commit writes the record.
pub(super) const JUST_STARTED: Duration = Duration::from_secs(5);

/// `tasks/get`: the task as its workflow node or agent reports it.
pub(super) async fn get(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    task: &str,
) -> Result<Value, RpcError> {
    let t = call::get(
        &ctx.client,
        &ctx.ns,
        callee.name(),
        task,
        ctx.signer.as_ref(),
    )
    .await
    .map_err(|r| rpc_error(id, &r))?;
    let context = t.context_id.clone();
    Ok(task_value(t, task, &context))
}

/// `tasks/cancel`: a workflow's run is cancelled as the web view does (signed by the HTTP
/// side's key) and answered once it ended (or after [`CANCEL_WAIT`], as it is then); an
/// agent is asked to cancel its task.
pub(super) async fn cancel(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    task: &str,
    reason: Option<&str>,
) -> Result<Value, RpcError> {
    let refused = |r: Refusal| rpc_error(id, &r);
    let Callee::Workflow(workflow) = callee else {
        let t = call::cancel_agent(
            &ctx.client,
            &ctx.ns,
            callee.name(),
            task,
            ctx.signer.as_ref(),
        )
        .await
        .map_err(refused)?;
        let context = t.context_id.clone();
        return Ok(task_value(t, task, &context));
    };
    let runs = ctx
        .runs()
        .await
        .map_err(|e| RpcError::new(id, codes::INTERNAL_ERROR, e.message))?;
    let which = RunRef {
        id: task,
        workflow: Some(workflow),
        caller: None,
    };
    let run = runs.find_soon(which, JUST_STARTED).await.map_err(refused)?;
    if run.record.state.status.is_terminal() {
        return Err(RpcError::new(
            id,
            codes::TASK_NOT_CANCELABLE,
            format!("task {task} has ended: it cannot be cancelled"),
        ));
    }
    steer::cancel(&runs, &run, reason, ctx.signer.as_ref())
        .await
        .map_err(refused)?;
    let mut follow = Follow::start(&runs, run).await.map_err(refused)?;
    let ended = async { while let Ok(Some(_)) = follow.next().await {} };
    let _ = tokio::time::timeout(CANCEL_WAIT, ended).await;
    get(ctx, callee, id, task).await
}

/// `ListTasks` (1.0): a workflow's runs started without `Mesh-Caller` (this door's, the
/// web view's), newest first, as tasks without messages.
pub(super) async fn list(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    page_size: usize,
) -> Result<Value, RpcError> {
    let Callee::Workflow(workflow) = callee else {
        return Err(RpcError::new(
            id,
            codes::UNSUPPORTED_OPERATION,
            "an agent's tasks live with the replica running them: they cannot be listed",
        ));
    };
    let runs = ctx
        .runs()
        .await
        .map_err(|e| RpcError::new(id, codes::INTERNAL_ERROR, e.message))?;
    let filter = Filter {
        workflow: Some(workflow),
        status: None,
        since: None,
        limit: 0,
    };
    let listed = runs.list(&filter).await.map_err(|r| rpc_error(id, &r))?;
    let tasks: Vec<Value> = listed
        .runs
        .iter()
        .filter(|r| r.record.caller.name.is_none())
        .filter_map(|r| {
            let task_id = r.record.caller.request_id.as_str()?;
            let context = r
                .record
                .caller
                .context_id
                .clone()
                .unwrap_or(r.execution.0.clone());
            let shown = crate::ops::view::summary(r, listed.now);
            let state = state_of(shown["status"].as_str().unwrap_or(""));
            Some(json!({"kind": "task", "id": task_id, "contextId": context,
                "status": {"state": state}}))
        })
        .collect();
    let total = tasks.len();
    let page: Vec<Value> = tasks.into_iter().take(page_size).collect();
    Ok(json!({"tasks": page, "nextPageToken": "", "pageSize": page_size, "totalSize": total}))
}

/// The A2A state of a run shown with `status` (`runs list`'s words).
fn state_of(status: &str) -> &'static str {
    match status {
        "success" => "completed",
        "failure" | "timed_out" => "failed",
        "cancelled" => "canceled",
        _ => "working",
    }
}
