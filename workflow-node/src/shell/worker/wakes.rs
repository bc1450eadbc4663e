//! Durable timers, kept as wakes (see `run::wake`). A wake is a KV entry
//! (`{workflow}.{execution}.{timer}` → when and what) in the wakes bucket; every replica
//! watches the bucket and arms every entry, so one dying loses none. When a
//! timer comes due, replicas publish `TimerFired` into the run's event stream with a message
//! id that makes the stream keep one copy, then purge the entry.
//!
//! A timer fires no earlier than its deadline by the servers' clock as the firing replica
//! estimates it from what they stored (`shell::clock`), not by its own: a sleep may
//! end early (it runs on the monotonic clock, deadlines are wall-clock milliseconds), so
//! what fires is decided by [`Armed::take_due`] against `now()` read after waking, and
//! the rest stay armed. An entry that is not a timer is purged with a warning: left in
//! place, it would be read again by every replica on every start.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Operation};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::core::{Event, ExecutionId, Millis, TimerId};
use crate::shell::context::now;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Result};
use crate::shell::run::envelope::Envelope;
use crate::shell::run::wake::Wake;
use crate::shell::store::events::publish_event;

/// One armed timer, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeEntry {
    /// Name of the workflow whose event stream the firing is published to.
    pub workflow: String,
    /// The run that receives `TimerFired`; with `workflow` it picks the stream subject.
    pub execution: ExecutionId,
    /// Carried back in `TimerFired`; the core ignores it if it no longer matches the run's
    /// state (stale attempt, ended node).
    pub timer: TimerId,
    /// Wall-clock deadline: it fires no earlier than this by the firing replica's clock.
    /// Also part of the firing's message id, so a re-armed timer fires anew.
    pub at: Millis,
    /// For a run's wake (see `wake`): the commit that armed it. Its firing then fires
    /// every pending timer of the run due by `at`; `timer` is the earliest of them when
    /// it was armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<u64>,
}

/// A timer armed from its entry: the record and the entry's revision (its firing removes
/// that revision only, never an entry written over it since).
type Held = (WakeEntry, u64);

/// How long a timer whose firing failed waits before the next try.
const RETRY: Duration = Duration::from_secs(1);

/// The timers a replica has armed, by key, and when each is next looked at: its deadline,
/// or, after a failed firing, the retry. No I/O and no clock: `now` comes in.
#[derive(Debug, Default)]
pub(crate) struct Armed {
    records: HashMap<String, (Millis, Held)>,
    wakes: BTreeSet<(Millis, String)>,
}

impl Armed {
    /// Arms `rec` under `key` for its deadline, replacing what was armed there.
    pub(crate) fn arm(&mut self, key: String, rec: Held) {
        let at = rec.0.at;
        self.arm_at(key, rec, at);
    }

    /// Arms `rec` to be looked at again at `wake` (a retry); the record, and so the message
    /// id of its firing, is unchanged.
    pub(crate) fn arm_at(&mut self, key: String, rec: Held, wake: Millis) {
        self.disarm(&key);
        self.wakes.insert((wake, key.clone()));
        self.records.insert(key, (wake, rec));
    }

    /// Forgets the timer under `key`, if armed.
    pub(crate) fn disarm(&mut self, key: &str) {
        if let Some((wake, _)) = self.records.remove(key) {
            self.wakes.remove(&(wake, key.to_owned()));
        }
    }

    /// When the earliest armed timer is next due.
    pub(crate) fn next_wake(&self) -> Option<Millis> {
        self.wakes.first().map(|(at, _)| *at)
    }

    /// Takes out the timers due by `now` (wake time at or before it), earliest first; the
    /// others stay armed, to be looked at again at [`next_wake`](Self::next_wake).
    pub(crate) fn take_due(&mut self, now: Millis) -> Vec<(String, Held)> {
        let mut due = Vec::new();
        while let Some((wake, key)) = self.wakes.first().cloned() {
            if wake > now {
                break;
            }
            self.wakes.remove(&(wake, key.clone()));
            if let Some((_, rec)) = self.records.remove(&key) {
                due.push((key, rec));
            }
        }
        due
    }
}

/// Arms every timer of the bucket and fires them when due. Runs until the watch ends for
/// good; a broken watch is re-created with a backoff.
pub(in crate::shell) async fn run(shared: Arc<Shared>) {
    let mut armed = Armed::default();
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut watch = match shared.wakes.watch_with_history(">").await {
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
            let next = armed.next_wake();
            let sleep = match next {
                Some(at) => Duration::from_millis(at.0.saturating_sub(now().0)),
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                entry = watch.next() => {
                    let Some(entry) = entry else { break };
                    match entry {
                        Ok(entry) => on_entry(&shared, &mut armed, entry).await,
                        Err(e) => tracing::debug!("timer watch: {e}"),
                    }
                }
                _ = tokio::time::sleep(sleep), if next.is_some() => {
                    let now = now();
                    for (key, rec) in armed.take_due(now) {
                        if let Err(e) = fire(&shared, &key, &rec).await {
                            // The entry is still in the bucket: try again shortly.
                            tracing::warn!("timer {key} could not fire: {e}");
                            armed.arm_at(key, rec, now.plus(RETRY));
                        }
                    }
                }
            }
        }
        tracing::warn!("timer watch ended; re-creating it");
    }
}

/// Arms, re-arms or disarms the timer of one watched entry; purges one that is not a timer.
async fn on_entry(shared: &Shared, armed: &mut Armed, entry: Entry) {
    crate::shell::clock::observe(entry.created.unix_timestamp_nanos());
    armed.disarm(&entry.key);
    if entry.operation != Operation::Put {
        return;
    }
    match serde_json::from_slice::<WakeEntry>(&entry.value) {
        Ok(rec) => armed.arm(entry.key, (rec, entry.revision)),
        Err(e) => {
            tracing::warn!(
                "timer entry {} (revision {}) is not a timer ({e}): purging it",
                entry.key,
                entry.revision
            );
            // Only this revision: a timer written over it in the meantime stays.
            if let Err(e) = purge(shared, &entry.key, Some(entry.revision)).await {
                tracing::debug!("{e}");
            }
        }
    }
}

/// Publishes the timer's event and deletes its entry (the revision that fired).
async fn fire(shared: &Shared, key: &str, (rec, revision): &Held) -> Result<()> {
    let msg_id = messages::msg_id::timer_fired(key, rec.at.0);
    let mut envelope = Envelope::event(Event::TimerFired {
        timer: rec.timer.clone(),
    });
    envelope.wake = rec.wake.map(|n| Wake { at: rec.at, n });
    publish_event(shared, &rec.workflow, &rec.execution, &msg_id, &envelope).await?;
    if let Err(e) = purge(shared, key, Some(*revision)).await {
        tracing::debug!("{e}");
    }
    Ok(())
}

/// Removes the entry `key` (at `revision`, when given) with a purge whose marker expires,
/// so that fired timers leave nothing behind; a plain purge on a bucket without markers.
async fn purge(shared: &Shared, key: &str, revision: Option<u64>) -> Result<()> {
    let with_ttl = match revision {
        Some(rev) => {
            shared
                .wakes
                .purge_expect_revision_with_ttl(key, rev, Duration::from_secs(1))
                .await
        }
        None => {
            shared
                .wakes
                .purge_with_ttl(key, Duration::from_secs(1))
                .await
        }
    };
    if with_ttl.is_ok() {
        return Ok(());
    }
    shared
        .wakes
        .purge_expect_revision(key, revision)
        .await
        .context(|| format!("purging timer entry {key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(at: u64) -> Held {
        let rec = WakeEntry {
            workflow: "W".into(),
            execution: ExecutionId("e".into()),
            timer: TimerId::Deadline,
            at: Millis(at),
            wake: None,
        };
        (rec, 1)
    }

    fn keys(due: &[(String, Held)]) -> Vec<&str> {
        due.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn nothing_fires_before_its_deadline_and_the_rest_stay_armed() {
        let mut armed = Armed::default();
        armed.arm("a".into(), rec(1000));
        armed.arm("b".into(), rec(2000));
        // Woken early (a sleep rounded down, or the wall clock behind the monotonic one).
        assert!(armed.take_due(Millis(999)).is_empty());
        assert_eq!(armed.next_wake(), Some(Millis(1000)));
        assert_eq!(keys(&armed.take_due(Millis(1000))), ["a"]);
        assert_eq!(armed.next_wake(), Some(Millis(2000)));
        assert_eq!(keys(&armed.take_due(Millis(5000))), ["b"]);
        assert_eq!(armed.next_wake(), None);
    }

    #[test]
    fn due_timers_fire_earliest_first() {
        let mut armed = Armed::default();
        armed.arm("late".into(), rec(30));
        armed.arm("early".into(), rec(10));
        armed.arm("later".into(), rec(40));
        assert_eq!(keys(&armed.take_due(Millis(30))), ["early", "late"]);
        assert_eq!(armed.next_wake(), Some(Millis(40)));
    }

    #[test]
    fn a_rewritten_or_removed_entry_rearms_or_disarms() {
        let mut armed = Armed::default();
        armed.arm("a".into(), rec(10));
        armed.arm("a".into(), rec(50));
        assert!(armed.take_due(Millis(20)).is_empty());
        assert_eq!(armed.next_wake(), Some(Millis(50)));
        armed.disarm("a");
        assert_eq!(armed.next_wake(), None);
        assert!(armed.take_due(Millis(100)).is_empty());
    }

    #[test]
    fn a_retry_wakes_later_but_keeps_the_deadline_that_names_the_firing() {
        let mut armed = Armed::default();
        armed.arm("a".into(), rec(10));
        let (key, r) = armed.take_due(Millis(10)).remove(0);
        armed.arm_at(key, r, Millis(1010));
        assert!(armed.take_due(Millis(1009)).is_empty());
        let due = armed.take_due(Millis(1010));
        assert_eq!(
            due[0].1 .0.at,
            Millis(10),
            "the message id stays that of the deadline"
        );
    }
}
