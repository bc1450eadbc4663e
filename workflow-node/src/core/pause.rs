//! Pausing and resuming a run: an operator stops new calls without losing the run.
//!
//! | event             | effect                                                            |
//! |-------------------|-------------------------------------------------------------------|
//! | `PauseRequested`  | stop dispatching; suspend the deadline / approval timeouts if set |
//! | `ResumeRequested` | move suspended clocks on by the time paused; dispatch the queue    |
//!
//! A paused run dispatches no call: a call that would start (a node whose dependencies
//! ended, a map item, a loop iteration, a retry whose backoff ended, an exit handler) waits
//! in the run's queue, as it would for a slot under `concurrency`. Calls in flight run to
//! their end and their results are recorded; nodes without calls (conditionals, switches,
//! joins) still end as their dependencies do, and approvals still wait for and take
//! decisions. Resuming dispatches the queue, oldest first, within `concurrency`.
//!
//! By default the run's deadline and its approvals' timeouts keep running while it is
//! paused (`workflow.pause` in the definition says otherwise). A cancel or the deadline
//! ends the pause ([`Cx::lift_pause`], called by both): the run stops as it would unpaused,
//! and its exit handlers must be able to run.
//! Pausing a paused run, or resuming one not paused, changes nothing; so do both before
//! the run started or after it ended.

use serde::{Deserialize, Serialize};

use super::engine::Cx;
use super::state::Detail;
use super::types::{Command, Millis, NodeStatus, Progress, TimerId};

/// A pause in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    /// When the pause was applied: the resume moves suspended clocks on by the time since.
    pub since: Millis,
    /// Why, as its requester said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Cx<'_> {
    /// Whether the run is paused: new calls wait.
    pub(super) fn paused(&self) -> bool {
        self.st.paused.is_some()
    }

    /// Pauses the run, unless it is paused, or a cancel or its deadline has lifted pauses
    /// for good: its exit handlers must run, and nothing would resume them.
    pub(super) fn pause(&mut self, reason: Option<String>) {
        if self.paused() || self.pause_lifted_for_good() {
            return;
        }
        self.out.push(Command::Progress(Progress::RunPaused {
            reason: reason.clone(),
        }));
        self.st.paused = Some(Paused {
            since: self.now,
            reason,
        });
        let settings = self.wf.pause;
        if settings.suspend_deadline && !self.st.deadline_passed {
            self.out.push(Command::CancelTimer {
                timer: TimerId::Deadline,
            });
        }
        if settings.suspend_approval_timeouts {
            for (node, _) in self.waiting_approvals() {
                let timer = TimerId::ApprovalTimeout { node };
                self.out.push(Command::CancelTimer { timer });
            }
        }
    }

    /// Whether a cancel or the deadline stopped the run: a pause then holds no more.
    pub(super) fn pause_lifted_for_good(&self) -> bool {
        self.st.cancel_requested || self.st.deadline_passed
    }

    pub(super) fn resume(&mut self) {
        if !self.paused() {
            return;
        }
        self.lift_pause();
        self.out.push(Command::Progress(Progress::RunResumed));
        self.dispatch_queued();
        self.take_kept_after_pause();
    }

    /// Ends the pause without dispatching: moves the suspended clocks on by the time spent
    /// paused and arms their timers again. A cancel or the deadline calls it before
    /// stopping the run, whose queued calls are then dropped rather than sent.
    pub(super) fn lift_pause(&mut self) {
        let Some(paused) = self.st.paused.take() else {
            return;
        };
        let settings = self.wf.pause;
        if settings.suspend_deadline && !self.st.deadline_passed {
            let held = self.now.0.saturating_sub(paused.since.0);
            self.st.deadline = Millis(self.st.deadline.0.saturating_add(held));
            self.out.push(Command::StartTimer {
                timer: TimerId::Deadline,
                at: self.st.deadline,
            });
        }
        if settings.suspend_approval_timeouts {
            for (node, started) in self.waiting_approvals() {
                // An approval that began waiting during the pause was held only since.
                let from = started.map_or(paused.since, |s| s.max(paused.since));
                let held = self.now.0.saturating_sub(from.0);
                let Some(state) = self.st.nodes.get_mut(&node) else {
                    continue;
                };
                let Some(Detail::Approval {
                    deadline: Some(deadline),
                }) = state.detail.as_mut()
                else {
                    continue;
                };
                *deadline = Millis(deadline.0.saturating_add(held));
                let at = *deadline;
                let timer = TimerId::ApprovalTimeout { node };
                self.out.push(Command::StartTimer { timer, at });
            }
        }
    }

    /// Whether `timer` is one the pause suspends: it does nothing while the run is paused
    /// (the resume arms it again, later).
    pub(super) fn suspended(&self, timer: &TimerId) -> bool {
        if !self.paused() {
            return false;
        }
        match timer {
            TimerId::Deadline => self.wf.pause.suspend_deadline,
            TimerId::ApprovalTimeout { .. } => self.wf.pause.suspend_approval_timeouts,
            _ => false,
        }
    }

    /// Approvals waiting with a timeout, with when they started waiting.
    fn waiting_approvals(&self) -> Vec<(String, Option<Millis>)> {
        self.st
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.status == NodeStatus::Waiting
                    && matches!(n.detail, Some(Detail::Approval { deadline: Some(_) }))
            })
            .map(|(id, n)| (id.clone(), n.started_at))
            .collect()
    }
}

impl super::state::Execution {
    /// Whether the run is paused (a run that ended while paused is not).
    pub fn is_paused(&self) -> bool {
        self.paused.is_some() && !self.status.is_terminal()
    }

    /// The run's status as shown to people and callers: `paused` while paused, else its
    /// [`super::RunStatus`].
    pub fn shown_status(&self) -> &'static str {
        if self.is_paused() {
            "paused"
        } else {
            self.status.as_str()
        }
    }
}
