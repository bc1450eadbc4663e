//! `GET /api/runs/{id}/events`: a run's progress as server-sent events. First a `run`
//! event with the whole run (as `GET /api/runs/{id}` answers), then another at each change
//! of its record and a `status` event for each status update its agents send (both from
//! [`crate::ops::follow`]; a status event's `agent` and `says` give the update as that
//! agent's words, escaped and capped: see [`crate::ops::words`]), and, once it has ended, an `end` event, after which the stream
//! closes.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::api::{definition_of, find, run_view};
use super::{ApiError, Ctx};
use crate::definition::Workflow;
use crate::ops::follow::{Change, Follow};
use crate::ops::runs::Runs;
use crate::ops::words::AgentWords;

/// Events kept for a slow reader before the feed waits for it.
const BUFFER: usize = 64;

/// Opens the stream of run `id` (404 when there is no such run).
pub(super) async fn stream(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (runs, run) = find(&ctx, &id).await?;
    // The definition is looked up once: a run keeps the one it started with.
    let def = definition_of(&runs, &run, ctx.cards.trust()).await;
    let first = run_view(&runs, &run, def.as_ref()).await?;
    // Followed before the first event is sent: no change after it is missed.
    let follow = Follow::start(&runs, run).await?;
    let (tx, rx) = mpsc::channel::<Event>(BUFFER);
    tokio::spawn(async move {
        if let Err(message) = feed((&runs, def.as_ref()), follow, first, &tx).await {
            let v = json!({"error": message});
            let _ = tx.send(event("error", &v)).await;
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

/// Sends the run's events to `tx` until the run ends or the reader goes away; what went
/// wrong, if anything did.
async fn feed(
    (runs, def): (&Runs, Option<&Workflow>),
    mut follow: Follow,
    first: Value,
    tx: &mpsc::Sender<Event>,
) -> Result<(), String> {
    if tx.send(event("run", &first)).await.is_err() {
        return Ok(());
    }
    loop {
        let change = tokio::select! {
            change = follow.next() => change.map_err(|r| r.message)?,
            () = tx.closed() => return Ok(()),
        };
        let sent = match change {
            None => break,
            Some(Change::Run(run)) => {
                let v = run_view(runs, &run, def).await.map_err(|e| e.message)?;
                tx.send(event("run", &v)).await
            }
            Some(Change::Status(u)) => {
                // The agent's words, for the page to show quoted after its name.
                let words = AgentWords::of(&u, def);
                let (agent, says) = match &words {
                    Some(w) => (json!(w.speaker()), json!(w.words)),
                    None => (Value::Null, Value::Null),
                };
                let v = json!({"node_id": u.task.node, "sub_task_id": u.sub_task_id,
                    "state": u.state, "text": u.text, "data": u.data,
                    "agent": agent, "says": says});
                tx.send(event("status", &v)).await
            }
        };
        if sent.is_err() {
            return Ok(());
        }
    }
    let run = follow.run();
    let v = json!({"execution_id": run.execution.0, "status": run.record.state.shown_status()});
    let _ = tx.send(event("end", &v)).await;
    Ok(())
}
