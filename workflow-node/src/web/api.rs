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
use crate::core::{ExecutionId, Millis};
use crate::definition::Workflow;
use crate::ops::definition;
use crate::ops::refusal::RefusalKind;
use crate::ops::runs::{Filter, RunRef, Runs, StatusFilter};
use crate::ops::view::{self, rfc3339};
use crate::shell::now;
use crate::shell::FoundRun;
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
        .route("/api/runs/{id}/cancel", post(super::steer::cancel))
        .route("/api/runs/{id}/pause", post(super::steer::pause))
        .route("/api/runs/{id}/resume", post(super::steer::resume))
        .route("/api/runs/{id}/retry", post(super::steer::retry))
        .route("/api/runs/{id}/approve", post(super::steer::approve))
        .route("/api/runs/{id}/reject", post(super::steer::reject))
        .route("/api/runs/{id}/signal", post(super::steer::signal))
        .route("/api/workflows/{name}/runs", post(start))
        .route("/api/schedules", get(list_schedules))
        .route("/api/dead-letters", get(list_dead_letters))
        .route("/api/triggers", get(list_triggers))
        .merge(super::pages::router())
        .merge(super::hooks::router())
        .merge(super::a2a::router())
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
        "last_seen": rfc3339(Some(seen)),
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
    let card = crate::shell::full_card(&ctx.client, &ctx.ns, card).await?;
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

/// The run `id` names (an execution id), or a 404 saying there is none.
pub(super) async fn find(ctx: &Ctx, id: &str) -> Result<(Runs, FoundRun), ApiError> {
    let runs = ctx.runs().await?;
    let run = runs.find(RunRef::id(id)).await?;
    Ok((runs, run))
}

/// The status filter `text` names, as `runs list --status` reads it (a paused run is
/// `paused`, whatever its status below the pause).
fn status_named(text: &str) -> Result<StatusFilter, ApiError> {
    <StatusFilter as clap::ValueEnum>::from_str(text, false).map_err(|_| {
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
    let filter = Filter {
        workflow: q.get("workflow").map(String::as_str),
        status,
        since,
        limit,
    };
    let listed = ctx.runs().await?.list(&filter).await?;
    let rows: Vec<Value> = listed
        .runs
        .iter()
        .map(|r| view::summary(r, listed.now))
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Array(rows)))
}

/// The triggers (of `?workflow=`, when given) with their lag and dead letters.
async fn list_triggers(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> ApiResult {
    let q = params(query.as_deref(), &["workflow"])?;
    let runs = ctx.runs().await?;
    let found =
        crate::ops::trigger_view::list(&runs, q.get("workflow").map(String::as_str)).await?;
    Ok(json_response(StatusCode::OK, &json!(found)))
}

/// The schedules (of `?workflow=`, when given) with their next fire times: what
/// `workflow-node schedules list --json` prints.
async fn list_schedules(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> ApiResult {
    let q = params(query.as_deref(), &["workflow"])?;
    let runs = ctx.runs().await?;
    let workflow = q.get("workflow").map(String::as_str);
    let found =
        crate::ops::schedules::list(runs.client(), runs.namespace(), workflow, now().0).await?;
    Ok(json_response(StatusCode::OK, &json!(found)))
}

/// The dead letters of event triggers (of `?workflow=`, when given): what `workflow-node
/// triggers dead-letters --json` prints.
async fn list_dead_letters(State(ctx): State<Ctx>, RawQuery(query): RawQuery) -> ApiResult {
    let q = params(query.as_deref(), &["workflow"])?;
    let runs = ctx.runs().await?;
    let workflow = q.get("workflow").map(String::as_str);
    let found = crate::ops::triggers::list(runs.client(), runs.namespace(), workflow).await?;
    Ok(json_response(StatusCode::OK, &json!(found)))
}

/// The definition `run` was made with, when it can be had (why not is logged).
pub(super) async fn definition_of(
    runs: &Runs,
    run: &FoundRun,
    trust: &agent_sdk::CardTrust,
) -> Option<Workflow> {
    let found = definition::of_run(runs.client(), runs.namespace(), run, None, trust).await;
    for note in &found.notes {
        tracing::debug!("run {}: {note}", run.execution);
    }
    found.workflow
}

/// The run as the API shows it: `runs show --json`, with the workflow's diagram coloured
/// by status when its definition `def` is at hand.
pub(super) async fn run_view(
    runs: &Runs,
    run: &FoundRun,
    def: Option<&Workflow>,
) -> Result<Value, ApiError> {
    let apart = runs.apart(run).await?;
    let mut v = view::view(run, &apart, def, now());
    v["mermaid"] = json!(def.map(|d| {
        let status = view::statuses_of(run, d);
        crate::visual::mermaid_with_status(d, &status)
    }));
    Ok(v)
}

async fn get_run(State(ctx): State<Ctx>, Path(id): Path<String>) -> ApiResult {
    let (runs, run) = find(&ctx, &id).await?;
    let def = definition_of(&runs, &run, ctx.cards.trust()).await;
    let v = run_view(&runs, &run, def.as_ref()).await?;
    Ok(json_response(StatusCode::OK, &v))
}

async fn run_history(State(ctx): State<Ctx>, Path(id): Path<String>) -> ApiResult {
    let (runs, run) = find(&ctx, &id).await?;
    let entries = runs.history(&run).await?;
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
    // The name becomes a subject: one too long for the server would cost the connection.
    messages::subjects::validate_token(&name)
        .map_err(|e| ApiError::bad_request(format!("no workflow can be named so: {e}")))?;
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
        priority: None,
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
            let which = RunRef {
                id: &task_id,
                workflow: Some(&name),
                caller: None,
            };
            match ctx.runs().await?.find(which).await {
                Ok(run) => run.execution.0,
                // Answered at once without a run: the start was refused (its input, say).
                Err(r) if r.kind == RefusalKind::NotFound => {
                    return Err(ApiError::bad_request(format!(
                        "{name} refused the run: {text}"
                    )))
                }
                Err(r) => return Err(r.into()),
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
        let runs = ctx.runs().await?;
        let Some(inspector) = runs.inspector() else {
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
