//! Whether the node is doing its work: every workflow's events are being pulled. A node
//! that cannot pull (its consumer is gone and cannot be made again, the server is out of
//! reach) says so here, for `serve` to exit on and for health checks. A publish that found
//! the event stream gone and made it again says so here too, so that the workflow's pull,
//! which may never hear that its consumer went with the stream, sets itself up again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// Per workflow, since when its event pull is broken (absent: working).
#[derive(Default)]
pub struct Health {
    broken: Mutex<BTreeMap<String, Instant>>,
    remade: Mutex<BTreeMap<String, Arc<Notify>>>,
}

impl Health {
    /// Records whether `workflow`'s events are being pulled.
    pub(in crate::shell) fn set(&self, workflow: &str, pulling: bool) {
        let mut broken = self.broken.lock().unwrap_or_else(|p| p.into_inner());
        if pulling {
            broken.remove(workflow);
        } else {
            broken
                .entry(workflow.to_string())
                .or_insert_with(Instant::now);
        }
    }

    /// Tells `workflow`'s pull that its event stream was made again (its pull request
    /// went with the old stream, and the server may not have said so).
    pub(in crate::shell) fn stream_remade(&self, workflow: &str) {
        self.remade_of(workflow).notify_one();
    }

    /// What [`Health::stream_remade`] notifies for `workflow`.
    pub(in crate::shell) fn remade_of(&self, workflow: &str) -> Arc<Notify> {
        let mut remade = self.remade.lock().unwrap_or_else(|p| p.into_inner());
        remade.entry(workflow.to_string()).or_default().clone()
    }

    /// The workflows whose events are not being pulled, with since when.
    pub fn broken(&self) -> Vec<(String, Instant)> {
        let broken = self.broken.lock().unwrap_or_else(|p| p.into_inner());
        broken.iter().map(|(w, t)| (w.clone(), *t)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_is_broken_from_its_first_failure_until_it_pulls_again() {
        let health = Health::default();
        assert!(health.broken().is_empty());
        health.set("A", false);
        let since = health.broken()[0].1;
        health.set("A", false);
        assert_eq!(
            health.broken(),
            vec![("A".to_string(), since)],
            "the first failure counts"
        );
        health.set("A", true);
        assert!(health.broken().is_empty());
    }
}
