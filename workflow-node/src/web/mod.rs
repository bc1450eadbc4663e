//! The web view: a JSON API over the mesh's cards and runs, and an event stream of a run's
//! progress (`docs/http.md`), served by `workflow-node serve --http ADDR` or on its own by
//! `workflow-node ui`. A face beside the CLI: both call [`crate::ops`], and the view maps
//! an operation's refusal to an HTTP status by its kind. What it sends is signed by the key
//! it is started with. The A2A door ([`a2a`]) is served beside it, on the same server.

mod a2a;
mod access;
mod api;
mod boundary;
mod cards;
mod events;
mod hooks;
mod pages;
mod steer;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::net::TcpListener;

pub use access::{Access, AccessArgs};

use crate::doors::mcp::McpArgs;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::runs::Runs;

/// What every handler reads: the connection, the namespace, the signing key, the cards.
#[derive(Clone)]
struct Ctx {
    client: async_nats::Client,
    ns: String,
    signer: Option<agent_sdk::Signer>,
    cards: Arc<cards::Cards>,
    access: Access,
    /// The A2A streams that may be open at once (see `a2a::MAX_STREAMS`).
    streams: Arc<tokio::sync::Semaphore>,
}

impl Ctx {
    /// The runs of the namespace, opened for one request.
    async fn runs(&self) -> Result<Runs, ApiError> {
        Ok(Runs::open(self.client.clone(), &self.ns).await?)
    }
}

/// A running web view; dropping it stops it.
#[derive(Debug)]
pub struct Web {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    pusher: tokio::task::JoinHandle<()>,
    _cards: Arc<cards::Cards>,
}

impl Web {
    /// Binds `addr`, starts following the mesh's cards and serves the API (on `client`, in
    /// namespace `ns`; what it sends is signed by `signer`; who may use it, `access`). An
    /// open API on an address that is not loopback is refused. Cards are judged by the
    /// default `CardTrust` (see [`Web::start_trusting`]).
    pub async fn start(
        client: async_nats::Client,
        ns: &str,
        signer: Option<agent_sdk::Signer>,
        access: Access,
        addr: SocketAddr,
    ) -> Result<Web> {
        let trust = agent_sdk::CardTrust::default();
        Web::start_trusting(client, ns, signer, access, addr, trust).await
    }

    /// [`Web::start`] whose cards count only when signed as `cards` says.
    pub async fn start_trusting(
        client: async_nats::Client,
        ns: &str,
        signer: Option<agent_sdk::Signer>,
        access: Access,
        addr: SocketAddr,
        cards: agent_sdk::CardTrust,
    ) -> Result<Web> {
        let mcp = McpArgs::default();
        Web::start_with_mcp(client, ns, signer, access, addr, cards, mcp).await
    }

    /// [`Web::start_trusting`] whose MCP door (`/mcp`) serves the tools `mcp` says.
    pub async fn start_with_mcp(
        client: async_nats::Client,
        ns: &str,
        signer: Option<agent_sdk::Signer>,
        access: Access,
        addr: SocketAddr,
        cards: agent_sdk::CardTrust,
        mcp: McpArgs,
    ) -> Result<Web> {
        access.check_bind(addr)?;
        let door = mcp_door(&client, ns, signer.clone(), cards.clone(), mcp).await?;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the web view at {addr}"))?;
        let addr = listener.local_addr()?;
        let cards = Arc::new(cards::follow(client.clone(), ns, cards).await?);
        let watch = cards.clone();
        let pusher = tokio::spawn(a2a::pusher(&client, ns, &signer, &access).run());
        let ctx = Ctx {
            client,
            ns: ns.to_owned(),
            signer,
            cards,
            access: access.clone(),
            streams: Arc::new(tokio::sync::Semaphore::new(a2a::MAX_STREAMS)),
        };
        // The boundary is the outer layer: a request from another page is refused before
        // its token is looked at.
        let boundary = boundary::Boundary::new(addr, access.public_hosts());
        let app = api::router(ctx)
            .nest_service("/mcp", crate::doors::mcp::http_service(door))
            .layer(axum::middleware::from_fn_with_state(access, access::check))
            .layer(axum::middleware::from_fn_with_state(
                boundary,
                boundary::check,
            ));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("the web view stopped: {e}");
            }
        });
        Ok(Web {
            addr,
            task,
            pusher,
            _cards: watch,
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The MCP door of a view: calls signed by the view's key, cards trusted as its own.
async fn mcp_door(
    client: &async_nats::Client,
    ns: &str,
    signer: Option<agent_sdk::Signer>,
    cards: agent_sdk::CardTrust,
    args: McpArgs,
) -> Result<crate::doors::mcp::Door> {
    let mut mesh = agent_sdk::Mesh::new(client.clone())
        .namespace(ns)?
        .card_trust(cards);
    if let Some(signer) = signer {
        mesh = mesh.signer(signer);
    }
    crate::doors::mcp::Door::open(mesh, args).await
}

impl Drop for Web {
    fn drop(&mut self) {
        self.task.abort();
        self.pusher.abort();
    }
}

/// An answer of the API that is not a success: its status, and a message saying what is
/// wrong (`{"error": "..."}`).
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        ApiError::new(StatusCode::BAD_GATEWAY, format!("{e:#}"))
    }
}

/// The HTTP status of an operation's refusal of `kind`.
fn status_of(kind: RefusalKind) -> StatusCode {
    match kind {
        RefusalKind::NotFound => StatusCode::NOT_FOUND,
        RefusalKind::NotPermitted => StatusCode::FORBIDDEN,
        RefusalKind::Conflict => StatusCode::CONFLICT,
        RefusalKind::NoResponder => StatusCode::SERVICE_UNAVAILABLE,
        RefusalKind::Invalid => StatusCode::BAD_REQUEST,
        RefusalKind::Unavailable | RefusalKind::Failed => StatusCode::BAD_GATEWAY,
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        ApiError::new(status_of(r.kind), r.message)
    }
}

impl From<crate::shell::Error> for ApiError {
    fn from(e: crate::shell::Error) -> ApiError {
        ApiError::new(StatusCode::BAD_GATEWAY, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.status, &json!({"error": self.message}))
    }
}

/// `value` as a JSON answer with `status`.
fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// What a handler answers.
type ApiResult = std::result::Result<Response, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use messages::jsonrpc::{codes, ErrorObject};

    #[test]
    fn each_refusal_kind_has_its_status() {
        let cases = [
            (RefusalKind::NotFound, 404),
            (RefusalKind::NotPermitted, 403),
            (RefusalKind::Conflict, 409),
            (RefusalKind::NoResponder, 503),
            (RefusalKind::Invalid, 400),
            (RefusalKind::Unavailable, 502),
            (RefusalKind::Failed, 502),
        ];
        for (kind, status) in cases {
            assert_eq!(status_of(kind).as_u16(), status, "{kind:?}");
        }
    }

    #[test]
    fn the_nodes_code_decides_the_status_not_its_words() {
        let status = |code, message: &str| {
            let r = Refusal::from_node(&ErrorObject::new(code, message));
            ApiError::from(r).status.as_u16()
        };
        // Words that once meant "forbidden" or "unavailable" decide nothing.
        assert_eq!(status(codes::TASK_NOT_CANCELABLE, "signature may not"), 409);
        assert_eq!(status(codes::NOT_PERMITTED, "already ended"), 403);
        assert_eq!(
            status(codes::TASK_NOT_FOUND, "no workflow node serves"),
            404
        );
        assert_eq!(status(codes::INVALID_PARAMS, "x"), 400);
        assert_eq!(status(codes::INTERNAL_ERROR, "x"), 502);
    }
}
