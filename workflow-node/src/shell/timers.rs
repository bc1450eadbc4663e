//! Durable timers. A timer is a KV entry (`{workflow}.{execution}.{timer}` → when and what);
//! every replica watches the bucket and arms every timer, so one dying loses none. When a
//! timer comes due, replicas publish `TimerFired` into the run's event stream with a message
//! id that makes the stream keep one copy, then purge the entry.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::Operation;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{now, publish_event, Envelope, Shared};
use crate::core::{Event, ExecutionId, Millis, TimerId};

/// One armed timer, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimerRecord {
    /// The workflow.
    pub workflow: String,
    /// The run.
    pub execution: ExecutionId,
    /// Which timer.
    pub timer: TimerId,
    /// When it fires.
    pub at: Millis,
}

/// Arms every timer of the bucket and fires them when due. Runs until the watch ends for
/// good; a broken watch is re-created with a backoff.
pub(super) async fn run(shared: Arc<Shared>) {
    let mut armed: HashMap<String, TimerRecord> = HashMap::new();
    let mut due: BTreeSet<(Millis, String)> = BTreeSet::new();
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut watch = match shared.timers.watch_with_history(">").await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("timer watch failed, retrying in {backoff:?}: {e}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        loop {
            let next = due.first().map(|(at, _)| *at);
            let sleep = match next {
                Some(at) => Duration::from_millis(at.0.saturating_sub(now().0)),
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                entry = watch.next() => {
                    let Some(entry) = entry else { break };
                    let entry = match entry {
                        Ok(e) => e,
                        Err(e) => { tracing::debug!("timer watch: {e}"); continue }
                    };
                    if let Some(old) = armed.remove(&entry.key) {
                        due.remove(&(old.at, entry.key.clone()));
                    }
                    if entry.operation == Operation::Put {
                        if let Ok(rec) = serde_json::from_slice::<TimerRecord>(&entry.value) {
                            due.insert((rec.at, entry.key.clone()));
                            armed.insert(entry.key, rec);
                        }
                    }
                }
                _ = tokio::time::sleep(sleep), if next.is_some() => {
                    let now = now();
                    while let Some((at, key)) = due.first().cloned() {
                        if at > now { break; }
                        due.remove(&(at, key.clone()));
                        let Some(rec) = armed.remove(&key) else { continue };
                        if !fire(&shared, &key, rec.clone()).await {
                            // Try again shortly; the entry is still in the bucket.
                            let retry = TimerRecord { at: Millis(now.0 + 1000), ..rec };
                            due.insert((retry.at, key.clone()));
                            armed.insert(key, retry);
                        }
                    }
                }
            }
        }
        tracing::warn!("timer watch ended; re-creating it");
    }
}

/// Publishes the timer's event and deletes its entry; false when the publish failed.
async fn fire(shared: &Shared, key: &str, rec: TimerRecord) -> bool {
    let msg_id = messages::msg_id::timer_fired(key, rec.at.0);
    let envelope = Envelope::event(Event::TimerFired { timer: rec.timer });
    match publish_event(shared, &rec.workflow, &rec.execution, &msg_id, &envelope).await {
        Ok(_) => {
            // A purge whose marker expires: fired timers leave nothing behind.
            if shared
                .timers
                .purge_with_ttl(key, Duration::from_secs(1))
                .await
                .is_err()
            {
                let _ = shared.timers.delete(key).await;
            }
            true
        }
        Err(e) => {
            tracing::warn!("timer {key} could not fire: {e}");
            false
        }
    }
}
