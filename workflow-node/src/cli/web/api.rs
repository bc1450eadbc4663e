//! The routes of the web view's JSON API (documented in `docs/http.md`).

use std::collections::HashMap;
use std::time::Duration;

use agent_sdk::Timing;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use messages::card::AgentCard;
use serde_json::{json, Value};

use super::{events, json_response, ApiError, ApiResult, Ctx};
use crate::cli::{approvals, runs, runs_show, table};
use crate::core::{ExecutionId, Millis};
use crate::shell::{now, Error as ShellError};
use crate::shell::{FoundRun, Inspector};
use agent_sdk::workflow::{self, InvokeError, StartAs};

/// How long a start waits for the workflow to accept the run.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The API's routes.
pub(super) fn router(ctx: Ctx) -> Router {
    Router::new()
        .route("/api/cards", get(list_cards))
        .route("/api/cards/{name}", get(get_card))
        .route("/api/runs", get(list_runs))
        .route("/api/runs/{id}", get(get_run))
        .route("/api/runs/{id}/history", get(run_history))
        .route("/api/runs/{id}/events", get(events::stream))
        .route("/api/runs/{id}/cancel", post(cancel))
        .route("/api/runs/{id}/pause", post(super::steer::pause))
        .route("/api/runs/{id}/resume", post(super::steer::resume))
        .route("/api/runs/{id}/retry", post(super::steer::retry))
        .route("/api/runs/{id}/approve", post(approve))
        .route("/api/runs/{id}/reject", post(reject))
        .route("/api/workflows/{name}/runs", post(start))
        .merge(super::pages::router())
        .fallback(|| async { ApiError::not_found("no such page or API route") })
        .with_state(ctx)
}

/// A card as listed: what the pages show of it, and when it last arrived.
fn card_view(card: &AgentCard, seen: Millis) -> Value {
    let (input_schema, output_schema) = card.schemas();
    json!({
        "name": card.name,
        "kind": if card.is_workflow() { "workflow" } else { "agent" },
        "description": card.description,
        "version": card.version,
        "skills": card.skills,
        "input_schema": input_schema,
        "output_schema": output_schema,
        "last_seen": table::rfc3339(Some(seen)),
        "seen_ms_ago": now().0.saturating_sub(seen.0),
    })
}

async fn list_cards(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> ApiResult {
    let query = params(query.as_deref(), &["refresh"])?;
    if query.contains_key("refresh") {
        ctx.cards.refresh().await?;
    }
    let cards: Vec<Value> = ctx
        .cards
        .all()
        .iter()
        .map(|(card, seen)| card_view(card, *seen))
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Array(cards)))
}

async fn get_card(State(ctx): State<Ctx>, Path(name): Path<String>) -> ApiResult {
    let Some((card, seen)) = ctx.cards.get(&name) else {
        return Err(ApiError::not_found(format!(
            "no card of '{name}' on the mesh (namespace '{}')",
            ctx.ns
        )));
    };
    let card =
        crate::shell::full_card(&async_nats::jetstream::new(ctx.client.clone()), card).await?;
    let mut v = card_view(&card, seen);
    v["mermaid"] = json!(card.mermaid_source());
    v["workflow_config"] = json!(card.workflow_config());
    v["card"] = serde_json::to_value(&card).unwrap_or(Value::Null);
    Ok(json_response(StatusCode::OK, &v))
}

/// The query string as a map; an unknown parameter is refused, named.
fn params(query: Option<&str>, known: &[&str]) -> Result<HashMap<String, String>, ApiError> {
    let map: HashMap<String, String> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown query parameter '{k}' (known: {})",
            known.join(", ")
        )));
    }
    Ok(map)
}

/// The runs bucket of the namespace; `None` when no workflow node ever ran in it.
pub(super) async fn inspector(ctx: &Ctx) -> Result<Option<Inspector>, ApiError> {
    match Inspector::open(ctx.client.clone(), &ctx.ns).await {
        Ok(i) => Ok(Some(i)),
        Err(ShellError::Missing(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The run `id` names (an execution id), or a 404 saying there is none.
pub(super) async fn find(ctx: &Ctx, id: &str) -> Result<(Inspector, FoundRun), ApiError> {
    let missing = || ApiError::not_found(format!("no run '{id}' in namespace '{}'", ctx.ns));
    let inspector = inspector(ctx).await?.ok_or_else(missing)?;
    match inspector.find(id, None, None).await? {
        Some(run) => Ok((inspector, run)),
        None => Err(missing()),
    }
}

/// The status filter `text` names, as `runs list --status` reads it (a paused run is
/// `paused`, whatever its status below the pause).
fn status_named(text: &str) -> Result<runs::StatusArg, ApiError> {
    <runs::StatusArg as clap::ValueEnum>::from_str(text, false).map_err(|_| {
        ApiError::bad_request(format!(
            "status '{text}' is not one of running, finishing, paused, success, failure, cancelled, timed_out"
        ))
    })
}

async fn list_runs(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> ApiResult {
    let q = params(query.as_deref(), &["workflow", "status", "since", "limit"])?;
    let status = q.get("status").map(|s| status_named(s)).transpose()?;
    let since = match q.get("since") {
        Some(text) => Some(
            workflow_expr::duration::parse(text)
                .map_err(|e| ApiError::bad_request(format!("since: {e}")))?,
        ),
        None => None,
    };
    let limit = match q.get("limit") {
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| ApiError::bad_request(format!("limit '{text}' is not a whole number")))?,
        None => 100,
    };
    let Some(inspector) = inspector(&ctx).await? else {
        return Ok(json_response(StatusCode::OK, &json!([])));
    };
    let mut found = inspector
        .list(q.get("workflow").map(String::as_str))
        .await?;
    let now = now();
    let after = since.map(|d| {
        now.0
            .saturating_sub(u64::try_from(d.as_millis()).unwrap_or(0))
    });
    found.retain(|r| {
        let s = &r.record.state;
        status.is_none_or(|want| want.matches(s)) && after.is_none_or(|a| s.started_at.0 >= a)
    });
    found.sort_by(|a, b| {
        let key = |r: &FoundRun| (r.record.state.started_at, r.execution.0.clone());
        key(b).cmp(&key(a))
    });
    if limit > 0 {
        found.truncate(limit);
    }
    let rows: Vec<Value> = found.iter().map(|r| runs::summary(r, now)).collect();
    Ok(json_response(StatusCode::OK, &Value::Array(rows)))
}

/// The run as the API shows it: `runs show --json`, with the workflow's diagram coloured
/// by status when its definition is at hand.
pub(super) async fn run_view(
    ctx: &Ctx,
    inspector: &Inspector,
    run: &FoundRun,
) -> Result<Value, ApiError> {
    let apart = inspector.apart(run).await?;
    let def = runs_show::definition(&ctx.client, &ctx.ns, run, None).await;
    let mut v = runs_show::view(run, &apart, def.as_ref(), now());
    v["mermaid"] = json!(def.as_ref().map(|d| {
        let status = runs_show::statuses_of(run, Some(d));
        crate::visual::mermaid_with_status(d, &status)
    }));
    Ok(v)
}

async fn get_run(State(ctx): State<Ctx>, Path(id): Path<String>) -> ApiResult {
    let (inspector, run) = find(&ctx, &id).await?;
    let v = run_view(&ctx, &inspector, &run).await?;
    Ok(json_response(StatusCode::OK, &v))
}

async fn run_history(State(ctx): State<Ctx>, Path(id): Path<String>) -> ApiResult {
    let (inspector, run) = find(&ctx, &id).await?;
    let entries = inspector.history(&run.workflow, &run.execution).await?;
    let v = serde_json::to_value(&entries).unwrap_or(Value::Null);
    Ok(json_response(StatusCode::OK, &v))
}

/// The body as a JSON object (an empty body is an empty object).
pub(super) fn object(body: &Bytes) -> Result<serde_json::Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

/// Field `name` of `body` as text, if present; anything else than a string is refused.
pub(super) fn text<'a>(
    body: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::bad_request(format!("'{name}' must be a string"))),
    }
}

async fn start(State(ctx): State<Ctx>, Path(name): Path<String>, body: Bytes) -> ApiResult {
    let body = object(&body)?;
    if let Some(k) = body
        .keys()
        .find(|k| !["input", "version"].contains(&k.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "unknown field '{k}' (known: input, version)"
        )));
    }
    let input = body.get("input").cloned().unwrap_or(json!({}));
    let task_id = workflow::new_task_id();
    let as_ = StartAs {
        task_id: task_id.clone(),
        version: text(&body, "version")?.map(str::to_owned),
        signer: ctx.signer.clone(),
    };
    let started = workflow::start(
        &ctx.client,
        &ctx.ns,
        &name,
        &input,
        Timing::new(START_TIMEOUT),
        as_,
    )
    .await
    .map_err(|e| start_error(&e))?;
    let execution = match started {
        // The `Started` event is stored; the record may not be yet. A start without a
        // `Mesh-Caller` has this id.
        workflow::Started::Accepted => {
            let execution = crate::shell::run::names::caller_execution_id(&name, None, &task_id);
            recorded(&ctx, &name, &execution).await?;
            execution.0
        }
        workflow::Started::Ended { text, .. } => {
            let found = match inspector(&ctx).await? {
                Some(i) => i.find(&task_id, Some(&name), None).await?,
                None => None,
            };
            match found {
                Some(run) => run.execution.0,
                // Answered at once without a run: the start was refused (its input, say).
                None => {
                    return Err(ApiError::bad_request(format!(
                        "{name} refused the run: {text}"
                    )))
                }
            }
        }
    };
    let v = json!({"workflow": name, "task_id": task_id, "execution_id": execution});
    Ok(json_response(StatusCode::CREATED, &v))
}

/// Waits (at most [`START_TIMEOUT`]) until the record of the accepted run `execution` is
/// stored, so that the run can be read as soon as its id is answered.
async fn recorded(ctx: &Ctx, workflow: &str, execution: &ExecutionId) -> Result<(), ApiError> {
    let late = || {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!("run {execution} was accepted, but its record was not stored in time"),
        )
    };
    let wait = async {
        let Some(inspector) = inspector(ctx).await? else {
            return Err(late());
        };
        let mut changes = inspector.watch(workflow, execution).await?;
        if inspector.read_run(workflow, execution).await?.is_some() {
            return Ok(());
        }
        // The watch was opened before the read: the write after it is seen.
        loop {
            match changes.next().await {
                Some(Ok(_)) => return Ok(()),
                // A missed heartbeat: the watch goes on.
                Some(Err(_)) => continue,
                None => return Err(late()),
            }
        }
    };
    tokio::time::timeout(START_TIMEOUT, wait)
        .await
        .unwrap_or_else(|_| Err(late()))
}

/// A failed start as an answer: 404 when nothing serves the workflow, 400 when it refused
/// the input, 504 when it never answered, 502 otherwise.
fn start_error(e: &InvokeError) -> ApiError {
    let status = match e {
        InvokeError::NoResponders { .. } => StatusCode::NOT_FOUND,
        InvokeError::Refused { code, .. } if *code == messages::jsonrpc::codes::INVALID_PARAMS => {
            StatusCode::BAD_REQUEST
        }
        InvokeError::TimedOut { .. } => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    ApiError::new(status, message)
}

async fn cancel(State(ctx): State<Ctx>, Path(id): Path<String>, body: Bytes) -> ApiResult {
    let body = object(&body)?;
    let reason = text(&body, "reason")?;
    let (_, run) = find(&ctx, &id).await?;
    let status = run.record.state.status;
    if status.is_terminal() {
        return Err(ApiError::conflict(format!(
            "run {} already ended ({})",
            run.execution,
            status.as_str()
        )));
    }
    match runs::send_cancel(&ctx.client, &ctx.ns, &run, reason, ctx.signer.as_ref()).await? {
        Ok(message) => Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({"cancel": "requested", "message": message}),
        )),
        Err(why) => Err(refused(why)),
    }
}

/// A request the workflow's node refused: 403 when it is about who asks, 409 otherwise.
pub(super) fn refused(why: String) -> ApiError {
    let lower = why.to_lowercase();
    if ["sign", "may not", "nobody can decide"]
        .iter()
        .any(|w| lower.contains(w))
    {
        ApiError::new(StatusCode::FORBIDDEN, why)
    } else if lower.starts_with("no workflow node serves") {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why)
    } else {
        ApiError::conflict(why)
    }
}

async fn approve(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    decide(ctx, id, body, true).await
}

async fn reject(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    decide(ctx, id, body, false).await
}

async fn decide(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
    approve: bool,
) -> ApiResult {
    let body = object(&body)?;
    let Some(node) = text(&body, "node")? else {
        return Err(ApiError::bad_request(
            "'node' is required: the approval node decided",
        ));
    };
    let decision = approvals::Decided {
        node,
        approve,
        by: text(&body, "by")?,
        comment: text(&body, "comment")?,
    };
    let (_, run) = find(&ctx, &id).await?;
    match approvals::send(&ctx.client, &ctx.ns, &run, &decision, ctx.signer.as_ref()).await? {
        Ok(message) => Ok(json_response(
            StatusCode::OK,
            &json!({"recorded": true, "message": message}),
        )),
        Err(why) => Err(refused(why)),
    }
}
