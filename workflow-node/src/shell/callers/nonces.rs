//! Signed requests accepted once: every nonce (`Mesh-Nonce`) of a signature the node
//! accepted is remembered, under its signer, in KV bucket `{ns}_wf_nonces` for as long as
//! the signature could still verify, so a captured request sent again (a pause after its
//! run was resumed, a start, a cancel, a decision) is refused however long after, by every
//! replica. JetStream's duplicate window (2 minutes) is shorter than a signature's life
//! (up to `2 × MAX_SKEW` on the receiver's clock), so it cannot be the guard.
//!
//! The first use wins: `create` fails on a key that exists, atomically across replicas.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use async_nats::HeaderMap;

use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::mesh::setup::kv_bucket;
use crate::shell::run::names;

/// How long a nonce is remembered: a signature verifies from `MAX_SKEW` before its time to
/// `MAX_SKEW` after, on the receiver's clock, so one seen at the earliest may be replayed
/// for `2 × MAX_SKEW`; a minute more covers replicas whose clocks differ.
pub(in crate::shell) const NONCE_LIFE: Duration =
    Duration::from_secs(2 * agent_sdk::signing::MAX_SKEW.as_secs() + 60);

/// Why a verified signature is still refused.
#[derive(Debug, thiserror::Error)]
pub(in crate::shell) enum Replay {
    /// The nonce was accepted before: the request is a copy.
    #[error("replayed signature: key {key} signed a request with nonce {nonce} that was already accepted (sign each request anew)")]
    Seen {
        /// The signer.
        key: String,
        /// The nonce.
        nonce: String,
    },
    /// The nonce store could not be written: the request is refused rather than risked.
    #[error("the signature's nonce could not be recorded ({0}): try again")]
    Unrecorded(String),
}

/// Finds or makes the nonce bucket.
pub(in crate::shell) async fn bucket(
    js: &jetstream::Context,
    ns: &str,
    replicas: usize,
    max_bytes: u64,
) -> Result<kv::Store> {
    kv_bucket(js, &names::nonces_bucket(ns), replicas, max_bytes).await
}

/// Records the nonce of the signed request `headers` (verified before) as used; refuses
/// it if it was used before.
pub(in crate::shell) async fn first_use(
    shared: &Shared,
    headers: Option<&HeaderMap>,
) -> std::result::Result<(), Replay> {
    let key = headers
        .and_then(|h| h.get(messages::headers::SIGNER))
        .map(|v| v.as_str().trim().to_string())
        .unwrap_or_default();
    let Some(nonce) = agent_sdk::signing::nonce(headers) else {
        return Err(Replay::Unrecorded("the request has no nonce".into()));
    };
    let entry = format!("{key}.{nonce}");
    match shared
        .nonces
        .create_with_ttl(&entry, bytes::Bytes::new(), NONCE_LIFE)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
            Err(Replay::Seen { key, nonce })
        }
        Err(e) => Err(Replay::Unrecorded(e.to_string())),
    }
}
