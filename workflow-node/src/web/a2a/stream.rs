//! The A2A door's streams (`message/stream`, `tasks/resubscribe` and 1.0's names), as
//! server-sent events: each event's `data` is one whole JSON-RPC response (one line) with
//! the request's id, as both versions' JSON-RPC binding says.
//!
//! - `message/stream`: the task (`submitted`) once the callee has it (its first update;
//!   a stream dropped after that leaves the task going on); then each status update the callee
//!   sends on the way (a workflow's progress DataParts, its agents' words as
//!   `workflow_agent_status` with their text also as a text part; a push config given
//!   with the message is kept once the first arrives); then the output as the
//!   artifact `output`, and the final status (`final: true`). The stream then closes.
//! - `tasks/resubscribe` (a workflow's task, from any replica of the door): the task as it
//!   is now; every entry of the run's history (`docs/protocol.md`, "Run history") as a
//!   `working` update holding `workflow_history_entry {n, at, event, node?, status, ...}`,
//!   then the entries added since, and the agents' words, as they come; then the output
//!   and the final status. The history is kept in JetStream, so a stream rejoined after a
//!   drop loses none of it (a reader drops entries whose `n` it has seen). An agent's task
//!   lives only with the replica running it: resubscribing to it is -32004.
//!
//! Following starts before the run is read again, so nothing between the two is missed;
//! the event after which the reader went away stops the feed (the task itself goes on).

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use messages::jsonrpc::codes;
use messages::{AgentReply, TaskStatusUpdateEvent};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::rpc::{RpcError, Version};
use super::tasks::{self, rpc_error, task_value};
use super::v1;
use crate::ops::call::{self, Callee};
use crate::ops::follow::{Change, Follow};
use crate::ops::runs::{RunRef, Runs};
use crate::shell::callers::statuses::AgentUpdate;
use crate::web::Ctx;

/// Items kept for a slow reader before the feed waits for it.
const BUFFER: usize = 64;

/// Where a stream's items go, written for the request (its id, its version).
#[derive(Clone)]
struct Sink {
    tx: mpsc::Sender<Event>,
    id: Value,
    version: Version,
}

impl Sink {
    /// Sends one item (0.3 shape); false once the reader went away.
    async fn item(&self, item: &Value) -> bool {
        let result = match self.version {
            Version::V03 => item.clone(),
            Version::V10 => v1::stream_item(item),
        };
        let v = json!({"jsonrpc": "2.0", "id": self.id, "result": result});
        self.tx
            .send(Event::default().data(v.to_string()))
            .await
            .is_ok()
    }

    /// Sends an error response; the stream then ends.
    async fn error(&self, e: &RpcError) {
        let _ = self
            .tx
            .send(Event::default().data(e.body().to_string()))
            .await;
    }
}

/// A place among the streams open at once, or the error to answer.
fn place(ctx: &Ctx, id: &Value) -> Result<tokio::sync::OwnedSemaphorePermit, RpcError> {
    ctx.streams.clone().try_acquire_owned().map_err(|_| {
        RpcError::new(
            id,
            codes::INTERNAL_ERROR,
            format!(
                "{} streams are open, the most this server keeps: try again later",
                super::MAX_STREAMS
            ),
        )
        .with_status(axum::http::StatusCode::SERVICE_UNAVAILABLE)
    })
}

/// A stream fed by `feed` (holding `place` until it ends), answered as
/// `text/event-stream`.
fn respond<F>(
    id: &Value,
    version: Version,
    place: tokio::sync::OwnedSemaphorePermit,
    feed: impl FnOnce(Sink) -> F,
) -> Response
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Event>(BUFFER);
    let sink = Sink {
        tx,
        id: id.clone(),
        version,
    };
    let fed = feed(sink);
    tokio::spawn(async move {
        fed.await;
        drop(place);
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    let mut r = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    let h = r.headers_mut();
    h.insert("cache-control", "no-cache".parse().expect("a header value"));
    h.insert("x-accel-buffering", "no".parse().expect("a header value"));
    r
}

/// `message/stream`: the task, its updates, its output and final status.
pub(super) async fn send(
    ctx: Ctx,
    callee: Callee,
    id: &Value,
    version: Version,
    params: Value,
    mut push: Option<super::rpc::PushConfig>,
) -> Result<Response, RpcError> {
    let place = place(&ctx, id)?;
    let out = tasks::prepare(&ctx, &callee, id, params).await?;
    let rid = id.clone();
    Ok(respond(id, version, place, move |sink| async move {
        let (task_id, context) = (out.task_id.clone(), out.context_id.clone());
        // The task is told once the callee has it (its first update: a workflow's run is
        // stored by then), so that a client may drop the stream and go on with the task id.
        let first = json!({"kind": "task", "id": task_id, "contextId": context,
            "status": {"state": "submitted"}});
        let mut told = false;
        let (utx, mut urx) = mpsc::unbounded_channel::<TaskStatusUpdateEvent>();
        let exchange = call::send(
            &ctx.client,
            &ctx.ns,
            callee.name(),
            &out.request,
            ctx.signer.clone(),
            agent_sdk::Timing::new(tasks::SEND_TIMEOUT),
            move |u| {
                let _ = utx.send(u.clone());
            },
        );
        tokio::pin!(exchange);
        let reply = loop {
            tokio::select! {
                reply = &mut exchange => break reply,
                Some(u) = urx.recv() => {
                    if !std::mem::replace(&mut told, true) && !sink.item(&first).await {
                        return;
                    }
                    // The run is accepted: a push config given with the message is kept.
                    if let Some(config) = push.take() {
                        let set = super::push::set(&ctx, &callee, &rid, version, &task_id, config);
                        if let Err(e) = set.await {
                            sink.error(&e).await;
                            return;
                        }
                    }
                    if !sink.item(&update(&u, &task_id, &context)).await {
                        return;
                    }
                }
                () = sink.tx.closed() => return,
            }
        };
        if !told && (reply.is_ok() || !urx.is_empty()) && !sink.item(&first).await {
            return;
        }
        while let Ok(u) = urx.try_recv() {
            if !sink.item(&update(&u, &task_id, &context)).await {
                return;
            }
        }
        match reply {
            Ok(AgentReply::Task(t)) => {
                let v = task_value(t, &task_id, &context);
                end(&sink, &v).await;
            }
            Ok(other) => {
                let v = serde_json::to_value(&other).unwrap_or(Value::Null);
                sink.item(&v).await;
            }
            Err(r) => sink.error(&rpc_error(&rid, &r)).await,
        }
    }))
}

/// A status update from the mesh as the stream gives it: named by the door's ids, not
/// final, an agent's words also as a text part.
fn update(u: &TaskStatusUpdateEvent, task_id: &str, context: &str) -> Value {
    let mut v = serde_json::to_value(u).unwrap_or(Value::Null);
    v["taskId"] = json!(task_id);
    v["contextId"] = json!(context);
    v["final"] = json!(false);
    if let Some(parts) = v["status"]["message"]["parts"].as_array_mut() {
        let said: Vec<String> = parts
            .iter()
            .filter(|p| p["data"]["type"] == "workflow_agent_status")
            .filter_map(|p| {
                let text = p["data"]["text"].as_str()?;
                Some(format!(
                    "{}: {text}",
                    p["data"]["node_id"].as_str().unwrap_or("?")
                ))
            })
            .collect();
        for text in said {
            parts.push(json!({"kind": "text", "text": text}));
        }
    }
    v
}

/// The end of a stream: the output as an artifact (when there is one), then the final
/// status.
async fn end(sink: &Sink, task: &Value) {
    let (task_id, context) = (&task["id"], &task["contextId"]);
    if let Some(artifact) = task["artifacts"].get(0) {
        let a = json!({"kind": "artifact-update", "taskId": task_id, "contextId": context,
            "artifact": artifact, "append": false, "lastChunk": true});
        if !sink.item(&a).await {
            return;
        }
    }
    let s = json!({"kind": "status-update", "taskId": task_id, "contextId": context,
        "status": task["status"], "final": true});
    sink.item(&s).await;
}

/// `tasks/resubscribe`: see the module doc.
pub(super) async fn resubscribe(
    ctx: Ctx,
    callee: Callee,
    id: &Value,
    version: Version,
    task: String,
) -> Result<Response, RpcError> {
    let Callee::Workflow(workflow) = &callee else {
        return Err(RpcError::new(
            id,
            codes::UNSUPPORTED_OPERATION,
            "an agent's task lives only with the replica running it: its stream cannot be \
             rejoined; ask tasks/get",
        ));
    };
    let runs = ctx
        .runs()
        .await
        .map_err(|e| RpcError::new(id, codes::INTERNAL_ERROR, e.message))?;
    let which = RunRef {
        id: &task,
        workflow: Some(workflow),
        caller: None,
    };
    let run = runs
        .find_soon(which, tasks::JUST_STARTED)
        .await
        .map_err(|r| rpc_error(id, &r))?;
    // Followed before the task is read: no change after the read is missed.
    let follow = Follow::start(&runs, run.clone())
        .await
        .map_err(|r| rpc_error(id, &r))?;
    let now = tasks::get(&ctx, &callee, id, &task).await?;
    let place = place(&ctx, id)?;
    let rid = id.clone();
    Ok(respond(id, version, place, move |sink| async move {
        if let Err(r) = rejoin(&ctx, &callee, &runs, follow, now, &sink).await {
            sink.error(&rpc_error(&rid, &r)).await;
        }
    }))
}

/// Feeds a rejoined stream (see [`resubscribe`]).
async fn rejoin(
    ctx: &Ctx,
    callee: &Callee,
    runs: &Runs,
    mut follow: Follow,
    now: Value,
    sink: &Sink,
) -> Result<(), crate::ops::refusal::Refusal> {
    let (task_id, context) = (now["id"].clone(), now["contextId"].clone());
    if !sink.item(&now).await {
        return Ok(());
    }
    let mut seen = 0;
    if !history(runs, follow.run(), &mut seen, sink, (&task_id, &context)).await? {
        return Ok(());
    }
    loop {
        let change = tokio::select! {
            change = follow.next() => change?,
            () = sink.tx.closed() => return Ok(()),
        };
        let sent = match change {
            None => break,
            Some(Change::Run(run)) => {
                history(runs, &run, &mut seen, sink, (&task_id, &context)).await?
            }
            Some(Change::Status(u)) => sink.item(&agent_update(&u, (&task_id, &context))).await,
        };
        if !sent {
            return Ok(());
        }
    }
    let task = task_id.as_str().unwrap_or_default();
    let last = call::get(
        &ctx.client,
        &ctx.ns,
        callee.name(),
        task,
        ctx.signer.as_ref(),
    )
    .await?;
    let context = last.context_id.clone();
    end(sink, &task_value(last, task, &context)).await;
    Ok(())
}

/// Sends the entries of `run`'s history after `seen` (and moves `seen`); false once the
/// reader went away.
async fn history(
    runs: &Runs,
    run: &crate::shell::FoundRun,
    seen: &mut u64,
    sink: &Sink,
    (task_id, context): (&Value, &Value),
) -> Result<bool, crate::ops::refusal::Refusal> {
    for entry in runs.history(run).await? {
        if entry.n <= *seen {
            continue;
        }
        *seen = entry.n;
        let mut data = serde_json::to_value(&entry).unwrap_or(Value::Null);
        data["type"] = json!("workflow_history_entry");
        let v = working(
            task_id,
            context,
            vec![json!({"kind": "data", "data": data})],
        );
        if !sink.item(&v).await {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A `working` status update (not final) with `parts`.
fn working(task_id: &Value, context: &Value, parts: Vec<Value>) -> Value {
    json!({"kind": "status-update", "taskId": task_id, "contextId": context,
        "status": {"state": "working", "message": {"kind": "message", "role": "agent",
            "messageId": uuid::Uuid::new_v4().to_string(), "parts": parts}},
        "final": false})
}

/// An agent's words, followed from its workflow's status subject, as a status update:
/// `workflow_agent_status` (as the node forwards it) and its text.
fn agent_update(u: &AgentUpdate, (task_id, context): (&Value, &Value)) -> Value {
    let data = json!({"type": "workflow_agent_status", "execution_id": u.execution.0,
        "node_id": u.task.node, "sub_task_id": u.sub_task_id, "state": u.state,
        "text": u.text, "data": u.data});
    let mut parts = vec![json!({"kind": "data", "data": data})];
    if let Some(text) = &u.text {
        parts.push(json!({"kind": "text", "text": format!("{}: {text}", u.task.node)}));
    }
    working(task_id, context, parts)
}
