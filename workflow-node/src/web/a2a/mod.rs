//! The A2A door: every workflow and agent of the live catalog served over HTTP with A2A's
//! JSON-RPC binding, 0.3 and 1.0 (`docs/a2a.md`), on the web view's server. A name's
//! card is at `/a2a/{name}/.well-known/agent-card.json`, its endpoint is `POST
//! /a2a/{name}`.
//!
//! Who may: the web view's tokens (`docs/http.md`). With tokens on, every call needs one
//! (401 otherwise); a read token may get, resubscribe and list, as it may read every run
//! in the web view; sending and cancelling take an operator token (403), as starting and
//! cancelling do there. What the door sends onto the mesh is signed with the HTTP side's
//! key, as the web view's starts and cancels are, and the workflow nodes check it as
//! they check every caller's. The card itself is served without a token: it is what
//! tells a client to bring one.
//!
//! A body is read only up to [`MAX_BODY`] (413 past it), at most [`MAX_STREAMS`] streams
//! are open at once, and must be JSON (the boundary
//! answers 415 otherwise). Files: [`rpc`] reads the envelope, [`tasks`] answers, [`stream`]
//! streams, [`signal`] takes a message on a task that waits for a signal, [`push`] keeps
//! push configs and sends their notifications, [`v1`] writes
//! 1.0's shapes, [`card`] the card.

mod card;
mod push;
mod rpc;
mod signal;
mod stream;
mod tasks;
mod v1;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use messages::jsonrpc::codes;
use serde_json::{json, Value};

use self::rpc::{Call, Op, RpcError, Version};
use super::{json_response, ApiError, Ctx};
use crate::ops::call::Callee;

/// The largest request body read (1 MiB): a larger input goes to a workflow through the
/// object store, not in a message.
pub(super) const MAX_BODY: usize = 1 << 20;

/// At most this many A2A streams are open at once; more are refused (503, -32603) so that
/// readers who never leave cannot take the server.
pub(super) const MAX_STREAMS: usize = 256;

/// The push notifications' sender of a door on `client`, in `ns`.
pub(super) fn pusher(
    client: &async_nats::Client,
    ns: &str,
    signer: &Option<agent_sdk::Signer>,
    access: &super::Access,
) -> push::deliver::Pusher {
    push::deliver::Pusher {
        client: client.clone(),
        ns: ns.to_owned(),
        signer: signer.clone(),
        allow_private: access.push_allows_private(),
        ca: access.push_ca().cloned(),
        lease: access.push_lease(),
        holder: uuid::Uuid::new_v4().simple().to_string(),
    }
}

/// The door's routes.
pub(super) fn router() -> Router<Ctx> {
    Router::new()
        .route("/a2a/{name}", post(rpc_call))
        .route("/a2a/{name}/.well-known/agent-card.json", get(card_of))
        .route("/a2a/{name}/.well-known/agent.json", get(card_of))
}

/// The callee `name` names in the live catalog.
fn callee(ctx: &Ctx, name: &str) -> Option<(Callee, messages::card::AgentCard)> {
    messages::subjects::validate_token(name).ok()?;
    let (card, _) = ctx.cards.get(name)?;
    Some((Callee::of(&card), card))
}

async fn card_of(State(ctx): State<Ctx>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let Some((_, card)) = callee(&ctx, &name) else {
        return ApiError::not_found(format!("no workflow or agent named {name:?} on the mesh"))
            .into_response();
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    // Behind a TLS-terminating proxy the card names https (a client that sends the header
    // itself changes only the card it reads).
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|p| p.to_str().ok())
    {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    let base = format!("{scheme}://{host}/a2a/{name}");
    let v = card::http_card(&card, &base, ctx.access.enabled());
    json_response(StatusCode::OK, &v)
}

/// An error as an HTTP answer.
fn answer_error(e: &RpcError) -> Response {
    let mut r = json_response(e.status, &e.body());
    if e.status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    r
}

async fn rpc_call(
    State(ctx): State<Ctx>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match serve(ctx, &name, &headers, body).await {
        Ok(r) => r,
        Err(e) => answer_error(&e),
    }
}

/// Reads, checks and answers one call.
async fn serve(
    ctx: Ctx,
    name: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, RpcError> {
    let null = Value::Null;
    let role = ctx.access.role_of_headers(headers);
    if ctx.access.enabled() && role.is_none() {
        return Err(RpcError::new(
            &null,
            codes::NOT_PERMITTED,
            "this agent needs a token: Authorization: Bearer TOKEN",
        )
        .with_status(StatusCode::UNAUTHORIZED));
    }
    let body = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        RpcError::new(
            &null,
            codes::INVALID_REQUEST,
            format!("the request is larger than {MAX_BODY} bytes"),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE)
    })?;
    let call = rpc::read(headers, &body)?;
    if call.op.changes() && ctx.access.enabled() && !role.is_some_and(|r| r.may_operate()) {
        return Err(RpcError::new(
            &call.id,
            codes::NOT_PERMITTED,
            "a read token may get, resubscribe and list tasks: sending and cancelling take an \
             operator token",
        )
        .with_status(StatusCode::FORBIDDEN));
    }
    let Some((callee, _)) = callee(&ctx, name) else {
        return Err(RpcError::new(
            &call.id,
            codes::INVALID_REQUEST,
            format!("no workflow or agent named {name:?} on the mesh"),
        )
        .with_status(StatusCode::NOT_FOUND));
    };
    dispatch(ctx, callee, call).await
}

async fn dispatch(ctx: Ctx, callee: Callee, call: Call) -> Result<Response, RpcError> {
    let Call { id, version, op } = call;
    let result = match op {
        Op::Stream { params, push } => {
            return stream::send(ctx, callee, &id, version, params, push).await
        }
        Op::Resubscribe { id: task } => {
            return stream::resubscribe(ctx, callee, &id, version, task).await
        }
        Op::Send {
            params,
            blocking,
            push,
        } => {
            let push = push.map(|p| (p, version));
            let reply = tasks::send(&ctx, &callee, &id, params, blocking, push).await?;
            match version {
                Version::V03 => reply,
                Version::V10 => v1::send_result(&reply),
            }
        }
        Op::Get { id: task } => tasks::get(&ctx, &callee, &id, &task)
            .await
            .map(|t| written(t, version))?,
        Op::Cancel { id: task, reason } => {
            tasks::cancel(&ctx, &callee, &id, &task, reason.as_deref())
                .await
                .map(|t| written(t, version))?
        }
        Op::List { page_size } => {
            let mut listed = tasks::list(&ctx, &callee, &id, page_size).await?;
            if let Some(tasks) = listed["tasks"].as_array_mut() {
                for t in tasks.iter_mut() {
                    *t = v1::task(t);
                }
            }
            listed
        }
        Op::Push(op) => push::serve(&ctx, &callee, &id, version, op).await?,
        Op::ExtendedCard => {
            return Err(RpcError::new(
                &id,
                codes::AUTHENTICATED_EXTENDED_CARD_NOT_CONFIGURED,
                "there is no extended card: the public card says everything",
            ))
        }
    };
    let v = json!({"jsonrpc": "2.0", "id": id, "result": result});
    Ok(json_response(StatusCode::OK, &v))
}

/// A task in the request's version.
fn written(task: Value, version: Version) -> Value {
    match version {
        Version::V03 => task,
        Version::V10 => v1::task(&task),
    }
}
