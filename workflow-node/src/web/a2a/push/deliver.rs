//! Sending push notifications: every door process watches the configs' bucket, follows
//! the run of each config it has not followed yet, and each time the task reaches
//! `input-required` (an occurrence: the time its earliest waiting node began waiting) and
//! when it ends, claims the notification in the bucket and POSTs it, retrying with
//! back-off (from 0.5 s doubling to 60 s, 12 tries) while the receiver is down or answers
//! other than 2xx. An `https://` receiver's certificate must chain to the system's roots,
//! or to `--push-ca-file`'s CAs only; one refused is given up at once (retrying cannot
//! help until a certificate or the CA file changes), with a warning naming the flag.
//!
//! The claim is a lease, `sent.{execution}.{config}.{occurrence}`: the first replica's
//! `create` wins and renews it (a compare-and-swap `update`) every third of the lease
//! while it sends, then marks it `delivered` (or `given-up`). The others keep watching it:
//! one that sees no new revision for a whole lease (timed on its own clock, so no two
//! clocks are compared) takes it over with a compare-and-swap on the revision it saw and
//! sends. A claimant that finds its lease taken stops sending. So a notification is sent
//! though its claimant dies, and once per config and occurrence except when a claimant
//! stalls past its lease mid-POST (then the receiver may get it twice: `docs/a2a.md`).
//!
//! The POST (`docs/a2a.md`, "Push notifications"): the task as `tasks/get` answers it, in
//! the version the config was set in (0.3: the `Task`; 1.0: `{"task": …}` as
//! `application/a2a+json`); `X-A2A-Notification-Token` with the config's token; the
//! config's `Authorization` (scheme and credentials); and, with a token,
//! `Mesh-Push-Id` (`{execution}.{config id}.{occurrence}`: the same on every copy of one
//! notification, the receiver's key to drop a second copy);
//! `Mesh-Push-Timestamp` (ms since the epoch) and `Mesh-Push-Signature`
//! (`v1=` and the lowercase hex HMAC-SHA256, keyed by the token's bytes, of
//! `a2a-push-v1\n{timestamp}\n{config id}\n` followed by the body's bytes).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{guard, Stored};
use crate::ops::call;
use crate::ops::follow::Follow;
use crate::ops::runs::{RunRef, Runs};

/// Tries per notification.
const TRIES: u32 = 12;
/// The first wait between tries; it doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(500);
/// The longest wait between tries.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long one POST may take.
const POST_TIMEOUT: Duration = Duration::from_secs(15);

/// What the pusher needs: the connection, namespace, signing key, and whether private
/// addresses may be sent to.
#[derive(Clone)]
pub(crate) struct Pusher {
    /// The connection.
    pub(crate) client: async_nats::Client,
    /// The namespace.
    pub(crate) ns: String,
    /// The key `tasks/get` is signed with.
    pub(crate) signer: Option<agent_sdk::Signer>,
    /// `--push-allow-private`.
    pub(crate) allow_private: bool,
    /// `--push-ca-file`: the roots of `https://` receivers instead of the system's.
    pub(crate) ca: Option<agent_sdk::crypto::CaFile>,
    /// How long a claim holds without renewal (`--push-lease-ms`).
    pub(crate) lease: Duration,
    /// This replica's name in its claims.
    pub(crate) holder: String,
}

/// A notification's claim as kept in the bucket.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "claim", rename_all = "kebab-case")]
enum Claim {
    /// A replica sends it, and renews the claim while it does.
    Held {
        /// The replica.
        by: String,
    },
    /// The receiver took it.
    Delivered,
    /// Every try failed.
    GivenUp,
}

impl Claim {
    fn bytes(&self) -> bytes::Bytes {
        serde_json::to_vec(self)
            .expect("a claim always serialises")
            .into()
    }

    /// A kept claim; one written before claims were leases (`claimed`, `delivered`).
    fn read(bytes: &[u8]) -> Claim {
        match serde_json::from_slice(bytes) {
            Ok(c) => c,
            Err(_) if bytes == b"delivered" => Claim::Delivered,
            Err(_) => Claim::Held { by: String::new() },
        }
    }

    fn settled(&self) -> bool {
        !matches!(self, Claim::Held { .. })
    }
}

impl Pusher {
    /// Watches the configs and sends their notifications, until dropped (aborted).
    pub(crate) async fn run(self) {
        let store = match super::bucket(&self.client, &self.ns).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("push notifications are off: {e}");
                return;
            }
        };
        let mut watch = match store.watch_with_history("cfg.>").await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("push notifications are off: watching their configs: {e}");
                return;
            }
        };
        // The configs followed now: a follower leaves when its task ended.
        let followed = Arc::new(Mutex::new(HashSet::new()));
        // The followers live as long as this task: a door that stops (or dies) stops
        // sending and renewing at once, and its claims lapse to another replica.
        let mut followers = tokio::task::JoinSet::new();
        while let Some(entry) = watch.next().await {
            while followers.try_join_next().is_some() {}
            let Ok(entry) = entry else { continue };
            let fresh = lock(&followed).insert(entry.key.clone());
            if entry.operation != kv::Operation::Put || !fresh {
                if fresh {
                    lock(&followed).remove(&entry.key);
                }
                continue;
            }
            let Ok(stored) = serde_json::from_slice::<Stored>(&entry.value) else {
                continue;
            };
            let (me, store, followed) = (self.clone(), store.clone(), followed.clone());
            followers.spawn(async move {
                if let Err(e) = me.follow(&store, &entry.key, stored).await {
                    tracing::debug!("push config {}: {e}", entry.key);
                }
                lock(&followed).remove(&entry.key);
            });
        }
    }

    /// Follows the run of config `key` and sends each notification it is due.
    async fn follow(&self, store: &kv::Store, key: &str, s: Stored) -> Result<(), String> {
        let runs = Runs::open(self.client.clone(), &self.ns)
            .await
            .map_err(|r| r.message)?;
        let which = RunRef {
            id: &s.execution,
            workflow: Some(&s.workflow),
            caller: None,
        };
        let run = runs.find(which).await.map_err(|r| r.message)?;
        let mut follow = Follow::start(&runs, run).await.map_err(|r| r.message)?;
        let mut told = HashSet::new();
        loop {
            let ended = follow.ended();
            let record = &follow.run().record;
            let waiting_since = waiting_since(&record.state);
            let task = call::get(
                &self.client,
                &self.ns,
                &s.workflow,
                &s.task_id,
                self.signer.as_ref(),
            )
            .await
            .map_err(|r| r.message)?;
            let state = task.status.state;
            // The occurrence of input-required is read from the record followed; a task
            // that says it waits before the record shows it is told at the next change.
            let occurrence = match (state, waiting_since) {
                (messages::a2a::TaskState::InputRequired, Some(at)) => {
                    Some(format!("input-required-{at}"))
                }
                (state, _) if state.is_terminal() => Some(state_name(state)),
                _ => None,
            };
            if let Some(occurrence) = occurrence {
                if told.insert(occurrence.clone()) {
                    self.notify(store, key, &s, task, &occurrence).await;
                }
                if state.is_terminal() {
                    return Ok(());
                }
            }
            if ended {
                return Ok(());
            }
            // After the last change (`None`), the next turn sees the run ended.
            follow.next().await.map_err(|r| r.message)?;
        }
    }

    /// Claims (or takes over, once its claimant's lease lapsed) and sends the
    /// notification of `task` for config `key` and `occurrence`.
    async fn notify(
        &self,
        store: &kv::Store,
        key: &str,
        s: &Stored,
        task: messages::Task,
        occurrence: &str,
    ) {
        let claim = format!("sent.{}.{occurrence}", key.trim_start_matches("cfg."));
        let mine = Claim::Held {
            by: self.holder.clone(),
        };
        let revision = match store.create(&claim, mine.bytes()).await {
            Ok(revision) => revision,
            Err(_) => match self.take_over(store, key, &claim).await {
                Some(revision) => revision,
                None => return,
            },
        };
        // A config deleted since is not notified.
        if !matches!(store.get(key).await, Ok(Some(_))) {
            let _ = store.update(&claim, Claim::GivenUp.bytes(), revision).await;
            return;
        }
        let task = super::super::tasks::task_value(task, &s.task_id, &s.context_id);
        let (body, media) = match s.version.as_str() {
            "1.0" => (
                serde_json::json!({"task": super::super::v1::task(&task)}),
                "application/a2a+json",
            ),
            _ => (task, "application/json"),
        };
        let body = body.to_string().into_bytes();
        let id = claim.trim_start_matches("sent.");
        let sending = self.send(s, &body, media, id);
        tokio::pin!(sending);
        let every = self.lease / 3;
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut revision = revision;
        let outcome = loop {
            tokio::select! {
                delivered = &mut sending => break if delivered { Claim::Delivered } else { Claim::GivenUp },
                _ = renew.tick() => match store.update(&claim, mine.bytes(), revision).await {
                    Ok(r) => revision = r,
                    Err(e) => {
                        // Another replica took it over (this one was silent a whole lease):
                        // it sends now.
                        tracing::info!("push notification {claim}: lease lost ({e}); leaving it to its new claimant");
                        return;
                    }
                },
            }
        };
        if let Err(e) = store.update(&claim, outcome.bytes(), revision).await {
            tracing::info!("push notification {claim}: sent, but the lease was lost ({e})");
        }
    }

    /// Watches a claim held by another replica until it is settled (`None`) or its holder
    /// has renewed nothing for a whole lease: then takes it over, with a compare-and-swap
    /// on the revision seen, and returns the new revision.
    async fn take_over(&self, store: &kv::Store, key: &str, claim: &str) -> Option<u64> {
        let mine = Claim::Held {
            by: self.holder.clone(),
        };
        loop {
            let seen = match store.entry(claim).await {
                Ok(Some(e)) if e.operation == kv::Operation::Put => e,
                // Gone (purged, or deleted with its config): nothing to send.
                Ok(_) => return None,
                Err(e) => {
                    tracing::debug!("push notification {claim}: reading the claim: {e}");
                    return None;
                }
            };
            if Claim::read(&seen.value).settled() {
                return None;
            }
            if !matches!(store.get(key).await, Ok(Some(_))) {
                return None;
            }
            // A lease timer, not a synchronisation: the holder renews well within it.
            tokio::time::sleep(self.lease).await;
            match store.entry(claim).await {
                Ok(Some(now)) if now.revision == seen.revision => {
                    if let Ok(revision) = store.update(claim, mine.bytes(), seen.revision).await {
                        tracing::info!(
                            "push notification {claim}: taken over from a silent replica"
                        );
                        return Some(revision);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("push notification {claim}: reading the claim: {e}");
                    return None;
                }
            }
        }
    }

    /// POSTs `body` until the receiver takes it (true) or every try failed (false).
    async fn send(&self, s: &Stored, body: &[u8], media: &str, id: &str) -> bool {
        let mut wait = FIRST_WAIT;
        for attempt in 1..=TRIES {
            match self.post(s, body, media, id).await {
                Ok(()) => return true,
                Err(Failed::Certificate(e)) => {
                    tracing::warn!(
                        "push notification {id} given up: the receiver's TLS certificate was \
                         refused (check --push-ca-file, or the system's roots without one): {e}"
                    );
                    return false;
                }
                Err(Failed::Again(e)) => tracing::info!(
                    "push notification {id} (try {attempt} of {TRIES}) not taken: {e}"
                ),
            }
            if attempt < TRIES {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_WAIT);
            }
        }
        tracing::warn!("push notification {id} given up after {TRIES} tries");
        false
    }

    /// One POST of `body`, notification `id`, to the config's URL (checked again, and
    /// connected to the address checked).
    async fn post(&self, s: &Stored, body: &[u8], media: &str, id: &str) -> Result<(), Failed> {
        let c = &s.config;
        let url = guard::parse(&c.url).map_err(Failed::Again)?;
        let addr = guard::resolve(&url, self.allow_private)
            .await
            .map_err(Failed::Again)?;
        let host = url.host_str().unwrap_or_default().to_owned();
        // Pinned to the address checked; an https certificate is still checked against
        // the URL's host name.
        let http = agent_sdk::crypto::client_builder(self.ca.as_ref())
            .redirect(reqwest::redirect::Policy::none())
            .timeout(POST_TIMEOUT)
            .resolve(&host, addr)
            .build()
            .map_err(|e| Failed::Again(agent_sdk::crypto::error_chain(&e)))?;
        let mut req = http
            .post(url)
            .header("content-type", media)
            .header("mesh-push-id", id)
            .body(body.to_vec());
        if let Some(token) = &c.token {
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
                .to_string();
            let config_id = c.id.as_deref().unwrap_or_default();
            req = req
                .header("x-a2a-notification-token", token)
                .header("mesh-push-timestamp", &at)
                .header(
                    "mesh-push-signature",
                    format!("v1={}", signature(token, &at, config_id, body)),
                );
        }
        if let (Some(scheme), Some(credentials)) = (&c.scheme, &c.credentials) {
            req = req.header("authorization", format!("{scheme} {credentials}"));
        }
        let answer = req.send().await.map_err(|e| {
            let text = agent_sdk::crypto::error_chain(&e);
            if agent_sdk::crypto::refused_certificate(&e) {
                Failed::Certificate(text)
            } else {
                Failed::Again(text)
            }
        })?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(Failed::Again(format!(
                "the receiver answered {}",
                answer.status()
            )))
        }
    }
}

/// Why a POST was not taken.
enum Failed {
    /// Worth another try: unreachable, refused by the guard for now, not 2xx.
    Again(String),
    /// The receiver's TLS certificate was refused: no try can pass until it or the CA
    /// file changes.
    Certificate(String),
}

/// When the run's earliest waiting node began waiting (ms), if a node waits: the same
/// for every replica that reads the record, so it names one occurrence of input-required.
fn waiting_since(state: &crate::core::Execution) -> Option<u64> {
    state
        .nodes
        .values()
        .filter(|n| n.status == crate::core::NodeStatus::Waiting)
        .map(|n| n.started_at.map_or(0, |m| m.0))
        .min()
}

/// A task state's wire name (`completed`, `input-required`, ...).
fn state_name(state: messages::a2a::TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The set of followed configs, even if a follower panicked while holding it.
fn lock(set: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The notification's MAC (see the module doc), as lowercase hex.
pub(crate) fn signature(token: &str, at: &str, config_id: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(format!("a2a-push-v1\n{at}\n{config_id}\n").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_time_config_and_body() {
        let s = signature("tok", "1700000000000", "c1", b"{}");
        assert_eq!(s.len(), 64);
        assert_ne!(s, signature("tok", "1700000000001", "c1", b"{}"));
        assert_ne!(s, signature("tok", "1700000000000", "c2", b"{}"));
        assert_ne!(s, signature("tok", "1700000000000", "c1", b"{ }"));
        assert_ne!(s, signature("tol", "1700000000000", "c1", b"{}"));
    }
}
