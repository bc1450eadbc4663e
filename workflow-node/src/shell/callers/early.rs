//! Cancels that come before their run's start, bounded: such a cancel is kept (as a
//! record that is not started) so that the start, still behind it in the stream, ends the
//! run as it begins. A cancel of an id that never starts would keep that record; anyone may
//! send one, so each is kept only for `Config::early_cancel_expiry` and each caller
//! identity may have at most `Config::early_cancels_per_caller` kept at once.
//!
//! The count lives in KV bucket `{ns}_wf_early_cancels`, shared by the replicas: a kept
//! cancel takes one of its identity's slots (`{identity}.{n}`, `create` failing on a slot
//! taken), which expires with it.

use async_nats::jetstream::{self, kv};
use sha2::{Digest, Sha256};

use crate::core::ExecutionId;
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::mesh::setup::kv_bucket;
use crate::shell::run::envelope::Caller;
use crate::shell::run::names;

/// Finds or makes the bucket of slots.
pub(in crate::shell) async fn bucket(
    js: &jetstream::Context,
    ns: &str,
    replicas: usize,
    max_bytes: u64,
) -> Result<kv::Store> {
    kv_bucket(js, &names::early_cancels_bucket(ns), replicas, max_bytes).await
}

/// Who a kept cancel counts against: its signing key, else (a hash of) its caller name,
/// else every unnamed caller together.
fn identity(by: &Caller) -> String {
    match (&by.signer, &by.name) {
        (Some(key), _) => key.clone(),
        (None, Some(name)) => {
            let digest = Sha256::digest(name.as_bytes());
            format!("name-{}", hex::encode(&digest[..16]))
        }
        (None, None) => "unnamed".into(),
    }
}

/// How `by` is named in a refusal.
fn described(by: &Caller) -> String {
    match (&by.signer, &by.name) {
        (Some(key), _) => format!("key {key}"),
        (None, Some(name)) => format!("caller '{name}'"),
        (None, None) => "callers without a name".into(),
    }
}

/// Takes a slot for a cancel by `by` kept for run `execution`, not started yet; why not
/// when its identity has none free (or the slots cannot be read).
pub(in crate::shell) async fn take_slot(
    shared: &Shared,
    by: &Caller,
    execution: &ExecutionId,
) -> std::result::Result<(), String> {
    let (expiry, most) = (
        shared.config.early_cancel_expiry,
        shared.config.early_cancels_per_caller,
    );
    let who = identity(by);
    for n in 0..most {
        let slot = format!("{who}.{n}");
        let value = bytes::Bytes::from(execution.0.clone());
        match shared
            .early_cancels
            .create_with_ttl(&slot, value, expiry)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "the cancel could not be kept for run {execution}: {e}"
                ))
            }
        }
    }
    Err(format!(
        "no run {execution} has started, and {} already has {most} cancels kept for runs \
         not started (at most {most}, each for {} s): this one is refused; cancel the run \
         once it has started",
        described(by),
        expiry.as_secs()
    ))
}
