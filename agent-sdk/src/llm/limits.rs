//! Limits on model calls shared by every process that serves agents with the same limit
//! key (a provider account's quota is the whole mesh's, not one process's): calls at once
//! ([`SharedLimit`]) and requests and tokens per minute ([`SharedRate`]).
//!
//! **Calls at once.**
//! The slots are keys `{key}.{i}` (`i` < `max_concurrency`) of the JetStream key-value
//! bucket `{ns}_llm_slots`: a call takes a slot by *creating* its key (which succeeds for
//! one creator only), and gives it back by deleting it when the call ends, is cancelled or
//! fails. A process that dies holding a slot loses it when the entry ages out (the bucket's
//! `max_age`, the lease: longer than any call may take). A call that finds every slot taken
//! watches the keys and tries again at each change (and at least every second, for slots
//! that aged out, which the watch does not report), telling its caller once that it waits.
//!
//! **Per minute.** A rate is the generic cell rate algorithm over one key of the bucket
//! `{ns}_llm_rates`: `{key}.requests` or `{key}.tokens`, whose value is the theoretical
//! arrival time (TAT, microseconds since the Unix epoch, decimal text). A request of `cost`
//! units (1 request; its tokens) may go when `max(TAT, now) + cost × 60 s / limit` stays
//! within a minute of now, and then writes that as the new TAT by compare-and-swap on the
//! entry's revision (`create` when there is none), trying again on a conflict. So a quiet
//! minute allows a burst of the whole limit, and over any longer time no more than the
//! limit per minute goes out. Tokens are reserved before the call (the request's bytes / 4
//! plus `max_tokens`) and the reservation corrected by the usage the provider reports, so
//! an answer shorter than its limit gives the rest back. A call that may not go waits for
//! the time the TAT says, or less when the entry changes (a correction), telling its
//! caller once. Entries live two minutes (`max_age`): a TAT not written for a minute is
//! in the past, and its loss changes nothing. The processes' clocks are taken to agree
//! (NTP): a clock `s` seconds ahead lets its process go `s` seconds early.

use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;

use crate::handler::NodeRequest;

/// How often a waiting call looks again even without a change (slots that aged out).
const RECHECK: Duration = Duration::from_secs(1);

/// The window of a per-minute rate.
const MINUTE_US: u64 = 60_000_000;

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

/// The bucket of the per-minute rates in namespace `ns`.
pub fn rates_bucket(ns: &str) -> String {
    format!("{ns}_llm_rates")
}

/// Opens the bucket `name`, creating it with `max_age` when it is not there.
async fn open_bucket(
    client: async_nats::Client,
    name: String,
    max_age: Duration,
) -> Result<kv::Store, String> {
    let js = async_nats::jetstream::new(client);
    match js.get_key_value(&name).await {
        Ok(store) => Ok(store),
        Err(_) => js
            .create_key_value(kv::Config {
                bucket: name.clone(),
                history: 1,
                max_age,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("the bucket {name}: {e}")),
    }
}

/// What a per-minute rate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Model requests.
    Requests,
    /// Tokens, prompt and answer.
    Tokens,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Requests => "requests",
            Unit::Tokens => "tokens",
        }
    }
}

/// A per-minute rate of one key, shared through the bucket `{ns}_llm_rates`.
#[derive(Debug, Clone)]
pub struct SharedRate {
    store: kv::Store,
    key: String,
    entry: String,
    unit: Unit,
    per_minute: u64,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl SharedRate {
    /// Opens (or creates) the rates bucket for `per_minute` `unit`s of `key`.
    pub async fn open(
        client: async_nats::Client,
        ns: &str,
        key: &str,
        unit: Unit,
        per_minute: u64,
    ) -> Result<SharedRate, String> {
        let store = open_bucket(client, rates_bucket(ns), Duration::from_secs(120)).await?;
        Ok(SharedRate {
            store,
            key: key.to_owned(),
            entry: format!("{key}.{}", unit.name()),
            unit,
            per_minute: per_minute.max(1),
        })
    }

    /// What it counts.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    fn interval_us(&self, units: u64) -> u64 {
        units.saturating_mul(MINUTE_US) / self.per_minute
    }

    /// Takes `cost` units (at most the whole limit), waiting while the last minute's are
    /// spent; when it must wait, the caller of `req` is told once (a `working` status
    /// update). Returns how long it waited.
    pub async fn reserve(&self, cost: u64, req: &NodeRequest) -> Result<Duration, String> {
        let started = std::time::Instant::now();
        let cost = cost.clamp(1, self.per_minute);
        let mut changes = self.store.watch(&self.entry).await.map_err(|e| {
            format!(
                "watching the {} rate of {}: {e}",
                self.unit.name(),
                self.key
            )
        })?;
        let mut told = false;
        loop {
            let now = now_us();
            let (tat, revision) = self.read().await?;
            let next = tat.max(now) + self.interval_us(cost);
            let ahead = next - now;
            if ahead <= MINUTE_US {
                if self.write(next, revision).await? {
                    return Ok(started.elapsed());
                }
                continue; // another process wrote first: read again
            }
            if !told {
                told = true;
                let _ = req
                    .send_status(format!(
                        "waiting for the model's {} quota of {}: {} per minute",
                        self.unit.name(),
                        self.key,
                        self.per_minute
                    ))
                    .await;
            }
            let wait = Duration::from_micros(ahead - MINUTE_US);
            let _ = tokio::time::timeout(wait, changes.next()).await;
        }
    }

    /// Corrects a reservation by `delta` units (negative: gives them back, an answer
    /// shorter than reserved).
    pub async fn adjust(&self, delta: i64) -> Result<(), String> {
        if delta == 0 {
            return Ok(());
        }
        loop {
            let (tat, revision) = self.read().await?;
            let shift = self.interval_us(delta.unsigned_abs());
            let next = if delta > 0 {
                tat.saturating_add(shift)
            } else {
                tat.saturating_sub(shift)
            };
            if self.write(next, revision).await? {
                return Ok(());
            }
        }
    }

    /// The TAT and the entry's revision (0: no entry).
    async fn read(&self) -> Result<(u64, u64), String> {
        let entry =
            self.store.entry(&self.entry).await.map_err(|e| {
                format!("reading the {} rate of {}: {e}", self.unit.name(), self.key)
            })?;
        Ok(match entry {
            Some(e) if e.operation == kv::Operation::Put => (
                std::str::from_utf8(&e.value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                e.revision,
            ),
            Some(e) => (0, e.revision),
            None => (0, 0),
        })
    }

    /// Writes `tat` if the entry is still at `revision`; `false` when another wrote first.
    async fn write(&self, tat: u64, revision: u64) -> Result<bool, String> {
        let value = tat.to_string().into();
        let what = || format!("writing the {} rate of {}", self.unit.name(), self.key);
        if revision == 0 {
            match self.store.create(&self.entry, value).await {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(format!("{}: {e}", what())),
            }
        } else {
            match self.store.update(&self.entry, value, revision).await {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(false),
                Err(e) => Err(format!("{}: {e}", what())),
            }
        }
    }
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
        let store = open_bucket(client, bucket(ns), lease).await?;
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
