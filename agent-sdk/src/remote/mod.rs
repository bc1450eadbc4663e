//! Remote agents: agents that live outside NATS, at an A2A HTTP URL, served on the mesh
//! under their name by a proxy, as the reference system's A2A proxies do. They are
//! declared in the agents file (a `remote:` block, beside stub and LLM agents; see
//! `docs/workflows.md`), and a workflow calls one as any agent: the node's retries,
//! timeouts, cancellation, traces and output checks apply unchanged, because to the node it
//! *is* a mesh agent; only the proxy's handler speaks HTTP ([`client`]).
//!
//! At start ([`RemoteAgent::connect`]) the URL is checked against the SSRF rules (http or
//! https, no credentials in it, an address that is not loopback, private, link-local or
//! otherwise special unless `allow_private`), the address is resolved once and pinned (an
//! `https://` certificate is still checked against the URL's host name, and must chain to
//! the system's roots or, with `ca_file`, to that file's CAs only), and
//! the card at `/.well-known/agent-card.json` of the URL's origin is read and checked: its name
//! must be the declared one, and it must offer JSON-RPC at protocol 0.3 (the mesh's
//! dialect, which the official SDKs serve beside 1.0). Its description and skills make the
//! proxy's card; the schemas are the declaration's (A2A cards carry none), enforced by the
//! SDK on both sides of the handler.

mod client;
pub(crate) mod file;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use messages::card::AgentSkill;
use serde_json::Value;

use crate::agent::{AgentBuilder, AgentHandle};
use crate::error::AgentError;
use crate::handler::handler_fn;

/// A remote agent as the agents file declares it.
#[derive(Debug, Clone)]
pub struct RemoteAgent {
    /// Its name on the mesh, which its card must bear.
    pub name: String,
    /// Where its A2A JSON-RPC endpoint is; the card is read under it.
    pub url: String,
    /// Where its bearer token comes from, if it needs one.
    pub token: Option<TokenSource>,
    /// The card's description instead of the remote card's.
    pub description: Option<String>,
    /// Advertised and enforced input schema.
    pub input_schema: Option<Value>,
    /// Advertised and enforced output schema.
    pub output_schema: Option<Value>,
    /// One call, from the send to the task's end (default [`DEFAULT_TIMEOUT`]).
    pub timeout: Duration,
    /// The largest answer read (default [`DEFAULT_MAX_RESPONSE_BYTES`]).
    pub max_response_bytes: usize,
    /// Whether a loopback, private or link-local address may be called.
    pub allow_private: bool,
    /// For an `https://` URL: the CA file (PEM) its certificate must chain to, instead of
    /// the system's roots (a private CA).
    pub ca_file: Option<PathBuf>,
}

/// Where a bearer token is read from (once, at start; never printed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable.
    Env(String),
    /// A file (its content, trimmed).
    File(PathBuf),
}

/// The default time of one remote call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The default largest answer read from a remote agent: 4 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 << 20;
/// The time to connect to a remote agent (each request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The path of the card under the agent's URL.
const CARD_PATH: &str = "/.well-known/agent-card.json";

/// Why a remote agent could not be served.
#[derive(Debug, thiserror::Error)]
#[error("remote agent {name}: {message}")]
pub struct RemoteError {
    /// The agent.
    pub name: String,
    /// What is wrong.
    pub message: String,
}

/// A remote agent checked and ready to serve: its client and its card's parts.
#[derive(Debug, Clone)]
pub struct Connected {
    decl: RemoteAgent,
    client: client::Client,
    description: String,
    skills: Vec<AgentSkill>,
}

impl RemoteAgent {
    fn error(&self, message: impl Into<String>) -> RemoteError {
        RemoteError {
            name: self.name.clone(),
            message: message.into(),
        }
    }

    /// Checks the URL, reads the token and the card, and checks the card (see the module
    /// doc).
    pub async fn connect(&self) -> Result<Connected, RemoteError> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| self.error(format!("url: {e}")))?;
        let addr = self.checked_address(&url).await?;
        let token = self.read_token()?;
        let ca = self.ca_file.as_deref().map(crate::crypto::CaFile::read);
        let ca = ca
            .transpose()
            .map_err(|e| self.error(format!("ca_file: {e}")))?;
        let mut http = crate::crypto::client_builder(ca.as_ref())
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(self.timeout);
        if let Some(host) = url.host_str() {
            // Pinned: a name that resolves elsewhere later is not followed there.
            http = http.resolve(host, addr);
        }
        let http = http.build().map_err(|e| self.error(e.to_string()))?;
        let client = client::Client {
            http,
            url: url.clone(),
            token,
            max_response_bytes: self.max_response_bytes,
        };
        let card_url = card_url(&url).map_err(|e| self.error(e))?;
        let card = client.card(card_url).await.map_err(|e| self.error(e))?;
        let (description, skills) = self.check_card(&card)?;
        Ok(Connected {
            decl: self.clone(),
            client,
            description,
            skills,
        })
    }

    /// The address `url` names, resolved once, refused by the SSRF rules.
    async fn checked_address(&self, url: &reqwest::Url) -> Result<SocketAddr, RemoteError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(self.error(format!("url: scheme {} (http or https only)", url.scheme())));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(
                self.error("url: credentials in the URL are refused: give token_env or token_file")
            );
        }
        let host = url.host_str().ok_or_else(|| self.error("url: no host"))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addr = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| self.error(format!("url: resolving {host}: {e}")))?
            .next()
            .ok_or_else(|| self.error(format!("url: {host} resolves to no address")))?;
        if !self.allow_private && special(addr.ip()) {
            return Err(self.error(format!(
                "url: {host} is {}, an address a deployment keeps from outside calls \
                 (loopback, private, link-local or special): set allow_private: true to call it",
                addr.ip()
            )));
        }
        if url.scheme() == "http" && !special(addr.ip()) {
            tracing::warn!(
                "remote agent {}: {url} is plain http to a public address: its token, inputs \
                 and outputs cross the network unencrypted (give an https:// URL)",
                self.name
            );
        }
        Ok(addr)
    }

    fn read_token(&self) -> Result<Option<String>, RemoteError> {
        let token = match &self.token {
            None => return Ok(None),
            Some(TokenSource::Env(var)) => std::env::var(var)
                .map_err(|_| self.error(format!("token_env: {var} is not set")))?,
            Some(TokenSource::File(path)) => std::fs::read_to_string(path)
                .map_err(|e| self.error(format!("token_file {}: {e}", path.display())))?,
        };
        let token = token.trim().to_owned();
        if token.is_empty() {
            return Err(self.error("the token is empty"));
        }
        Ok(Some(token))
    }

    /// The description and skills of a card that fits the declaration.
    fn check_card(&self, card: &Value) -> Result<(String, Vec<AgentSkill>), RemoteError> {
        let name = card.get("name").and_then(Value::as_str).unwrap_or_default();
        if name != self.name {
            return Err(self.error(format!(
                "the card at the URL is agent {name:?}, not {:?}",
                self.name
            )));
        }
        if !speaks_jsonrpc_03(card) {
            return Err(self.error(
                "the card offers no JSON-RPC interface at protocol 0.3 (the mesh's dialect)",
            ));
        }
        let skills = match card.get("skills") {
            None | Some(Value::Null) => Vec::new(),
            Some(s) => serde_json::from_value(s.clone())
                .map_err(|e| self.error(format!("the card's skills cannot be read: {e}")))?,
        };
        let description = self.description.clone().unwrap_or_else(|| {
            let d = card.get("description").and_then(Value::as_str);
            d.unwrap_or_default().to_owned()
        });
        Ok((description, skills))
    }
}

/// Whether a card (0.3, or 1.0 with `supportedInterfaces`) offers JSON-RPC at 0.3.
fn speaks_jsonrpc_03(card: &Value) -> bool {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let is_03 = |v: Option<String>| v.is_some_and(|v| v == "0.3" || v.starts_with("0.3."));
    let interfaces = card.get("supportedInterfaces").and_then(Value::as_array);
    let listed = interfaces.into_iter().flatten().any(|i| {
        text(i, "protocolBinding").as_deref() == Some("JSONRPC")
            && is_03(text(i, "protocolVersion"))
    });
    let preferred = text(card, "preferredTransport").unwrap_or_else(|| "JSONRPC".into());
    listed || (preferred == "JSONRPC" && is_03(text(card, "protocolVersion")))
}

/// The card's URL: the well-known path at the root of the agent's origin (A2A's place
/// for it, whatever path the endpoint has).
fn card_url(url: &reqwest::Url) -> Result<reqwest::Url, String> {
    url.join(CARD_PATH).map_err(|e| format!("url: {e}"))
}

/// Addresses a deployment keeps from calls made on behalf of workflow definitions.
fn special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64 // shared 100.64/10
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link local
                || v6.to_ipv4_mapped().is_some_and(|v4| special(IpAddr::V4(v4)))
        }
    }
}

impl Connected {
    /// Serves the proxy on the mesh under the declared name (namespace `ns`, its card
    /// signed by `signer` when given).
    pub async fn serve(
        self,
        client: async_nats::Client,
        ns: &str,
        signer: Option<crate::Signer>,
    ) -> Result<AgentHandle, crate::error::ServeError> {
        let Connected {
            decl,
            client: remote,
            description,
            skills,
        } = self;
        let mut builder = AgentBuilder::new(&decl.name)
            .namespace(ns)
            .description(description);
        for s in skills {
            builder = builder.skill(s);
        }
        if let Some(s) = &decl.input_schema {
            builder = builder.input_schema(s.clone());
        }
        if let Some(s) = &decl.output_schema {
            builder = builder.output_schema(s.clone());
        }
        if let Some(signer) = signer {
            builder = builder.signer(signer);
        }
        let timeout = decl.timeout;
        let builder = builder.handler(handler_fn(move |req| {
            let remote = remote.clone();
            async move {
                let tp = req
                    .headers
                    .get(messages::headers::TRACEPARENT)
                    .map(|v| v.as_str().to_owned());
                let deadline = tokio::time::Instant::now() + timeout;
                let out = remote.call(&req.input, &req.task_id, tp.as_deref(), deadline);
                out.await.map_err(|e: AgentError| e)
            }
        }));
        builder.serve(client).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn special_addresses_are_kept_from_calls() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(special(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111"] {
            assert!(!special(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn a_card_must_offer_json_rpc_at_0_3() {
        assert!(speaks_jsonrpc_03(
            &json!({"protocolVersion": "0.3.0", "url": "x"})
        ));
        assert!(speaks_jsonrpc_03(&json!({"supportedInterfaces": [
            {"url": "x", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]})));
        assert!(!speaks_jsonrpc_03(&json!({"supportedInterfaces": [
            {"url": "x", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]})));
        assert!(!speaks_jsonrpc_03(
            &json!({"protocolVersion": "0.3.0", "preferredTransport": "GRPC"})
        ));
    }

    #[test]
    fn the_card_is_read_at_the_root_of_the_agents_origin() {
        let at = |u: &str| {
            card_url(&reqwest::Url::parse(u).unwrap())
                .unwrap()
                .to_string()
        };
        assert_eq!(at("http://h:1/"), "http://h:1/.well-known/agent-card.json");
        assert_eq!(
            at("http://h:1/a2a/v1"),
            "http://h:1/.well-known/agent-card.json"
        );
    }
}
