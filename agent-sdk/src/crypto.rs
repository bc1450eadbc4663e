//! The process's TLS crypto provider, installed once before any HTTP client is built.
//!
//! reqwest is built with rustls but without a provider of its own (`rustls-no-provider`),
//! because the only one in the build, ring, is async-nats' choice, and a second (aws-lc)
//! would be a large C build for nothing. reqwest then panics when a client is built
//! before a process-wide provider is installed: the LLM client's and the OTLP exporters'
//! alike, since Cargo unifies features. So every place of this workspace that builds one
//! calls [`install`] first (the LLM client, the remote agents' client, the trace exporter of [`crate::telemetry`],
//! workflow-node's metric exporter and the A2A door's push notifications), and no binary can forget it.

/// Installs ring as the process's rustls provider, unless one is installed already.
/// Cheap and idempotent: call it before building any `reqwest::Client`.
pub fn install() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another thread's install leaves that one in place: as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
