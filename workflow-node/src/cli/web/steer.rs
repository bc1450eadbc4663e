//! The web view's routes that steer a run (issue 17): `POST /api/runs/{id}/pause`,
//! `/resume` and `/retry` (documented in `docs/http.md`). Each goes to the workflow's nodes,
//! signed with the web view's key, and they check who asks as for a cancel.

use std::time::Duration;

use agent_sdk::Timing;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use messages::control::RunControl;
use serde_json::json;

use super::api::{find, object, refused, text};
use super::{json_response, ApiError, ApiResult, Ctx};
use crate::cli::steer;

/// How long a retry waits for the workflow to accept the new run.
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) async fn pause(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    control(ctx, id, body, RunControl::Pause).await
}

pub(super) async fn resume(ctx: State<Ctx>, id: Path<String>, body: Bytes) -> ApiResult {
    control(ctx, id, body, RunControl::Resume).await
}

/// `202 {"pause"|"resume": "recorded", "message"}`; 409 when the run ended or is already
/// (not) paused, 403 when the key may not.
async fn control(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
    action: RunControl,
) -> ApiResult {
    let body = object(&body)?;
    let reason = text(&body, "reason")?;
    let (_, run) = find(&ctx, &id).await?;
    let signer = ctx.signer.as_ref();
    match steer::send_control(&ctx.client, &ctx.ns, &run, action, reason, signer).await? {
        Ok(message) => Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({action.as_str(): "recorded", "message": message}),
        )),
        Err(why) => Err(refused(why)),
    }
}

/// `202 {"execution_id", "retry_of"}` once the workflow accepted the new run; 409 when the
/// run has not ended, or succeeded.
pub(super) async fn retry(State(ctx): State<Ctx>, Path(id): Path<String>) -> ApiResult {
    let (_, run) = find(&ctx, &id).await?;
    if !run.record.state.retryable() {
        return Err(ApiError::conflict(format!(
            "run {} is {}: only a run that ended without success can be retried",
            run.execution,
            run.record.state.shown_status()
        )));
    }
    let timing = Timing {
        timeout: RETRY_TIMEOUT,
        resend_interval: Duration::from_secs(3),
    };
    let signer = ctx.signer.clone();
    match steer::send_retry(&ctx.client, &ctx.ns, &run, signer, timing).await? {
        Ok(execution) => Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({"execution_id": execution.0, "retry_of": run.execution.0}),
        )),
        Err(why) => Err(refused(why)),
    }
}
