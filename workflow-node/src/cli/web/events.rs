//! `GET /api/runs/{id}/events`: a run's progress as server-sent events. First a `run`
//! event with the whole run (as `GET /api/runs/{id}` answers), then another at each change
//! of its record (a KV watch of its key), a `status` event for each status update its
//! agents send, and, once it has ended, an `end` event, after which the stream closes.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use messages::subjects;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::api::{find, run_view};
use super::{ApiError, Ctx};
use crate::shell::callers::statuses;
use crate::shell::{FoundRun, Inspector};

/// Events kept for a slow reader before the feed waits for it.
const BUFFER: usize = 64;

/// Opens the stream of run `id` (404 when there is no such run).
pub(super) async fn stream(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (inspector, run) = find(&ctx, &id).await?;
    let first = run_view(&ctx, &inspector, &run).await?;
    let (tx, rx) = mpsc::channel::<Event>(BUFFER);
    tokio::spawn(async move {
        if let Err(e) = feed(&ctx, &inspector, run, first, &tx).await {
            let v = json!({"error": format!("{e:#}")});
            let _ = tx
                .send(Event::default().event("error").data(v.to_string()))
                .await;
        }
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// Sends the run's events to `tx` until the run ends or the reader goes away.
async fn feed(
    ctx: &Ctx,
    inspector: &Inspector,
    mut run: FoundRun,
    first: Value,
    tx: &mpsc::Sender<Event>,
) -> anyhow::Result<()> {
    // Subscribed before the first event is sent: no change after it is missed.
    let mut updates = ctx
        .client
        .subscribe(subjects::agent_status_all(&ctx.ns, &run.workflow))
        .await?;
    let mut changes = inspector.watch(&run.workflow, &run.execution).await?;
    if tx.send(event("run", &first)).await.is_err() {
        return Ok(());
    }
    let ended = |run: &FoundRun| run.record.state.status.is_terminal();
    if !ended(&run) {
        // The record may have changed between the read and the watch: read it again.
        if let Some(now) = inspector.read_run(&run.workflow, &run.execution).await? {
            if now.revision > run.revision {
                run = now;
                let v = run_view(ctx, inspector, &run).await.map_err(api)?;
                if tx.send(event("run", &v)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
    while !ended(&run) {
        tokio::select! {
            changed = Inspector::changed(&mut changes, &run) => {
                changed?;
                let Some(next) = inspector.read_run(&run.workflow, &run.execution).await? else {
                    anyhow::bail!("run {} is gone (its retention passed)", run.execution);
                };
                run = next;
                let v = run_view(ctx, inspector, &run).await.map_err(api)?;
                if tx.send(event("run", &v)).await.is_err() {
                    return Ok(());
                }
            }
            Some(msg) = updates.next() => {
                let Some(u) = statuses::interpret(&msg.subject, &msg.payload) else { continue };
                if u.execution != run.execution {
                    continue;
                }
                let v = json!({"node_id": u.task.node, "sub_task_id": u.sub_task_id,
                    "state": u.state, "text": u.text, "data": u.data});
                if tx.send(event("status", &v)).await.is_err() {
                    return Ok(());
                }
            }
            () = tx.closed() => return Ok(()),
        }
    }
    let v = json!({"execution_id": run.execution.0, "status": run.record.state.shown_status()});
    let _ = tx.send(event("end", &v)).await;
    Ok(())
}

fn api(e: ApiError) -> anyhow::Error {
    anyhow::anyhow!("{}", e.message)
}
