//! The node's clock: the servers' wall clock as this replica estimates it, not its own.
//!
//! What a replica decides by the clock (a timer due, an approval window closed, a final
//! reply's claim gone stale, a signature too old) is also judged by other replicas and by
//! the servers, whose clocks may disagree with its own by minutes. Every JetStream message
//! and KV entry it receives carries the time its stream's leader stored it; that time is
//! never later than when the replica receives it, so `stored - received`, by the
//! replica's clock, is a lower bound of the servers' clock less its own. The largest such
//! bound among recent samples is the offset [`now`] adds to the replica's clock: a replica
//! minutes ahead or behind reads the servers' time less the latency of the freshest
//! delivery, so it fires nothing early and, once it sees a fresh message, nothing late by
//! more than that latency.
//!
//! Limits: before its first sample a replica reads its own clock (its first wake entries,
//! read as it starts, are samples); an old message redelivered is a low sample and
//! changes nothing; a local clock stepped forward by its owner is trusted up to [`WINDOW`]
//! late, since the larger samples from before the step age out only then. The servers are
//! taken to agree with one another (they run NTP, or share a host as in the tests).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::core::Millis;

/// How long a sample counts: a local clock stepped forward is read as the servers' this
/// much at most after the step.
const WINDOW: Duration = Duration::from_secs(30);

/// The servers' clock less this process's, in milliseconds, as last estimated.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// The samples of the last [`WINDOW`].
static SAMPLES: Mutex<Samples> = Mutex::new(Samples(VecDeque::new()));

/// Recent samples, each with when it was taken, falling: only those larger than every
/// later one are kept, since the others can never be the largest.
struct Samples(VecDeque<(Instant, i64)>);

impl Samples {
    /// Adds `sample`, taken at `at`; the largest of the last [`WINDOW`] (`sample` itself
    /// when it is the only one).
    fn add(&mut self, at: Instant, sample: i64) -> i64 {
        while self.0.back().is_some_and(|&(_, s)| s <= sample) {
            self.0.pop_back();
        }
        self.0.push_back((at, sample));
        while self
            .0
            .front()
            .is_some_and(|&(t, _)| at.duration_since(t) > WINDOW)
        {
            self.0.pop_front();
        }
        self.0.front().map_or(sample, |&(_, s)| s)
    }
}

/// This process's own wall clock, in milliseconds since the epoch.
fn local_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The wall clock of the servers as this replica estimates it, in the core's unit.
pub fn now() -> Millis {
    let ms = local_ms().saturating_add(OFFSET_MS.load(Ordering::Relaxed));
    Millis(u64::try_from(ms).unwrap_or(0))
}

/// [`now`] as a `SystemTime`, for checks that take one (signature windows).
pub(crate) fn system_now() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(now().0)
}

/// Takes a sample: a message or entry the servers stored at `stored_ns` (a JetStream
/// timestamp, in nanoseconds since the epoch) was received just now.
pub(crate) fn observe(stored_ns: i128) {
    let stored_ms = stored_ns / 1_000_000;
    let Ok(stored_ms) = i64::try_from(stored_ms) else {
        return;
    };
    let sample = stored_ms.saturating_sub(local_ms());
    let mut samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let offset = samples.add(Instant::now(), sample);
    OFFSET_MS.store(offset, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The estimate's rule, on samples of its own: the process-wide one is every test's
    // clock, and is left alone.
    #[test]
    fn the_offset_is_the_largest_recent_sample() {
        let mut samples = Samples(VecDeque::new());
        let t0 = Instant::now();
        // Servers five minutes ahead, a message stored 20 ms before it arrived.
        assert_eq!(samples.add(t0, 300_000 - 20), 299_980);
        // An old message redelivered says less, and changes nothing.
        assert_eq!(samples.add(t0, -300_000), 299_980);
        // A fresher, faster delivery says more.
        assert_eq!(samples.add(t0, 299_999), 299_999);
        // Once the larger ones are older than the window, the newest counts: the local
        // clock was stepped forward by a minute.
        let later = t0 + WINDOW + Duration::from_secs(1);
        assert_eq!(samples.add(later, 240_000), 240_000);
    }
}
