//! A concurrency limit on model calls shared by every process that serves agents with the
//! same limit key (a provider account's quota is the whole mesh's, not one process's).
//!
//! The slots are keys `{key}.{i}` (`i` < `max_concurrency`) of the JetStream key-value
//! bucket `{ns}_llm_slots`: a call takes a slot by *creating* its key (which succeeds for
//! one creator only), and gives it back by deleting it when the call ends, is cancelled or
//! fails. A process that dies holding a slot loses it when the entry ages out (the bucket's
//! `max_age`, the lease: longer than any call may take). A call that finds every slot taken
//! watches the keys and tries again at each change (and at least every second, for slots
//! that aged out, which the watch does not report), telling its caller once that it waits.

use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;

use crate::handler::NodeRequest;

/// How often a waiting call looks again even without a change (slots that aged out).
const RECHECK: Duration = Duration::from_secs(1);

/// A shared limit of one key.
#[derive(Debug, Clone)]
pub struct SharedLimit {
    store: kv::Store,
    key: String,
    max: u32,
    owner: String,
}

/// A taken slot; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    store: kv::Store,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let store = self.store.clone();
        let key = std::mem::take(&mut self.key);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.delete(&key).await {
                    tracing::warn!("giving back the model slot {key}: {e} (it ages out)");
                }
            });
        }
    }
}

/// The bucket of the slots in namespace `ns`.
pub fn bucket(ns: &str) -> String {
    format!("{ns}_llm_slots")
}

impl SharedLimit {
    /// Opens (or creates) the slots bucket; `lease` is how long a slot outlives a process
    /// that died holding it.
    pub async fn open(
        client: async_nats::Client,
        ns: &str,
        key: &str,
        max: u32,
        lease: Duration,
    ) -> Result<SharedLimit, String> {
        let js = async_nats::jetstream::new(client);
        let name = bucket(ns);
        let store = match js.get_key_value(&name).await {
            Ok(store) => store,
            Err(_) => js
                .create_key_value(kv::Config {
                    bucket: name.clone(),
                    history: 1,
                    max_age: lease,
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("the model slots bucket {name}: {e}"))?,
        };
        Ok(SharedLimit {
            store,
            key: key.to_owned(),
            max,
            owner: uuid::Uuid::new_v4().simple().to_string(),
        })
    }

    /// Takes a free slot, waiting as long as it takes; when every slot is taken, the
    /// caller of `req` is told once (a `working` status update).
    pub async fn acquire(&self, req: &NodeRequest) -> Result<Slot, String> {
        // Watch first, so that no release between a failed try and the wait is missed.
        let mut changes = self
            .store
            .watch(format!("{}.>", self.key))
            .await
            .map_err(|e| format!("watching the model slots of {}: {e}", self.key))?;
        let mut told = false;
        loop {
            for i in 0..self.max {
                let key = format!("{}.{i}", self.key);
                if self
                    .store
                    .create(&key, self.owner.clone().into())
                    .await
                    .is_ok()
                {
                    return Ok(Slot {
                        store: self.store.clone(),
                        key,
                    });
                }
            }
            if !told {
                told = true;
                let _ = req
                    .send_status(format!(
                        "waiting for a model slot: all {} of {} are in use",
                        self.max, self.key
                    ))
                    .await;
            }
            let _ = tokio::time::timeout(RECHECK, changes.next()).await;
        }
    }
}
