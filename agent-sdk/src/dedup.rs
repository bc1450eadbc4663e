//! De-duplication of requests by task id, without I/O: which calls run here, who else waits
//! for their answer, and the outcomes of calls that finished recently.
//!
//! Requests arrive at least once: a workflow node re-dispatches an attempt with the same
//! sub-task id after a crash, and callers resend a request with the same task id when they
//! hear nothing (see `client`). A copy of a running call never runs the handler again: it
//! joins the running call and gets the same answer at its own reply address, or is dropped
//! when that address already gets it. A copy of a call that finished recently is answered
//! from [`Recent`] at once. Canceled calls are not remembered, so a cancel never decides
//! the answer to a later request.
//!
//! Calls are keyed by [`Call::dedup_key`]: the task id, and the call token when the request
//! carries one. A request that names a workflow's call by its task id without the token is
//! another call: it neither joins the real one (and receives its answer) nor, sent first,
//! makes the real one a copy of itself (and decides its answer). Such a call is cancelled
//! only by a cancel proven with its token.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::protocol::{Call, Known, Outcome};

/// What to do with a request, given the calls running and finished here.
#[derive(Debug)]
pub(crate) enum Admission {
    /// The first copy: run it; `canceled` fires on a `tasks/cancel` of its task.
    Run {
        seq: u64,
        canceled: oneshot::Receiver<()>,
    },
    /// A copy of a running call with another reply address: it is answered when the call
    /// ends. `started` tells whether the handler runs yet (or waits for a permit).
    Joined { started: bool },
    /// A copy of a running call whose reply address already gets the answer (or that has
    /// none).
    Dropped { started: bool },
    /// A copy of a call that finished recently: answer it with this outcome.
    Answered(Outcome),
}

/// The calls of one agent, by de-duplication key.
#[derive(Debug)]
pub(crate) struct Calls {
    next: u64,
    running: HashMap<String, InFlight>,
    recent: Recent<Outcome>,
}

#[derive(Debug)]
struct InFlight {
    seq: u64,
    started: bool,
    /// Taken by the first cancel.
    cancel: Option<oneshot::Sender<()>>,
    /// The reply addresses already answered when the call ends: the call's own first.
    reply_to: Vec<Option<String>>,
    waiters: Vec<Call>,
}

impl Calls {
    /// No calls, remembering up to `capacity` finished ones for `window`.
    pub(crate) fn new(capacity: usize, window: Duration) -> Self {
        Calls {
            next: 0,
            running: HashMap::new(),
            recent: Recent::new(capacity, window),
        }
    }

    /// Decides what to do with `call`, registering it when it is to run or to wait.
    pub(crate) fn admit(&mut self, call: &Call, now: Instant) -> Admission {
        let key = call.dedup_key();
        if let Some(running) = self.running.get_mut(&key) {
            let started = running.started;
            if call.reply_to.is_none() || running.reply_to.contains(&call.reply_to) {
                return Admission::Dropped { started };
            }
            running.reply_to.push(call.reply_to.clone());
            running.waiters.push(call.clone());
            return Admission::Joined { started };
        }
        if let Some(outcome) = self.recent.get(&key, now) {
            return Admission::Answered(outcome.clone());
        }
        let (tx, rx) = oneshot::channel();
        self.next += 1;
        let seq = self.next;
        self.running.insert(
            key,
            InFlight {
                seq,
                started: false,
                cancel: Some(tx),
                reply_to: vec![call.reply_to.clone()],
                waiters: Vec::new(),
            },
        );
        Admission::Run { seq, canceled: rx }
    }

    /// What is known of task `task_id`: running here, or ended here recently. A call made
    /// with a token is not told of (`tasks/get` carries no proof).
    pub(crate) fn known(&mut self, task_id: &str, now: Instant) -> Option<Known> {
        if let Some(running) = self.running.get(task_id) {
            return Some(Known::Running {
                started: running.started,
            });
        }
        self.recent.get(task_id, now).cloned().map(Known::Ended)
    }

    /// Notes that the handler of call `seq` (key `key`) got its permit and runs.
    pub(crate) fn started(&mut self, key: &str, seq: u64) {
        if let Some(running) = self.running.get_mut(key).filter(|r| r.seq == seq) {
            running.started = true;
        }
    }

    /// Signals the call running `task_id`: one made without a token, or one whose token
    /// `proven` accepts (the cancel's `Mesh-Call-Mac` verifies under it). Whether one runs
    /// here.
    pub(crate) fn cancel(&mut self, task_id: &str, proven: impl Fn(&str) -> bool) -> bool {
        let found =
            self.running
                .iter_mut()
                .find(|(key, _)| match crate::protocol::split_dedup_key(key) {
                    (id, None) => id == task_id,
                    (id, Some(token)) => id == task_id && proven(token),
                });
        match found {
            Some((_, running)) => {
                if let Some(tx) = running.cancel.take() {
                    let _ = tx.send(());
                }
                true
            }
            None => false,
        }
    }

    /// Call `seq` ended with `outcome`: it stops running, its outcome is remembered (unless
    /// canceled), and the copies waiting for it are returned to be answered too.
    pub(crate) fn finish(
        &mut self,
        key: &str,
        seq: u64,
        outcome: &Outcome,
        now: Instant,
    ) -> Vec<Call> {
        let Some(running) = self.remove(key, seq) else {
            return Vec::new();
        };
        if *outcome != Outcome::Canceled {
            self.recent.insert(key.to_owned(), outcome.clone(), now);
        }
        running.waiters
    }

    /// Forgets call `seq` without an outcome (its task ended abnormally).
    pub(crate) fn abandon(&mut self, key: &str, seq: u64) {
        self.remove(key, seq);
    }

    fn remove(&mut self, key: &str, seq: u64) -> Option<InFlight> {
        match self.running.get(key) {
            Some(r) if r.seq == seq => self.running.remove(key),
            _ => None,
        }
    }
}

/// The values of the last `capacity` keys inserted within `window`; older ones are
/// forgotten, so memory stays bounded however many requests pass.
#[derive(Debug)]
pub(crate) struct Recent<T> {
    capacity: usize,
    window: Duration,
    order: VecDeque<(String, Instant)>,
    values: HashMap<String, T>,
}

impl<T> Recent<T> {
    pub(crate) fn new(capacity: usize, window: Duration) -> Self {
        Recent {
            capacity,
            window,
            order: VecDeque::new(),
            values: HashMap::new(),
        }
    }

    /// Remembers `value` for `key` (a key already present keeps its place and age).
    pub(crate) fn insert(&mut self, key: String, value: T, now: Instant) {
        if self.capacity == 0 {
            return;
        }
        if self.values.insert(key.clone(), value).is_none() {
            self.order.push_back((key, now));
        }
        self.evict(now);
    }

    /// The value remembered for `key`, if it is not too old.
    pub(crate) fn get(&mut self, key: &str, now: Instant) -> Option<&T> {
        self.evict(now);
        self.values.get(key)
    }

    fn evict(&mut self, now: Instant) {
        while let Some((key, at)) = self.order.front() {
            let expired = now.saturating_duration_since(*at) >= self.window;
            if !expired && self.order.len() <= self.capacity {
                break;
            }
            self.values.remove(key);
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode, Decoded, Output};
    use serde_json::{json, Value};

    fn call(task: &str, reply: Option<&str>) -> Call {
        let body = json!({"jsonrpc": "2.0", "id": task, "method": "message/send",
            "params": {"message": {"kind": "message", "messageId": task, "role": "user",
                "taskId": task, "parts": []}}});
        match decode(&serde_json::to_vec(&body).unwrap(), None, reply) {
            Decoded::Send(c) => *c,
            other => panic!("not a send: {other:?}"),
        }
    }

    fn done(v: Value) -> Outcome {
        Outcome::Success(Output::Inline(v))
    }

    fn seq(a: Admission) -> u64 {
        match a {
            Admission::Run { seq, .. } => seq,
            other => panic!("expected to run, got {other:?}"),
        }
    }

    #[test]
    fn copies_of_a_running_call_join_or_are_dropped_then_are_answered_from_memory() {
        let now = Instant::now();
        let mut calls = Calls::new(10, Duration::from_secs(60));
        let s = seq(calls.admit(&call("t", Some("a")), now));
        assert!(matches!(
            calls.admit(&call("t", Some("a")), now),
            Admission::Dropped { started: false }
        ));
        calls.started("t", s);
        assert!(matches!(
            calls.admit(&call("t", Some("b")), now),
            Admission::Joined { started: true }
        ));
        assert!(matches!(
            calls.admit(&call("t", Some("b")), now),
            Admission::Dropped { .. }
        ));
        assert!(matches!(
            calls.admit(&call("t", None), now),
            Admission::Dropped { .. }
        ));
        let waiters = calls.finish("t", s, &done(json!(1)), now);
        let replies: Vec<_> = waiters.iter().map(|c| c.reply_to.as_deref()).collect();
        assert_eq!(replies, [Some("b")]);
        match calls.admit(&call("t", Some("c")), now) {
            Admission::Answered(o) => assert_eq!(o, done(json!(1))),
            other => panic!("expected an answer, got {other:?}"),
        }
        seq(calls.admit(&call("u", Some("a")), now));
    }

    #[test]
    fn a_task_is_known_while_it_runs_and_after_it_ended() {
        let now = Instant::now();
        let mut calls = Calls::new(10, Duration::from_secs(60));
        assert_eq!(calls.known("t", now), None);
        let s = seq(calls.admit(&call("t", Some("a")), now));
        assert_eq!(
            calls.known("t", now),
            Some(Known::Running { started: false })
        );
        calls.started("t", s);
        assert_eq!(
            calls.known("t", now),
            Some(Known::Running { started: true })
        );
        calls.finish("t", s, &done(json!(1)), now);
        assert_eq!(calls.known("t", now), Some(Known::Ended(done(json!(1)))));
        assert_eq!(calls.known("t", now + Duration::from_secs(61)), None);
    }

    #[test]
    fn canceled_calls_are_not_remembered() {
        let now = Instant::now();
        let mut calls = Calls::new(10, Duration::from_secs(60));
        let s = seq(calls.admit(&call("t", Some("a")), now));
        assert!(calls.cancel("t", |_| false));
        assert!(
            calls.cancel("t", |_| false),
            "still running until it answers"
        );
        assert!(calls.finish("t", s, &Outcome::Canceled, now).is_empty());
        assert!(!calls.cancel("t", |_| false));
        seq(calls.admit(&call("t", Some("a")), now));
    }

    #[test]
    fn a_stale_sequence_number_changes_nothing() {
        let now = Instant::now();
        let mut calls = Calls::new(10, Duration::from_secs(60));
        let s = seq(calls.admit(&call("t", Some("a")), now));
        calls.abandon("t", s + 1);
        assert!(calls.finish("t", s + 1, &done(json!(1)), now).is_empty());
        assert!(matches!(
            calls.admit(&call("t", Some("a")), now),
            Admission::Dropped { .. }
        ));
        calls.abandon("t", s);
        seq(calls.admit(&call("t", Some("a")), now));
    }

    #[test]
    fn a_call_made_with_a_token_is_neither_joined_nor_pre_empted_without_it() {
        let now = Instant::now();
        let mut calls = Calls::new(10, Duration::from_secs(60));
        let with = |token: &str, reply: &str| Call {
            token: Some(token.into()),
            ..call("t", Some(reply))
        };
        // A forger sends first under the task id; the real call still runs, and answers.
        let forged = seq(calls.admit(&call("t", Some("forger")), now));
        let real = seq(calls.admit(&with("k1", "wf"), now));
        assert_ne!(forged, real);
        // A copy with the token joins; one with another token is another call.
        assert!(matches!(
            calls.admit(&with("k1", "other"), now),
            Admission::Joined { .. }
        ));
        seq(calls.admit(&with("k2", "wf"), now));
        // Cancels: a call made with a token only with the proof of that token.
        assert!(calls.cancel("t", |_| false), "the tokenless one");
        assert!(!calls.cancel("u", |_| true));
        let mut cancels = Calls::new(10, Duration::from_secs(60));
        seq(cancels.admit(&with("k1", "wf"), now));
        assert!(!cancels.cancel("t", |_| false));
        assert!(!cancels.cancel("t", |token| token == "k2"));
        assert!(cancels.cancel("t", |token| token == "k1"));
        // It finishes under its key; only its copies are answered from memory.
        let key = with("k1", "wf").dedup_key();
        calls.finish(&key, real, &done(json!(1)), now);
        assert!(matches!(
            calls.admit(&with("k1", "wf"), now),
            Admission::Answered(_)
        ));
        assert_eq!(
            calls.known("t", now),
            Some(Known::Running { started: false })
        );
    }

    #[test]
    fn memory_is_bounded_by_count_and_age() {
        let t0 = Instant::now();
        let mut recent = Recent::new(2, Duration::from_secs(60));
        recent.insert("a".into(), 1, t0);
        recent.insert("b".into(), 2, t0 + Duration::from_secs(30));
        recent.insert("c".into(), 3, t0 + Duration::from_secs(31));
        assert_eq!(recent.get("a", t0 + Duration::from_secs(31)), None);
        assert_eq!(recent.get("b", t0 + Duration::from_secs(31)), Some(&2));
        assert_eq!(recent.get("b", t0 + Duration::from_secs(90)), None);
        assert_eq!(recent.get("c", t0 + Duration::from_secs(90)), Some(&3));
        let mut off = Recent::new(0, Duration::from_secs(60));
        off.insert("a".into(), 1, t0);
        assert_eq!(off.get("a", t0), None);
    }
}
