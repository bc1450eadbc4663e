//! Retrying an ended run from the nodes that did not succeed, so finished work is not redone.
//!
//! A retry is a **new run** (its own execution id, its own deadline, its own final reply to
//! whoever asked for it) that names the run it retries in [`Execution::retry_of`]. It starts
//! from [`retry_state`]: the old run's state reduced to what is kept, then takes the old
//! run's input in its `Started` event and is applied with the old run's definition (the
//! shell sees to both). What is kept and what runs again:
//!
//! - a main node that did not succeed (failed, cancelled, skipped because the run stopped,
//!   never reached) runs again, and so does **every node downstream of one that failed or
//!   was cancelled or never ended** (its `depends_on` dependents, transitively), even one
//!   that succeeded (a join `any` past a failed branch): its inputs may change;
//! - every other node that succeeded is kept with its output and is not run again;
//! - a node skipped because a kept conditional or switch did not take its branch stays
//!   skipped; any other skipped node is considered again (a `when` or a join decides the
//!   same from the same kept outputs, and a node the stopped run never reached now runs);
//! - a map or loop that runs again runs whole (all its items, from iteration 0): a map's
//!   per-item results are not kept once it has ended;
//! - exit handlers all run again, chosen by the new run's outcome.

use std::collections::BTreeSet;

use serde_json::Value;

use super::state::{Execution, NodeState};
use super::types::{Command, ExecutionId, NodeStatus, Progress, RunStatus};
use crate::definition::{NodeKind, NodeRole, Workflow};

/// The state a retry of `old` (an ended run of `workflow`) named `id` starts from: the
/// nodes it keeps (see the module doc), not yet started. [`super::apply`] with
/// [`super::Event::Started`] and the old run's input starts it, and considers every node
/// that is not kept.
pub fn retry_state(workflow: &Workflow, old: &Execution, id: ExecutionId) -> Execution {
    let mut state = Execution::new(id, &workflow.name);
    state.retry_of = Some(old.id.clone());
    let again = runs_again(workflow, old);
    let branch_skipped = branches_not_taken(workflow, old, &again);
    let keeps = |idx: usize| {
        !again.contains(&idx)
            && match old.node_status(&workflow.nodes[idx].id) {
                NodeStatus::Success => true,
                NodeStatus::Skipped => branch_skipped.contains(&idx),
                _ => false,
            }
    };
    for (idx, node) in workflow.nodes.iter().enumerate() {
        let keep = match workflow.graph.roles[idx] {
            NodeRole::Main => keeps(idx),
            // An inner node follows its owner, kept as it ended.
            NodeRole::Inner { owner } => keeps(owner),
            NodeRole::ExitHandler => false,
        };
        if let Some(kept) = old.nodes.get(&node.id).filter(|_| keep) {
            state.nodes.insert(node.id.clone(), kept_state(kept));
        }
    }
    state
}

/// A kept node's state: its end, without what it kept while running.
fn kept_state(old: &NodeState) -> NodeState {
    NodeState {
        detail: None,
        ..old.clone()
    }
}

/// Positions of the main nodes that must run again: those that failed, were cancelled or
/// never ended, and everything downstream of them.
fn runs_again(workflow: &Workflow, old: &Execution) -> BTreeSet<usize> {
    let mut again = BTreeSet::new();
    let mut work: Vec<usize> = workflow
        .nodes
        .iter()
        .enumerate()
        .filter(|(idx, _)| workflow.graph.roles[*idx] == NodeRole::Main)
        .filter(|(_, n)| {
            !matches!(
                old.node_status(&n.id),
                NodeStatus::Success | NodeStatus::Skipped
            )
        })
        .map(|(idx, _)| idx)
        .collect();
    while let Some(idx) = work.pop() {
        if again.insert(idx) {
            work.extend(workflow.graph.dependents[idx].iter().copied());
        }
    }
    again
}

/// Positions of the branch targets a kept conditional or switch did not take.
fn branches_not_taken(
    workflow: &Workflow,
    old: &Execution,
    again: &BTreeSet<usize>,
) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for (idx, node) in workflow.nodes.iter().enumerate() {
        if again.contains(&idx) || old.node_status(&node.id) != NodeStatus::Success {
            continue;
        }
        let targets: Vec<&String> = match &node.kind {
            NodeKind::Conditional {
                true_branch,
                false_branch,
                ..
            } => std::iter::once(true_branch).chain(false_branch).collect(),
            NodeKind::Switch { cases, default } => {
                cases.iter().map(|c| &c.target).chain(default).collect()
            }
            _ => continue,
        };
        let selected = old
            .nodes
            .get(&node.id)
            .and_then(|n| n.output.as_ref())
            .and_then(|o| o.get("selected_branch"))
            .and_then(Value::as_str);
        for target in targets {
            if Some(target.as_str()) != selected {
                if let Some(&t) = workflow.graph.index.get(target) {
                    out.insert(t);
                }
            }
        }
    }
    out
}

impl Execution {
    /// Whether a retry of this run may start: it ended, and not with success.
    pub fn retryable(&self) -> bool {
        self.status.is_terminal() && self.status != RunStatus::Success
    }
}

impl super::engine::Cx<'_> {
    /// The main nodes a starting run considers first: its roots, or for a retry (which
    /// starts with kept nodes) every main node in topological order, so that the first
    /// node not kept on each path starts once its kept dependencies allow it.
    pub(super) fn first_considered(&self) -> Vec<usize> {
        if self.st.nodes.is_empty() {
            self.wf.graph.roots.clone()
        } else {
            self.wf.graph.topo_order.clone()
        }
    }

    /// A starting retry says which nodes it keeps, as they ended, so that its callers
    /// see every node of the run.
    pub(super) fn report_kept(&mut self) {
        if self.st.retry_of.is_none() {
            return;
        }
        for node in &self.wf.nodes {
            let Some(kept) = self.st.nodes.get(&node.id) else {
                continue;
            };
            self.out.push(Command::Progress(Progress::NodeFinished {
                node_id: node.id.clone(),
                status: kept.status,
                output: kept.output.clone(),
                error: kept.error.clone(),
                condition_result: None,
                selected_branch: None,
            }));
        }
    }

    /// Main nodes a starting run must still end: every one but those it keeps.
    pub(super) fn main_to_end(&self) -> u32 {
        self.wf
            .nodes
            .iter()
            .enumerate()
            .filter(|(idx, _)| self.wf.graph.roles[*idx] == NodeRole::Main)
            .filter(|(_, n)| !self.st.node_status(&n.id).is_terminal())
            .count() as u32
    }
}
