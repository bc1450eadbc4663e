//! Per-node error policy in the engine: which failures halt the run,
//! which let it go on, and which skip only what depends on them.
//!
//! | policy            | the node                 | its dependents           | the run        |
//! |-------------------|--------------------------|--------------------------|----------------|
//! | `halt`            | `failure` / `timed_out`  | skipped                  | fails          |
//! | `continue`        | same, output `null`      | run (see `{{id.status}}`)| goes on        |
//! | `skip_dependents` | same, output `null`      | skipped, transitively    | goes on        |
//!
//! A failure under `continue` or `skip_dependents` is not the run's error: a run whose
//! only failures were tolerated ends `success`, with its output mapped as usual. A
//! conditional or switch that fails takes no branch, so under `continue` its dependents
//! are skipped too.

use std::collections::HashSet;

use serde_json::Value;

use super::calls::CallEnd;
use super::engine::Cx;
use super::types::NodeStatus;
use crate::definition::{NodeKind, OnFailure};

impl Cx<'_> {
    /// The policy of the node at `idx`.
    pub(super) fn policy(&self, idx: usize) -> OnFailure {
        self.wf.on_failure_of(&self.wf.nodes[idx])
    }

    /// The policy of the node `id` (halt for an unknown id).
    fn policy_of(&self, id: &str) -> OnFailure {
        self.wf
            .graph
            .index
            .get(id)
            .map_or(OnFailure::Halt, |&i| self.policy(i))
    }

    /// Whether the node at `idx` ending with `status` fails the run (its policy is halt).
    pub(super) fn halts_run(&self, idx: usize, status: NodeStatus) -> bool {
        status.is_failed() && self.policy(idx) == OnFailure::Halt
    }

    /// The output a node ending with `status` keeps: a tolerated failure keeps `null`, so
    /// that `{{id.output}}` resolves (to null) for the nodes that go on.
    pub(super) fn kept_output(
        &self,
        idx: usize,
        status: NodeStatus,
        output: Option<Value>,
    ) -> Option<Value> {
        if status.is_failed() && self.policy(idx) != OnFailure::Halt {
            return Some(Value::Null);
        }
        output
    }

    /// Whether dependency `d` (ended with a failure) counts as ended-and-tolerated for a
    /// join's `all`: its policy is `continue`.
    pub(super) fn continued(&self, d: &str) -> bool {
        self.st.node_status(d).is_failed() && self.policy_of(d) == OnFailure::Continue
    }

    /// Whether dependency `d` breaks a join's `all`: it was cancelled, or it failed under
    /// a policy other than `continue`.
    pub(super) fn breaks_join(&self, d: &str) -> bool {
        let status = self.st.node_status(d);
        status == NodeStatus::Cancelled || (status.is_failed() && !self.continued(d))
    }

    /// Why dependency `d`, which has ended, keeps its dependent from running, if it does.
    pub(super) fn blocked_by(&self, d: &str) -> Option<String> {
        let status = self.st.node_status(d);
        if status == NodeStatus::Cancelled {
            return Some(format!("dependency '{d}' did not succeed"));
        }
        if status.is_failed() {
            return match self.policy_of(d) {
                OnFailure::Halt => Some(format!("dependency '{d}' did not succeed")),
                // A conditional or switch that failed chose no branch: none runs.
                OnFailure::Continue if self.branches(d) => Some(format!(
                    "no branch taken: '{d}' failed (on_failure: continue)"
                )),
                OnFailure::Continue => None,
                OnFailure::SkipDependents => Some(format!(
                    "dependency '{d}' failed (on_failure: skip_dependents)"
                )),
            };
        }
        if status == NodeStatus::Skipped {
            let origin = self.skipped_by_failure(d)?;
            return Some(format!(
                "dependency '{d}' was skipped because '{origin}' failed (on_failure: \
                 skip_dependents)"
            ));
        }
        None
    }

    /// Whether node `id` is a conditional or a switch.
    fn branches(&self, id: &str) -> bool {
        self.wf.node(id).is_some_and(|n| {
            matches!(
                n.kind,
                NodeKind::Conditional { .. } | NodeKind::Switch { .. }
            )
        })
    }

    /// The node whose failure under `skip_dependents` skipped `d` (a skipped node), through
    /// any chain of skipped nodes; `None` when `d` was skipped for another reason.
    fn skipped_by_failure(&self, d: &str) -> Option<String> {
        let mut stack = vec![d.to_string()];
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let Some(&i) = self.wf.graph.index.get(&id) else {
                continue;
            };
            for e in &self.wf.nodes[i].depends_on {
                let status = self.st.node_status(e);
                if status.is_failed() && self.policy_of(e) == OnFailure::SkipDependents {
                    return Some(e.clone());
                }
                if status == NodeStatus::Skipped {
                    stack.push(e.clone());
                }
            }
        }
        None
    }

    /// What a map item or loop iteration that ended gives its owner: a failure of an
    /// inner node under `continue` is a `null` result, and the map or loop goes on.
    pub(super) fn tolerate_inner(&self, inner: &str, end: CallEnd) -> CallEnd {
        match end {
            CallEnd::Failed(..) if self.policy_of(inner) == OnFailure::Continue => {
                CallEnd::Output(Value::Null)
            }
            end => end,
        }
    }
}
