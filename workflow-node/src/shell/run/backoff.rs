//! What a worker does with an event whose processing failed: try it again after a delay
//! that doubles with each failure (0.5 s up to 5 s), or, after `max_deliver` failures seen
//! by this worker, or at once when the failure cannot pass, give up on it and abandon its
//! run. A full store is not given up on: abandoning the run needs a write too, which it
//! refuses as well, so the run's caller would hear nothing; the event is tried again
//! every 5 s until space is made, and the run then goes on. Failures are counted, not deliveries: an event delivered again because the replica
//! holding it died has not failed.

use std::collections::HashMap;
use std::time::Duration;

use crate::shell::error::Error;

/// The slowest retry.
const LONGEST: Duration = Duration::from_secs(5);
/// Failures remembered at most (events of runs that moved on are forgotten first).
const REMEMBERED: usize = 10_000;

/// What to do with an event that failed.
#[derive(Debug, PartialEq)]
pub(in crate::shell) enum Next {
    /// Give it back to the stream, to come again after this delay.
    Retry(Duration),
    /// Abandon its run, for this reason.
    Abandon(String),
}

/// Failures per event (by stream sequence), as this worker saw them.
#[derive(Default)]
pub(in crate::shell) struct Failures {
    counts: HashMap<u64, u32>,
}

impl Failures {
    /// Records that event `seq` failed with `error`; what to do next. `max` failures
    /// abandon the run; a permanent error abandons it at once.
    pub(in crate::shell) fn failed(&mut self, seq: u64, error: &Error, max: u32) -> Next {
        if self.counts.len() >= REMEMBERED {
            self.counts.clear();
        }
        let n = self.counts.entry(seq).or_insert(0);
        *n += 1;
        if error.is_permanent() {
            return Next::Abandon(format!(
                "an event of the run could not be processed: {error}"
            ));
        }
        // A full store passes only when space is made: the run waits for it (see
        // `Error::is_store_full`), its event coming back every few seconds.
        if *n >= max.max(1) && !error.is_store_full() {
            return Next::Abandon(format!(
                "an event of the run could not be processed in {n} tries: {error}"
            ));
        }
        let delay = Duration::from_millis(500).saturating_mul(1 << (*n - 1).min(10));
        Next::Retry(delay.min(LONGEST))
    }

    /// Forgets event `seq`: it was processed.
    pub(in crate::shell) fn done(&mut self, seq: u64) {
        self.counts.remove(&seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ExecutionId;

    fn lost() -> Error {
        Error::Connection {
            context: "writing".into(),
            source: "connection lost".into(),
        }
    }

    #[test]
    fn failures_are_retried_with_a_doubling_delay_then_the_run_is_abandoned() {
        let mut f = Failures::default();
        let delays: Vec<Next> = (0..4).map(|_| f.failed(7, &lost(), 6)).collect();
        assert_eq!(
            delays,
            vec![
                Next::Retry(Duration::from_millis(500)),
                Next::Retry(Duration::from_secs(1)),
                Next::Retry(Duration::from_secs(2)),
                Next::Retry(Duration::from_secs(4)),
            ]
        );
        assert_eq!(f.failed(7, &lost(), 6), Next::Retry(LONGEST));
        match f.failed(7, &lost(), 6) {
            Next::Abandon(reason) => assert!(reason.contains("in 6 tries"), "{reason}"),
            other => panic!("expected the run abandoned, got {other:?}"),
        }
    }

    #[test]
    fn a_full_store_is_waited_for_never_abandoned() {
        assert!(Error::store_full_for_tests().is_store_full());
        assert!(!lost().is_store_full());
        let mut f = Failures::default();
        for _ in 0..20 {
            assert!(matches!(
                f.failed(3, &Error::store_full_for_tests(), 6),
                Next::Retry(_)
            ));
        }
        assert_eq!(
            f.failed(3, &Error::store_full_for_tests(), 6),
            Next::Retry(LONGEST)
        );
    }

    #[test]
    fn a_permanent_failure_abandons_at_once_and_a_success_is_forgotten() {
        let mut f = Failures::default();
        let too_large = Error::StateTooLarge {
            execution: ExecutionId("e".into()),
            size: 2,
            limit: 1,
        };
        assert!(matches!(f.failed(1, &too_large, 10), Next::Abandon(_)));
        f.failed(2, &lost(), 10);
        f.done(2);
        assert_eq!(
            f.failed(2, &lost(), 10),
            Next::Retry(Duration::from_millis(500))
        );
    }
}
