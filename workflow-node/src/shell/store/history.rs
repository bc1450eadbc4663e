//! The history stream: a run's entries published (after the commit that holds them) and
//! made again if it was deleted. What an entry says, and when entries are held or sent,
//! is decided in `run::history`.

use std::time::Duration;

use async_nats::jetstream::{self, context::PublishAckFuture, stream};
use async_nats::HeaderMap;
use messages::{headers, msg_id, subjects};

use crate::core::ExecutionId;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Error, Result};
use crate::shell::mesh::setup as mesh_setup;
use crate::shell::run::history::HistoryEntry;
use crate::shell::run::names;

/// Finds or creates the history stream: limits-based, entries kept for `retention` (a
/// stream made with another age limit is given this one).
pub(in crate::shell) async fn stream(
    js: &jetstream::Context,
    ns: &str,
    replicas: usize,
    retention: Duration,
    max_bytes: u64,
) -> Result<stream::Stream> {
    let name = names::history_stream(ns);
    let setup = |e: async_nats::Error| Error::Setup {
        resource: format!("stream {name}"),
        source: e,
    };
    let config = stream::Config {
        name: name.clone(),
        subjects: vec![subjects::run_history_all(ns)],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        max_age: retention,
        // Full, the oldest entries go: history is for reading, never replayed.
        max_bytes: mesh_setup::bytes_limit(max_bytes),
        discard: stream::DiscardPolicy::Old,
        // At most the stream's max age, which the server requires.
        duplicate_window: Duration::from_secs(120).min(retention),
        ..Default::default()
    };
    let mut stream = js
        .get_or_create_stream(config.clone())
        .await
        .map_err(|e| setup(e.into()))?;
    let info = stream.info().await.map_err(|e| setup(e.into()))?;
    if info.config.max_age != retention || info.config.max_bytes != config.max_bytes {
        let mut updated = info.config.clone();
        updated.max_age = retention;
        updated.max_bytes = config.max_bytes;
        updated.duplicate_window = config.duplicate_window;
        js.update_stream(updated)
            .await
            .map_err(|e| setup(e.into()))?;
    }
    Ok(stream)
}

/// A history entry on its way to the stream.
pub(in crate::shell) struct Pending {
    subject: String,
    headers: HeaderMap,
    bytes: bytes::Bytes,
    ack: PublishAckFuture,
}

/// Starts publishing `entries` of run `execution` (in order) as one message;
/// [`Pending::stored`] waits for the stream. `None` when there are none.
pub(in crate::shell) async fn publish(
    shared: &Shared,
    workflow: &str,
    execution: &ExecutionId,
    entries: &[HistoryEntry],
) -> Result<Option<Pending>> {
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Ok(None);
    };
    let subject = subjects::run_history(&shared.ns, workflow, &execution.0);
    let mut h = HeaderMap::new();
    let (id, bytes) = if entries.len() == 1 {
        (
            msg_id::history(&execution.0, first.n),
            serde_json::to_vec(first)?,
        )
    } else {
        (
            msg_id::history_batch(&execution.0, first.n, last.n),
            serde_json::to_vec(entries)?,
        )
    };
    h.insert(headers::MSG_ID, shared.seal.msg_id(&id).as_str());
    let bytes: bytes::Bytes = bytes.into();
    let ack = shared
        .js
        .publish_with_headers(subject.clone(), h.clone(), bytes.clone())
        .await
        .context(|| format!("publishing the history of run {execution}"))?;
    Ok(Some(Pending {
        subject,
        headers: h,
        bytes,
        ack,
    }))
}

impl Pending {
    /// Waits until the stream stored the entry. A stream that was deleted is made again and
    /// the entry published once more.
    pub(in crate::shell) async fn stored(self, shared: &Shared) -> Result<()> {
        use async_nats::jetstream::context::PublishErrorKind;
        let what = || format!("storing history on {}", self.subject);
        match self.ack.await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == PublishErrorKind::StreamNotFound => {
                tracing::warn!("the history stream is gone: making it again");
                let c = &shared.config;
                stream(
                    &shared.js,
                    &shared.ns,
                    c.replicas,
                    c.retention,
                    c.store_limits.history,
                )
                .await?;
                let ack = shared
                    .js
                    .publish_with_headers(self.subject.clone(), self.headers, self.bytes)
                    .await
                    .context(what)?;
                ack.await.map(drop).context(what)
            }
            Err(e) => Err(e).context(what),
        }
    }
}
