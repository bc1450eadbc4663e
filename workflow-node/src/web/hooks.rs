//! `POST /hooks/{name}`: the HTTP door of webhook triggers. The door holds no secret and
//! knows no workflow: it bounds the body (413), forwards the raw body and the request's
//! headers (not the view's own credentials) to `{ns}.a2a.v1.hook.{name}`, where the node
//! that declares the hook checks the signature and starts the run, and answers what the
//! node answers (`messages::hooks::HookAnswer`). No node declaring the hook is a 404. The
//! view's tokens do not apply: the signature is the delivery's credential.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use messages::hooks::{HookAnswer, MAX_BODY, MAX_HEADERS, MAX_HEADER_VALUE, NOT_FORWARDED};
use messages::subjects;
use serde_json::json;

use super::{json_response, ApiError, ApiResult, Ctx};

/// How long the door waits for the node's answer (a start is stored, then answered).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// The route.
pub(super) fn router() -> Router<Ctx> {
    Router::new().route("/hooks/{name}", post(deliver))
}

async fn deliver(State(ctx): State<Ctx>, Path(name): Path<String>, request: Request) -> ApiResult {
    if subjects::validate_token(&name).is_err() || name.len() > 64 {
        return Err(ApiError::not_found(format!("no webhook named '{name}'")));
    }
    let (parts, body) = request.into_parts();
    let too_large = || {
        let why = format!("the body is larger than {MAX_BODY} bytes");
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, why)
    };
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let body = axum::body::to_bytes(Body::new(body), MAX_BODY)
        .await
        .map_err(|_| too_large())?;
    let headers = forwarded(&parts.headers);
    let subject = subjects::hook(&ctx.ns, &name);
    let asked = ctx.client.request_with_headers(subject, headers, body);
    let reply = match tokio::time::timeout(ANSWER_TIMEOUT, asked).await {
        Err(_) => {
            let why = "the workflow node did not answer in time";
            return Err(ApiError::new(StatusCode::GATEWAY_TIMEOUT, why));
        }
        Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
            return Err(ApiError::not_found(format!("no webhook named '{name}'")));
        }
        Ok(Err(e)) => return Err(ApiError::new(StatusCode::BAD_GATEWAY, e.to_string())),
        Ok(Ok(reply)) => reply,
    };
    let answer: HookAnswer = serde_json::from_slice(&reply.payload)
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, format!("the node's answer: {e}")))?;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut body = json!({});
    for (key, value) in [
        ("workflow", answer.workflow.map(Into::into)),
        ("run_id", answer.run_id.map(Into::into)),
        ("duplicate", answer.duplicate.then_some(true.into())),
        ("error", answer.error.map(Into::into)),
    ] {
        if let Some(v) = value {
            body[key] = v;
        }
    }
    Ok(json_response(status, &body))
}

/// The request's headers as NATS headers: each a visible-ASCII value of at most
/// [`MAX_HEADER_VALUE`] bytes, at most [`MAX_HEADERS`] of them, never the view's
/// credentials ([`NOT_FORWARDED`]).
fn forwarded(headers: &axum::http::HeaderMap) -> async_nats::HeaderMap {
    let mut out = async_nats::HeaderMap::new();
    let usable = headers.iter().filter(|(name, value)| {
        !NOT_FORWARDED.contains(&name.as_str())
            && value.len() <= MAX_HEADER_VALUE
            && value.as_bytes().iter().all(|b| (0x20..0x7f).contains(b))
    });
    for (name, value) in usable.take(MAX_HEADERS) {
        // Checked above: visible ASCII.
        let value = value.to_str().unwrap_or_default();
        out.append(name.as_str(), value);
    }
    out
}
