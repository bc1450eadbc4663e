//! The slots of a workflow's flow control, shared by every replica, decided without I/O.
//!
//! One KV entry per *gate* (`{ns}_wf_flow`, key [`gate_key`]) holds the runs that hold a
//! slot and the runs waiting, ordered by (priority, arrival). A workflow with
//! `max_concurrent_runs` has one gate (every run counts against the total, and
//! `concurrency_key`'s `max` per key is checked inside it); one with `concurrency_key`
//! alone has a gate per key, so that keys do not contend on one entry. Every change is a
//! compare-and-swap of the whole entry (`worker/flow.rs`), so two replicas never hand out
//! one slot twice.
//!
//! Both operations are safe to carry out again, as the outbox does after a crash: an
//! admission of a run already there changes nothing, a release of a run not there frees
//! nothing, and a run released is remembered for a while ([`MAX_RELEASED`]) so that an
//! admission replayed late (its event redelivered after the run ended) does not queue it
//! again. After every change the shell publishes `Admitted` to *every* holder (one message
//! id per run, so the stream keeps one): a holder whose admission was lost with a replica
//! gets it again, and a holder that runs already ignores it.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::definition::FlowControl;

/// The most runs one gate keeps waiting: past it, a run is refused (it ends failed),
/// which bounds the entry (about 100 bytes a run).
pub(in crate::shell) const MAX_WAITING: usize = 5_000;
/// How many released runs a gate remembers, against admissions replayed late.
pub(in crate::shell) const MAX_RELEASED: usize = 512;

/// The KV key of the gate a run with concurrency key `key` waits at: `{workflow}.all`
/// under `max_concurrent_runs`, else `{workflow}.key.{hash}` (the key's SHA-256, so any
/// text makes a valid KV token; the entry keeps the text).
pub(in crate::shell) fn gate_key(workflow: &str, flow: &FlowControl, key: &str) -> String {
    if flow.max_runs.is_some() {
        return format!("{workflow}.all");
    }
    let digest = Sha256::digest(key.as_bytes());
    format!("{workflow}.key.{}", hex::encode(&digest[..16]))
}

/// A run that holds a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::shell) struct Holder {
    /// The run's execution id.
    pub(in crate::shell) run: String,
    /// Its concurrency key.
    pub(in crate::shell) key: String,
}

/// A run waiting for a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::shell) struct Waiter {
    /// The run's execution id.
    pub(in crate::shell) run: String,
    /// Its concurrency key.
    pub(in crate::shell) key: String,
    /// 1 (first) to 5 (last).
    pub(in crate::shell) priority: u8,
    /// Its arrival at this gate: ties of priority go to the earlier.
    pub(in crate::shell) seq: u64,
}

/// One gate's entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::shell) struct Gate {
    /// The runs holding a slot.
    #[serde(default)]
    pub(in crate::shell) holders: Vec<Holder>,
    /// The runs waiting, in arrival order (admission picks by priority first).
    #[serde(default)]
    pub(in crate::shell) waiting: Vec<Waiter>,
    /// The next arrival number.
    #[serde(default)]
    pub(in crate::shell) seq: u64,
    /// Runs released lately, oldest first (see the module doc).
    #[serde(default)]
    pub(in crate::shell) released: VecDeque<String>,
}

/// The limits a gate applies, from the definition the run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::shell) struct Limits {
    /// Holders at most, all keys together.
    pub(in crate::shell) total: Option<u32>,
    /// Holders at most with one key.
    pub(in crate::shell) per_key: Option<u32>,
}

impl Limits {
    /// The limits of a workflow's flow control.
    pub(in crate::shell) fn of(flow: &FlowControl) -> Limits {
        Limits {
            total: flow.max_runs,
            per_key: flow.per_key(),
        }
    }
}

/// What an admission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::shell) enum Admission {
    /// The run holds a slot (now or already).
    Holds,
    /// The run waits, at this place (0 is next).
    Waits(usize),
    /// The run was released already: nothing to do.
    Gone,
    /// Too many runs wait: the run is refused.
    Full,
}

impl Gate {
    /// Puts `run` among the holders if a slot is free, else in the queue. Runs that wait
    /// and fit (the limits were raised) are admitted too.
    pub(in crate::shell) fn admit(
        &mut self,
        run: &str,
        key: &str,
        priority: u8,
        limits: Limits,
    ) -> Admission {
        if self.released.iter().any(|r| r == run) {
            return Admission::Gone;
        }
        if !self.holds(run) && !self.waiting.iter().any(|w| w.run == run) {
            if self.waiting.len() >= MAX_WAITING {
                return Admission::Full;
            }
            self.waiting.push(Waiter {
                run: run.to_string(),
                key: key.to_string(),
                priority,
                seq: self.seq,
            });
            self.seq += 1;
        }
        self.fill(limits);
        match self.position(run) {
            Some(place) => Admission::Waits(place),
            None => Admission::Holds,
        }
    }

    /// Takes `run` out of the holders or the queue and remembers it; the runs that wait
    /// for the freed slot take it. Whether anything changed.
    pub(in crate::shell) fn release(&mut self, run: &str, limits: Limits) -> bool {
        let before = (self.holders.len(), self.waiting.len());
        self.holders.retain(|h| h.run != run);
        self.waiting.retain(|w| w.run != run);
        let known = self.released.iter().any(|r| r == run);
        if !known {
            self.released.push_back(run.to_string());
            while self.released.len() > MAX_RELEASED {
                self.released.pop_front();
            }
        }
        let moved = before != (self.holders.len(), self.waiting.len());
        self.fill(limits);
        moved || !known
    }

    /// Whether `run` holds a slot.
    pub(in crate::shell) fn holds(&self, run: &str) -> bool {
        self.holders.iter().any(|h| h.run == run)
    }

    /// `run`'s place in the queue (0 is next), by the order admission takes.
    pub(in crate::shell) fn position(&self, run: &str) -> Option<usize> {
        self.ordered().iter().position(|w| w.run == run)
    }

    /// The waiting runs in the order admission takes them: priority, then arrival.
    fn ordered(&self) -> Vec<&Waiter> {
        let mut order: Vec<&Waiter> = self.waiting.iter().collect();
        order.sort_by_key(|w| (w.priority, w.seq));
        order
    }

    /// Moves waiting runs into free slots, first by priority then by arrival; a run whose
    /// key is full keeps its place while later runs of other keys go ahead.
    fn fill(&mut self, limits: Limits) {
        loop {
            let total_free = limits.total.is_none_or(|t| self.holders.len() < t as usize);
            if !total_free {
                return;
            }
            let next = self.ordered().into_iter().find(|w| {
                limits.per_key.is_none_or(|m| {
                    self.holders.iter().filter(|h| h.key == w.key).count() < m as usize
                })
            });
            let Some(next) = next.map(|w| w.run.clone()) else {
                return;
            };
            let at = self
                .waiting
                .iter()
                .position(|w| w.run == next)
                .expect("the run was found among the waiting just now");
            let w = self.waiting.remove(at);
            self.holders.push(Holder {
                run: w.run,
                key: w.key,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_PER_KEY: Limits = Limits {
        total: None,
        per_key: Some(1),
    };

    #[test]
    fn a_slot_is_handed_once_and_the_queue_goes_by_priority_then_arrival() {
        let mut g = Gate::default();
        assert_eq!(g.admit("a", "k", 3, ONE_PER_KEY), Admission::Holds);
        assert_eq!(g.admit("b", "k", 3, ONE_PER_KEY), Admission::Waits(0));
        assert_eq!(g.admit("c", "k", 1, ONE_PER_KEY), Admission::Waits(0));
        assert_eq!(g.position("b"), Some(1));
        // Admitting again changes nothing.
        let before = g.clone();
        assert_eq!(g.admit("a", "k", 3, ONE_PER_KEY), Admission::Holds);
        assert_eq!(g.admit("b", "k", 3, ONE_PER_KEY), Admission::Waits(1));
        assert_eq!(g, before);
        assert!(g.release("a", ONE_PER_KEY));
        assert!(g.holds("c") && !g.holds("b"));
        // A release carried out again frees nothing more.
        assert!(!g.release("a", ONE_PER_KEY));
        assert!(!g.holds("b"));
        // An admission replayed after the release does not queue the run again.
        assert_eq!(g.admit("a", "k", 3, ONE_PER_KEY), Admission::Gone);
        assert_eq!(g.waiting.len(), 1);
    }

    #[test]
    fn under_a_total_a_full_key_lets_other_keys_pass() {
        let limits = Limits {
            total: Some(2),
            per_key: Some(1),
        };
        let mut g = Gate::default();
        assert_eq!(g.admit("a1", "a", 3, limits), Admission::Holds);
        assert_eq!(g.admit("a2", "a", 3, limits), Admission::Waits(0));
        assert_eq!(g.admit("b1", "b", 3, limits), Admission::Holds);
        assert_eq!(g.admit("c1", "c", 3, limits), Admission::Waits(1));
        g.release("b1", limits);
        // a2's key is still full: c1 goes first.
        assert!(g.holds("c1") && !g.holds("a2"));
        g.release("a1", limits);
        assert!(g.holds("a2"));
        assert_eq!(g.holders.len(), 2);
    }

    #[test]
    fn cancelled_waiters_leave_and_the_queue_is_bounded() {
        let mut g = Gate::default();
        g.admit("a", "k", 3, ONE_PER_KEY);
        g.admit("b", "k", 3, ONE_PER_KEY);
        g.release("b", ONE_PER_KEY);
        assert!(g.waiting.is_empty() && g.holds("a"));
        for i in 0..MAX_WAITING {
            g.admit(&format!("w{i}"), "k", 3, ONE_PER_KEY);
        }
        assert_eq!(g.admit("late", "k", 3, ONE_PER_KEY), Admission::Full);
        for i in 0..MAX_RELEASED + 10 {
            g.release(&format!("gone{i}"), ONE_PER_KEY);
        }
        assert_eq!(g.released.len(), MAX_RELEASED);
    }

    #[test]
    fn gate_keys_are_kv_tokens() {
        let keyed = crate::definition::parse_str(
            "name: W\nworkflow:\n  description: d\n  concurrency_key: {key: \"{{workflow.input.c}}\", max: 1}\n  nodes:\n    - {id: a, type: agent, agent_name: A}\n  output_mapping: {a: \"{{a.output}}\"}\n",
            "w.yaml",
        )
        .expect("valid");
        let k = gate_key("W", &keyed.flow, "a b.c*>");
        assert!(
            k.starts_with("W.key.") && k.len() == "W.key.".len() + 32,
            "{k}"
        );
        assert_ne!(k, gate_key("W", &keyed.flow, "other"));
    }
}
