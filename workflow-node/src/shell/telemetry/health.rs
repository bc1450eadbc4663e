//! Whether the node is doing its work: every workflow's events are being pulled. A node
//! that cannot pull (its consumer is gone and cannot be made again, the server is out of
//! reach) says so here, for `serve` to exit on and for health checks.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// Per workflow, since when its event pull is broken (absent: working).
#[derive(Default)]
pub struct Health {
    broken: Mutex<BTreeMap<String, Instant>>,
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
