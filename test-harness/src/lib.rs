//! Test harness: starts real nats-server processes for integration tests, a real OTLP
//! receiver ([`otlp`]) for tests of exported traces and metrics, plain HTTP requests
//! ([`http`]) for tests of probes, a scripted OpenAI-compatible provider ([`openai`]) for
//! tests of LLM agents, and faults: a TCP proxy ([`proxy`]) that delays, swallows, resets
//! or refuses a connection, and a cluster whose routes run through such proxies
//! ([`partition`]) to cut one server from the others; and TLS ([`tls`]): a local CA and
//! a router served over https with its certificate.
//!
//! Every test gets its own server on an ephemeral loopback port, with JetStream and a
//! store directory of its own; the server is killed and its directory removed when the
//! returned value is dropped. The binary is found (or installed into `<repo>/.nats`) by
//! [`nats_process::find_binary`].
//!
//! ```no_run
//! let server = test_harness::nats();
//! // let client = async_nats::connect(server.url()).await?;
//! ```

pub use nats_process::{Cluster, Error, NatsServer, Options};

pub mod http;
pub mod openai;
pub mod otlp;
pub mod partition;
pub mod proxy;
pub mod python;
pub mod tls;

pub use python::python;

/// A started single JetStream server with default options.
///
/// Panics with the server's log tail if it cannot start: a test cannot go on without it.
pub fn nats() -> NatsServer {
    nats_with(Options::default())
}

/// A started single server with the given options; panics as [`nats`] does.
pub fn nats_with(options: Options) -> NatsServer {
    NatsServer::start(options).unwrap_or_else(|e| panic!("starting nats-server: {e}"))
}

/// A started 3-node JetStream cluster with an elected meta leader; panics if it cannot
/// form.
pub fn cluster() -> Cluster {
    Cluster::start(3).unwrap_or_else(|e| panic!("starting a 3-node nats cluster: {e}"))
}

/// Asks the JetStream leader of `stream` to step down, so that another server leads it
/// (a KV bucket `B` is the stream `KV_B`): what a server's restart or a rebalancing does to
/// writers mid-flight. Returns the API's answer (an error object when the stream has no
/// other peer, or is not clustered).
pub async fn step_down(
    client: &async_nats::Client,
    stream: &str,
) -> anyhow::Result<serde_json::Value> {
    let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
    let reply = client.request(subject, "".into()).await?;
    Ok(serde_json::from_slice(&reply.payload)?)
}
