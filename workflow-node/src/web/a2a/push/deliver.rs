//! Sending push notifications: every door process watches the configs' bucket, follows
//! the run of each config it has not followed yet, and when the task reaches
//! `input-required` or a final state, claims the notification in the bucket (`create` of
//! `sent.{execution}.{id}.{state}`: the first replica's create wins, the others skip it)
//! and POSTs it, retrying with back-off (from 0.5 s doubling to 60 s, 12 tries) while the
//! receiver is down or answers other than 2xx. So a config gets one notification per state
//! even with many replicas; a replica that dies after claiming one leaves it unsent.
//!
//! The POST (`docs/a2a.md`, "Push notifications"): the task as `tasks/get` answers it, in
//! the version the config was set in (0.3: the `Task`; 1.0: `{"task": …}` as
//! `application/a2a+json`); `X-A2A-Notification-Token` with the config's token; the
//! config's `Authorization` (scheme and credentials); and, with a token,
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
        while let Some(entry) = watch.next().await {
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
            tokio::spawn(async move {
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
        let mut told_waiting = false;
        loop {
            let ended = follow.ended();
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
            let waiting = state == messages::a2a::TaskState::InputRequired;
            if state.is_terminal() || (waiting && !told_waiting) {
                told_waiting |= waiting;
                self.notify(store, key, &s, task).await;
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

    /// Claims and sends the notification of `task`'s state for config `key`.
    async fn notify(&self, store: &kv::Store, key: &str, s: &Stored, task: messages::Task) {
        // A config deleted since is not notified.
        if !matches!(store.get(key).await, Ok(Some(_))) {
            return;
        }
        let state = serde_json::to_value(task.status.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let claim = format!("sent.{}.{state}", key.trim_start_matches("cfg."));
        if store.create(&claim, "claimed".into()).await.is_err() {
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
        let mut wait = FIRST_WAIT;
        for attempt in 1..=TRIES {
            match self.post(s, &body, media).await {
                Ok(()) => {
                    let _ = store.put(&claim, "delivered".into()).await;
                    return;
                }
                Err(e) => tracing::info!(
                    "push notification {claim} (try {attempt} of {TRIES}) not taken: {e}"
                ),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_WAIT);
        }
        tracing::warn!("push notification {claim} given up after {TRIES} tries");
    }

    /// One POST of `body` to the config's URL (checked again, and connected to the address
    /// checked).
    async fn post(&self, s: &Stored, body: &[u8], media: &str) -> Result<(), String> {
        let c = &s.config;
        let url = guard::parse(&c.url)?;
        let addr = guard::resolve(&url, self.allow_private).await?;
        let host = url.host_str().unwrap_or_default().to_owned();
        agent_sdk::crypto::install();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(POST_TIMEOUT)
            .resolve(&host, addr)
            .build()
            .map_err(|e| e.to_string())?;
        let mut req = http
            .post(url)
            .header("content-type", media)
            .body(body.to_vec());
        if let Some(token) = &c.token {
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
                .to_string();
            let id = c.id.as_deref().unwrap_or_default();
            req = req
                .header("x-a2a-notification-token", token)
                .header("mesh-push-timestamp", &at)
                .header(
                    "mesh-push-signature",
                    format!("v1={}", signature(token, &at, id, body)),
                );
        }
        if let (Some(scheme), Some(credentials)) = (&c.scheme, &c.credentials) {
            req = req.header("authorization", format!("{scheme} {credentials}"));
        }
        let answer = req.send().await.map_err(|e| e.to_string())?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(format!("the receiver answered {}", answer.status()))
        }
    }
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
