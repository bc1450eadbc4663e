//! Who may use the web view's API: bearer tokens in two roles. A read token may read cards
//! and runs and follow a run's events; an operator token may also start, cancel, approve
//! and reject. With no token configured the API is open, which is allowed only on a
//! loopback address ([`Access::check_bind`]). The pages themselves (HTML, script, Mermaid)
//! hold no data and are always served; they ask for a token when the API wants one.
//!
//! A token goes in `Authorization: Bearer TOKEN`, or, for an event stream (a browser's
//! `EventSource` sets no headers), as the `access_token` query parameter. Which host and
//! origin a request may come from is decided before, by `boundary.rs`.

use std::net::SocketAddr;

use anyhow::{bail, Result};
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::ApiError;

/// The tokens of the web view and the names it is served under, as `serve --http` and
/// `ui` take them.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AccessArgs {
    /// A token that may read cards and runs over HTTP (repeatable; comma-separated in the
    /// environment variable).
    #[arg(
        long = "http-read-token",
        value_name = "TOKEN",
        env = "MESH_HTTP_READ_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub read_tokens: Vec<String>,
    /// A token that may also start, cancel, approve and reject over HTTP (repeatable).
    #[arg(
        long = "http-operator-token",
        value_name = "TOKEN",
        env = "MESH_HTTP_OPERATOR_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub operator_tokens: Vec<String>,
    /// A name the view is also served under, besides loopback names and the address it
    /// is bound to (the name a proxy serves it as; repeatable): requests naming any other
    /// host are refused.
    #[arg(
        long = "public-host",
        value_name = "NAME",
        env = "MESH_HTTP_PUBLIC_HOSTS",
        value_delimiter = ','
    )]
    pub public_hosts: Vec<String>,
    /// Let the A2A door send push notifications to loopback and private addresses (for
    /// tests and closed networks; by default only public addresses are sent to).
    #[arg(long = "push-allow-private", env = "MESH_HTTP_PUSH_ALLOW_PRIVATE")]
    pub push_allow_private: bool,
    /// How long a door replica's claim on a push notification holds without renewal
    /// (milliseconds; 30000 by default): another replica sends the notification once the
    /// claimant has been silent that long (it died or lost NATS).
    #[arg(
        long = "push-lease-ms",
        value_name = "MS",
        env = "MESH_HTTP_PUSH_LEASE_MS",
        value_parser = clap::value_parser!(u64).range(100..=600_000)
    )]
    pub push_lease_ms: Option<u64>,
    /// A CA file (PEM) the certificates of `https://` webhooks must chain to, instead of
    /// the system's roots (receivers with a private CA).
    #[arg(
        long = "push-ca-file",
        value_name = "PEM",
        env = "MESH_HTTP_PUSH_CA_FILE"
    )]
    pub push_ca_file: Option<std::path::PathBuf>,
}

/// A push notification's claim holds this long without renewal unless `--push-lease-ms`
/// says otherwise.
const DEFAULT_PUSH_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Role {
    /// Read cards and runs, follow a run.
    Read,
    /// Also start, cancel and decide.
    Operate,
}

impl Role {
    /// Whether it may start, cancel and decide.
    pub(super) fn may_operate(self) -> bool {
        self == Role::Operate
    }
}

/// The tokens the API accepts (their SHA-256, compared digest to digest).
#[derive(Debug, Clone, Default)]
pub struct Access {
    tokens: Vec<([u8; 32], Role)>,
    public_hosts: Vec<String>,
    push_allow_private: bool,
    push_lease: std::time::Duration,
    push_ca: Option<agent_sdk::crypto::CaFile>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Access {
    /// The access `args` describe; an empty token, or a push CA file that cannot be read,
    /// is refused.
    pub fn new(args: &AccessArgs) -> Result<Access> {
        let mut tokens = Vec::new();
        for (list, role, flag) in [
            (&args.read_tokens, Role::Read, "--http-read-token"),
            (
                &args.operator_tokens,
                Role::Operate,
                "--http-operator-token",
            ),
        ] {
            for t in list {
                if t.trim().is_empty() {
                    bail!("{flag}: a token cannot be empty");
                }
                tokens.push((digest(t.trim()), role));
            }
        }
        Ok(Access {
            tokens,
            public_hosts: args.public_hosts.clone(),
            push_allow_private: args.push_allow_private,
            push_lease: args
                .push_lease_ms
                .map_or(DEFAULT_PUSH_LEASE, std::time::Duration::from_millis),
            push_ca: match &args.push_ca_file {
                Some(path) => Some(
                    agent_sdk::crypto::CaFile::read(path)
                        .map_err(|e| anyhow::anyhow!("--push-ca-file: {e}"))?,
                ),
                None => None,
            },
        })
    }

    /// The names given with `--public-host`.
    pub(super) fn public_hosts(&self) -> &[String] {
        &self.public_hosts
    }

    /// Whether push notifications may go to loopback and private addresses.
    pub(super) fn push_allows_private(&self) -> bool {
        self.push_allow_private
    }

    /// The CA file `https://` webhooks' certificates must chain to, if one was given.
    pub(super) fn push_ca(&self) -> Option<&agent_sdk::crypto::CaFile> {
        self.push_ca.as_ref()
    }

    /// How long a claim on a push notification holds without renewal.
    pub(super) fn push_lease(&self) -> std::time::Duration {
        if self.push_lease.is_zero() {
            DEFAULT_PUSH_LEASE
        } else {
            self.push_lease
        }
    }

    /// Whether any token is required.
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Refuses to serve an open API on an address other machines can reach.
    pub fn check_bind(&self, addr: SocketAddr) -> Result<()> {
        if !self.enabled() && !addr.ip().is_loopback() {
            bail!(
                "the web view at {addr} would be open to anyone who reaches it: give \
                 --http-operator-token (and --http-read-token), or bind it to a loopback \
                 address such as 127.0.0.1"
            );
        }
        Ok(())
    }

    /// The role of the token in `headers`' `Authorization: Bearer`, if it is known.
    pub(super) fn role_of_headers(&self, headers: &axum::http::HeaderMap) -> Option<Role> {
        let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        self.role_of(v.strip_prefix("Bearer ")?.trim())
    }

    fn role_of(&self, token: &str) -> Option<Role> {
        let d = digest(token);
        self.tokens
            .iter()
            .filter(|(t, _)| *t == d)
            .map(|(_, r)| *r)
            .max()
    }
}

/// The token a request carries, if any.
fn token(request: &Request) -> Option<String> {
    if let Some(v) = request.headers().get(header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        return v.strip_prefix("Bearer ").map(|t| t.trim().to_owned());
    }
    let query = request.uri().query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "access_token")
        .map(|(_, v)| v.into_owned())
}

/// Lets a request through to the API if its token's role allows it: 401 without a known
/// token, 403 for a read token that tries to change something.
pub(super) async fn check(State(access): State<Access>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let mcp = path == "/mcp" || path.starts_with("/mcp/");
    if !access.enabled() || !(mcp || path.starts_with("/api/")) {
        return next.run(request).await;
    }
    // Every MCP request may lead to a tool call (a run started): an operator's act.
    let reads = request.method() == Method::GET || request.method() == Method::HEAD;
    let needs = if reads && !mcp {
        Role::Read
    } else {
        Role::Operate
    };
    match token(&request).and_then(|t| access.role_of(&t)) {
        None => {
            let mut r = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this API needs a token: Authorization: Bearer TOKEN",
            )
            .into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            r
        }
        Some(role) if role < needs => ApiError::new(
            StatusCode::FORBIDDEN,
            "a read token may not start, cancel or decide: that takes an operator token",
        )
        .into_response(),
        Some(_) => next.run(request).await,
    }
}
