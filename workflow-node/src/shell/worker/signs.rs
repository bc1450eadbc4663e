//! What this replica heard from the calls in flight: the last sign of life (a heartbeat or
//! status update) of each sub-task id, so that a liveness check (`run::check`) does not send
//! again a call that is plainly alive. In memory only, and only this replica's share of the
//! updates (they go to a queue group): hearing nothing here only costs a copy of the call.
//!
//! Bounded: entries older than the window are dropped as new ones come, and at most
//! [`MAX_HEARD`] are kept (the oldest go first).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most sub-task ids remembered at once.
pub(in crate::shell) const MAX_HEARD: usize = 65_536;

/// The last sign of life heard of each call, by plain sub-task id.
#[derive(Debug)]
pub(in crate::shell) struct SignsOfLife {
    window: Option<Duration>,
    heard: Mutex<HashMap<String, Instant>>,
}

impl SignsOfLife {
    /// Remembers signs of life for `window` (`None`: nothing is checked, nothing kept).
    pub(in crate::shell) fn new(window: Option<Duration>) -> SignsOfLife {
        SignsOfLife {
            window,
            heard: Mutex::default(),
        }
    }

    /// Notes a sign of life of `sub_task_id` now.
    pub(in crate::shell) fn note(&self, sub_task_id: &str) {
        let Some(window) = self.window else {
            return;
        };
        let now = Instant::now();
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        if heard.len() >= MAX_HEARD {
            heard.retain(|_, at| now.duration_since(*at) < window);
            if heard.len() >= MAX_HEARD {
                let oldest = heard
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    heard.remove(&k);
                }
            }
        }
        heard.insert(sub_task_id.to_owned(), now);
    }

    /// Whether `sub_task_id` showed a sign of life here within the window.
    pub(in crate::shell) fn heard(&self, sub_task_id: &str) -> bool {
        let Some(window) = self.window else {
            return false;
        };
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard
            .get(sub_task_id)
            .is_some_and(|at| at.elapsed() < window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_heard_from_only_once_it_spoke_and_never_when_checks_are_off() {
        let signs = SignsOfLife::new(Some(Duration::from_secs(3600)));
        assert!(!signs.heard("e_a_x_1"));
        signs.note("e_a_x_1");
        assert!(signs.heard("e_a_x_1"));
        assert!(!signs.heard("e_a_x_2"), "another attempt is another call");
        let off = SignsOfLife::new(None);
        off.note("e_a_x_1");
        assert!(!off.heard("e_a_x_1"));
    }

    #[test]
    fn memory_stays_bounded() {
        let signs = SignsOfLife::new(Some(Duration::from_secs(3600)));
        for i in 0..MAX_HEARD + 10 {
            signs.note(&format!("id{i}"));
        }
        assert!(signs.heard.lock().unwrap().len() <= MAX_HEARD);
        assert!(signs.heard(&format!("id{}", MAX_HEARD + 9)));
    }
}
