//! Setting up what a node needs on the server: buckets made (or found and brought up to
//! date), each step tried again while a cluster elects its leaders.

use std::time::Duration;

use async_nats::jetstream::{self, kv};

use crate::shell::error::{Error, Result};

/// How long a setup step (a stream, bucket or consumer to find or make, a definition to
/// store) is tried again before `start` gives up: a cluster electing leaders or busy
/// servers time JetStream requests out, and a new bucket's stream may not be known to
/// every server yet.
const SETUP_PATIENCE: Duration = Duration::from_secs(30);

/// Runs the setup step `step` until it succeeds or [`SETUP_PATIENCE`] has passed (then its
/// last error), waiting 100 ms, then twice as long each time, up to 2 s, between tries. A
/// server's refusal to reserve a store's byte limit ends it at once: no wait clears it.
pub(in crate::shell) async fn patiently<T, F, Fut>(mut step: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + SETUP_PATIENCE;
    let mut wait = Duration::from_millis(100);
    loop {
        match step().await {
            Ok(value) => return Ok(value),
            Err(e) if !e.is_no_room() && tokio::time::Instant::now() + wait < deadline => {
                tracing::warn!("{e}; trying again in {} ms", wait.as_millis());
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Finds or creates a KV bucket whose keys may expire (per-message TTL, nats-server
/// 2.11+), holding at most `max_bytes` (see `crate::limits::StoreLimits`): what an ended
/// run leaves behind expires after the retention, and purge markers after a second. A
/// bucket made by an older version is given the TTLs and the byte limit it lacks.
pub(in crate::shell) async fn kv_bucket(
    js: &jetstream::Context,
    bucket: &str,
    replicas: usize,
    max_bytes: u64,
) -> Result<kv::Store> {
    let setup = |e: async_nats::Error| Error::Setup {
        resource: format!("bucket {bucket}"),
        source: e,
    };
    if let Ok(store) = js.get_key_value(bucket).await {
        let mut stream = store.stream.clone();
        let info = stream.info().await.map_err(|e| setup(e.into()))?;
        let mut config = info.config.clone();
        if !config.allow_message_ttl {
            config.allow_message_ttl = true;
            config.subject_delete_marker_ttl = Some(Duration::from_secs(1));
        }
        config.max_bytes = bytes_limit(max_bytes);
        if config != info.config {
            js.update_stream(config)
                .await
                .map_err(|e| setup(e.into()))?;
        }
        return Ok(store);
    }
    let config = kv::Config {
        bucket: bucket.to_string(),
        history: 1,
        num_replicas: replicas,
        limit_markers: Some(Duration::from_secs(1)),
        max_bytes: bytes_limit(max_bytes),
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another replica created it in between; if not, the refusal is the cause.
        Err(refused) => js
            .get_key_value(bucket)
            .await
            .map_err(|_| setup(refused.into())),
    }
}

/// `max_bytes` as JetStream writes a byte limit.
pub(in crate::shell) fn bytes_limit(max_bytes: u64) -> i64 {
    i64::try_from(max_bytes).unwrap_or(i64::MAX)
}

/// Gives stream `stream` (found, maybe made by an older version without a byte limit) the
/// byte limit `max_bytes`, when it has another.
pub(in crate::shell) async fn limit_stream(
    js: &jetstream::Context,
    stream: &mut jetstream::stream::Stream,
    max_bytes: u64,
) -> std::result::Result<(), async_nats::Error> {
    let info = stream.info().await?;
    if info.config.max_bytes != bytes_limit(max_bytes) {
        let mut config = info.config.clone();
        config.max_bytes = bytes_limit(max_bytes);
        js.update_stream(config).await?;
    }
    Ok(())
}
