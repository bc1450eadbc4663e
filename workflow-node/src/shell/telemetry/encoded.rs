//! How many bytes a node encodes into the server on its hot path: each run-record
//! compare-and-swap (a commit) and each event published into a run's stream.
//!
//! Kept as plain counters on the node (relaxed atomics, two additions per write) rather
//! than as metrics, because they serve the benchmark's "bytes per commit" and "bytes per
//! event" figures, read before and after a measurement; they cost nothing a run notices.

use std::sync::atomic::{AtomicU64, Ordering};

/// The counters, one set per node.
#[derive(Debug, Default)]
pub(in crate::shell) struct Encoded {
    commits: AtomicU64,
    commit_bytes: AtomicU64,
    events: AtomicU64,
    event_bytes: AtomicU64,
}

impl Encoded {
    /// One run-record compare-and-swap of `bytes` sent (whether or not it held).
    pub(in crate::shell) fn commit(&self, bytes: usize) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.commit_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// One event of `bytes` published into a run's stream (each try counts once).
    pub(in crate::shell) fn event(&self, bytes: usize) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.event_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// What was counted so far.
    pub(in crate::shell) fn counts(&self) -> EncodedCounts {
        EncodedCounts {
            commits: self.commits.load(Ordering::Relaxed),
            commit_bytes: self.commit_bytes.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            event_bytes: self.event_bytes.load(Ordering::Relaxed),
        }
    }
}

/// What a node encoded since it started: see [`crate::shell::WorkflowNode::encoded`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodedCounts {
    /// Run-record compare-and-swaps sent.
    pub commits: u64,
    /// Their payload bytes (the encoded record).
    pub commit_bytes: u64,
    /// Events published into runs' streams.
    pub events: u64,
    /// Their payload bytes (the encoded envelope).
    pub event_bytes: u64,
}

impl EncodedCounts {
    /// The counts between `before` and `self`.
    pub fn since(&self, before: &EncodedCounts) -> EncodedCounts {
        EncodedCounts {
            commits: self.commits.saturating_sub(before.commits),
            commit_bytes: self.commit_bytes.saturating_sub(before.commit_bytes),
            events: self.events.saturating_sub(before.events),
            event_bytes: self.event_bytes.saturating_sub(before.event_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_write_and_its_bytes() {
        let e = Encoded::default();
        e.commit(100);
        let before = e.counts();
        e.commit(40);
        e.event(7);
        e.event(9);
        let d = e.counts().since(&before);
        assert_eq!(
            d,
            EncodedCounts {
                commits: 1,
                commit_bytes: 40,
                events: 2,
                event_bytes: 16
            }
        );
    }
}
