//! The web view's routes that steer a run (documented in `docs/http.md`): `POST
//! /api/runs/{id}/cancel`, `/pause`, `/resume`, `/retry`, `/approve`, `/reject` and
//! `/signal`. Each
//! calls [`crate::ops`] with the web view's key; a refusal becomes the status its kind
//! maps to (403 who asks, 409 the run's state, 503 nothing serves the workflow).

use std::time::Duration;

use agent_sdk::Timing;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use messages::control::RunControl;
use serde_json::json;

use super::api::{find, object, text};
use super::{json_response, ApiError, ApiResult, Ctx};
use crate::ops::approvals::{self, Decided};
use crate::ops::signals::{self, Outgoing, To};
use crate::ops::steer;
use agent_sdk::workflow::new_task_id;

/// How long a retry waits for the workflow to accept the new run.
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// `202 {"cancel": "requested", "message"}`.
pub(super) async fn cancel(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body = object(&body)?;
    let reason = text(&body, "reason")?;
    let (runs, run) = find(&ctx, &id).await?;
    let message = steer::cancel(&runs, &run, reason, ctx.signer.as_ref()).await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({"cancel": "requested", "message": message}),
    ))
}

pub(super) async fn pause(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    control(ctx, id, body, RunControl::Pause).await
}

pub(super) async fn resume(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    control(ctx, id, body, RunControl::Resume).await
}

/// `202 {"pause"|"resume": "recorded", "message"}`.
async fn control(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
    action: RunControl,
) -> ApiResult {
    let body = object(&body)?;
    let reason = text(&body, "reason")?;
    let (runs, run) = find(&ctx, &id).await?;
    let signer = ctx.signer.as_ref();
    let message = steer::control(&runs, &run, action, reason, signer).await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({action.as_str(): "recorded", "message": message}),
    ))
}

/// `202 {"execution_id", "retry_of"}` once the workflow accepted the new run.
pub(super) async fn retry(State(ctx): State<Ctx>, Path(id): Path<String>) -> ApiResult {
    let (runs, run) = find(&ctx, &id).await?;
    let timing = Timing::new(RETRY_TIMEOUT);
    let signer = ctx.signer.clone();
    let execution = steer::retry(&runs, &run, &new_task_id(), signer, timing).await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({"execution_id": execution.0, "retry_of": run.execution.0}),
    ))
}

pub(super) async fn approve(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    decide(ctx, id, body, true).await
}

pub(super) async fn reject(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    decide(ctx, id, body, false).await
}

/// `200 {"recorded": true, "message"}`.
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
    let decision = Decided {
        node,
        approve,
        by: text(&body, "by")?,
        comment: text(&body, "comment")?,
    };
    let (runs, run) = find(&ctx, &id).await?;
    let message = approvals::decide(&runs, &run, decision, ctx.signer.as_ref()).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"recorded": true, "message": message}),
    ))
}

/// `200 {"recorded": true, "message"}`: body `{"signal", "data", "signal_id"}`.
pub(super) async fn signal(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body = object(&body)?;
    let Some(name) = text(&body, "signal")? else {
        return Err(ApiError::bad_request(
            "'signal' is required: the name a wait node waits for",
        ));
    };
    let outgoing = Outgoing {
        name: name.to_owned(),
        data: body.get("data").cloned().unwrap_or_default(),
        signal_id: text(&body, "signal_id")?.map(str::to_owned),
        by: text(&body, "by")?.map(str::to_owned),
    };
    let (runs, run) = find(&ctx, &id).await?;
    let message = signals::send(&runs, To::Run(&run), &outgoing, ctx.signer.as_ref()).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"recorded": true, "message": message}),
    ))
}
