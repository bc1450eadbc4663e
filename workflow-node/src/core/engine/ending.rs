//! How a run stops and ends: new work stopped (fail-fast, cancel, deadline, abandon), the
//! exit handlers given their grace, the main part done, the output mapped, and the run's
//! end, with every node it never reached skipped. `engine` decides when; this file decides
//! what stopping and ending leave behind.

use super::Cx;
use crate::core::scope::RunScope;
use crate::core::state::{Detail, NodeState};
use crate::core::types::{Command, NodeStatus, Progress, RunError, RunStatus, TimerId};
use crate::definition::NodeRole;

impl Cx<'_> {
    /// Stops new work. With `cancel_running`, running calls are cancelled too (cancel and
    /// deadline); without (fail_fast), they run to their end.
    pub(in crate::core) fn stop(&mut self, cancel_running: bool) {
        self.st.stopping = true;
        let keys: Vec<_> = self.st.calls.keys().cloned().collect();
        for key in keys {
            let Some(call) = self.st.calls.get(&key) else {
                continue;
            };
            let running = matches!(call.phase, crate::core::state::CallPhase::Running { .. });
            if running && !cancel_running {
                continue;
            }
            self.drop_call(&key);
        }
        // Approvals and waits waiting, and loops between iterations hold no call: end them here.
        let idle: Vec<usize> = self
            .st
            .nodes
            .iter()
            .filter(|(_, n)| {
                matches!(n.status, NodeStatus::Waiting | NodeStatus::Running)
                    && matches!(
                        n.detail,
                        Some(Detail::Approval { .. })
                            | Some(Detail::Loop { .. })
                            | Some(Detail::Wait(_))
                    )
            })
            .filter_map(|(id, _)| self.wf.graph.index.get(id).copied())
            .filter(|idx| !self.has_calls(*idx))
            .collect();
        for idx in idle {
            self.end_as_stopped(idx);
        }
    }

    /// Ends the run failed at once: the shell cannot process its events. Calls in flight
    /// and exit handlers are cancelled, every other node skipped.
    pub(in crate::core) fn abandon(&mut self, reason: String) {
        self.st.started = true;
        self.st.error = Some(RunError {
            node_id: None,
            message: reason,
            kind: Some(RunError::ABANDONED.into()),
        });
        self.stop(true);
        self.end_exit_handlers("the run was abandoned");
        self.st.outcome = Some(RunStatus::Failure);
        self.finish_run();
    }

    pub(super) fn cancel(&mut self, reason: Option<String>) {
        if self.st.cancel_requested {
            return;
        }
        self.st.cancel_requested = true;
        self.lift_pause();
        let message = match reason {
            Some(r) => format!("cancelled: {r}"),
            None => "cancelled".to_string(),
        };
        match self.st.status {
            RunStatus::Running => {
                self.st.error.get_or_insert(RunError {
                    node_id: None,
                    message,
                    kind: None,
                });
                self.stop(true);
            }
            RunStatus::Finishing => {
                self.st.outcome = Some(RunStatus::Cancelled);
                self.st.output = None;
                self.st.error.get_or_insert(RunError {
                    node_id: None,
                    message,
                    kind: None,
                });
                self.end_exit_handlers("the run was cancelled");
            }
            _ => {}
        }
    }

    /// The run's deadline passed: stop the main DAG (its failure runs the exit handlers),
    /// and give exit handlers one default node timeout of grace. A redelivered deadline
    /// changes nothing.
    pub(in crate::core) fn deadline(&mut self) {
        if self.st.deadline_passed {
            return;
        }
        self.st.deadline_passed = true;
        self.lift_pause();
        let limit = self.wf.max_execution_time.as_secs();
        if self.st.status == RunStatus::Running {
            let message =
                format!("the run exceeded max_workflow_execution_time_seconds ({limit} s)");
            self.st.error = Some(RunError {
                node_id: None,
                message,
                kind: Some(crate::core::Failure::TIMEOUT.into()),
            });
            self.stop(true);
        }
        let at = self.now.plus(self.wf.default_node_timeout);
        self.out.push(Command::StartTimer {
            timer: TimerId::ExitGrace,
            at,
        });
    }

    /// The exit handlers' grace ended: cancel those still running and end the run.
    pub(in crate::core) fn exit_grace_over(&mut self) {
        if self.st.status != RunStatus::Finishing {
            return;
        }
        if self.st.outcome == Some(RunStatus::Success) {
            self.st.outcome = Some(RunStatus::TimedOut);
            self.st.output = None;
            self.st.error = Some(RunError {
                node_id: None,
                message: "exit handlers did not end before the deadline".into(),
                kind: Some(crate::core::Failure::TIMEOUT.into()),
            });
        }
        self.end_exit_handlers("the run's deadline passed");
    }

    /// Cancels every exit handler still running.
    pub(super) fn end_exit_handlers(&mut self, why: &str) {
        let keys: Vec<_> = self.st.calls.keys().cloned().collect();
        for key in keys {
            self.drop_call(&key);
        }
        for id in self.st.exit_pending.clone() {
            if let Some(&idx) = self.wf.graph.index.get(&id) {
                self.finish_node(idx, NodeStatus::Cancelled, None, Some(why.into()));
            }
        }
    }

    /// The main DAG ended: decide the outcome, map the output, start the exit handlers.
    pub(super) fn main_done(&mut self) {
        let outcome = if self.st.cancel_requested {
            RunStatus::Cancelled
        } else if self.st.deadline_passed {
            RunStatus::TimedOut
        } else if self.st.error.is_some() {
            RunStatus::Failure
        } else {
            RunStatus::Success
        };
        self.st.outcome = Some(outcome);
        if outcome == RunStatus::Success {
            self.map_output();
        }
        self.st.status = RunStatus::Finishing;
        let exits = &self.wf.on_exit;
        let specific = match self.st.outcome {
            Some(RunStatus::Success) => &exits.on_success,
            Some(RunStatus::Cancelled) => &exits.on_cancel,
            _ => &exits.on_failure,
        };
        let mut handlers: Vec<String> = Vec::new();
        for id in [specific, &exits.always].into_iter().flatten() {
            if !handlers.contains(id) {
                handlers.push(id.clone());
            }
        }
        self.st.exit_pending = handlers.clone();
        for id in handlers {
            let Some(&idx) = self.wf.graph.index.get(&id) else {
                continue;
            };
            if self.when_holds(idx) {
                self.start_node(idx);
            }
        }
    }

    pub(super) fn map_output(&mut self) {
        let scope = RunScope::new(self.wf, self.st);
        let result = self.wf.output_mapping.resolve(&scope);
        let failure = match result {
            Err(e) => Some(format!("output_mapping: {e}")),
            Ok(mut output) => {
                if let Some(schema) = &self.wf.output_schema {
                    schema.apply_defaults(&mut output);
                }
                let violations = self
                    .wf
                    .output_schema
                    .as_ref()
                    .map(|s| s.violations_as_is(&output))
                    .unwrap_or_default();
                if violations.is_empty() {
                    self.st.output = Some(output);
                    None
                } else {
                    Some(format!(
                        "output does not match output_schema: {}",
                        violations.join("; ")
                    ))
                }
            }
        };
        if let Some(message) = failure {
            self.st.outcome = Some(RunStatus::Failure);
            self.st.error = Some(RunError {
                node_id: None,
                message,
                kind: None,
            });
        }
    }

    pub(in crate::core) fn finish_run(&mut self) {
        let status = self.st.outcome.unwrap_or(RunStatus::Failure);
        self.st.status = status;
        self.give_back_run_slot();
        self.st.queue.clear();
        self.skip_unreached(status);
        if self.st.started {
            self.out.push(Command::CancelTimer {
                timer: TimerId::Deadline,
            });
        }
        if self.st.deadline_passed {
            self.out.push(Command::CancelTimer {
                timer: TimerId::ExitGrace,
            });
        }
        let output = if status == RunStatus::Success {
            self.st.output.clone()
        } else {
            None
        };
        let error = if status == RunStatus::Success {
            None
        } else {
            self.st.error.clone()
        };
        self.out.push(Command::Finish {
            status,
            output,
            error,
        });
    }

    /// Every node still pending when the run ends never ran: it ends skipped, in the state
    /// and in progress, so no caller's view is left with a node that neither ran nor was
    /// ruled out. These are exit handlers the outcome did not select, and nodes the run
    /// never reached (it failed at its input, or a branch above was never taken). Their
    /// end is recorded without a node's usual consequences: the run's outcome is decided.
    pub(super) fn skip_unreached(&mut self, outcome: RunStatus) {
        for (idx, node) in self.wf.nodes.iter().enumerate() {
            if self.st.node_status(&node.id) != NodeStatus::Pending {
                continue;
            }
            let reason = match self.wf.graph.roles[idx] {
                NodeRole::ExitHandler => {
                    format!("not selected: the run ended {}", outcome.as_str())
                }
                _ => "the run ended before reaching it".to_string(),
            };
            let mut state = NodeState::new(NodeStatus::Skipped);
            state.error = Some(reason.clone());
            state.ended_at = Some(self.now);
            self.st.nodes.insert(node.id.clone(), state);
            self.out.push(Command::Progress(Progress::NodeFinished {
                node_id: node.id.clone(),
                status: NodeStatus::Skipped,
                output: None,
                error: Some(reason),
                condition_result: None,
                selected_branch: None,
            }));
        }
    }
}
