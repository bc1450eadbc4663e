//! The web view: a JSON API over the mesh's cards and runs, and an event stream of a run's
//! progress (`docs/http.md`), served by `workflow-node serve --http ADDR` or on its own by
//! `workflow-node ui`. It reads what the `runs` commands read (the runs bucket and history
//! stream, [`crate::shell::store::inspect`]); starts, cancels and decisions go to the workflow's
//! nodes as the CLI sends them, signed by the key given with `--nkey-seed-file`.

mod access;
mod api;
mod cards;
mod events;
mod pages;
mod steer;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::net::TcpListener;

pub use access::{Access, AccessArgs};

use super::connect::{connect, NatsArgs};

/// Arguments of `ui`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to serve the pages and the API (port 0 picks a free one, printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub http: SocketAddr,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// The key the starts, cancels and decisions sent from the web view are signed with.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
    /// Who may use the API.
    #[command(flatten)]
    pub access: AccessArgs,
}

/// Runs `ui`: serves the web view until SIGINT/SIGTERM.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        if args.nats.nats_url.is_none() {
            return super::runs::refuse(
                "a fresh embedded server has no mesh to show: give --nats-url (or NATS_URL)",
            );
        }
        let signer = args.sign.signer()?;
        let access = Access::new(&args.access)?;
        if let Err(why) = access.check_bind(args.http) {
            return super::runs::refuse(why);
        }
        let conn = connect(&args.nats).await?;
        let ns = &args.nats.namespace;
        let web = Web::start(conn.client.clone(), ns, signer, access, args.http).await?;
        eprintln!("web view at http://{}/", web.addr());
        agent_sdk::health::signalled().await?;
        drop(web);
        conn.close().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// What every handler reads: the connection, the namespace, the signing key, the cards.
#[derive(Clone)]
struct Ctx {
    client: async_nats::Client,
    ns: String,
    signer: Option<agent_sdk::Signer>,
    cards: Arc<cards::Cards>,
}

/// A running web view; dropping it stops it.
#[derive(Debug)]
pub struct Web {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    _cards: Arc<cards::Cards>,
}

impl Web {
    /// Binds `addr`, starts following the mesh's cards and serves the API (on `client`, in
    /// namespace `ns`; what it sends is signed by `signer`; who may use it, `access`). An
    /// open API on an address that is not loopback is refused.
    pub async fn start(
        client: async_nats::Client,
        ns: &str,
        signer: Option<agent_sdk::Signer>,
        access: Access,
        addr: SocketAddr,
    ) -> Result<Web> {
        access.check_bind(addr)?;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the web view at {addr}"))?;
        let addr = listener.local_addr()?;
        let cards = Arc::new(cards::follow(client.clone(), ns).await?);
        let watch = cards.clone();
        let ctx = Ctx {
            client,
            ns: ns.to_owned(),
            signer,
            cards,
        };
        let app =
            api::router(ctx).layer(axum::middleware::from_fn_with_state(access, access::check));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("the web view stopped: {e}");
            }
        });
        Ok(Web {
            addr,
            task,
            _cards: watch,
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        self.task.abort();
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

    fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        ApiError::new(StatusCode::BAD_GATEWAY, format!("{e:#}"))
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
