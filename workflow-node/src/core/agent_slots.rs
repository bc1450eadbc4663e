//! A call waiting for its agent's slot: flow control per agent, as the core sees it.
//!
//! The gate itself (which calls hold an agent's slots, which wait, in what order) lives
//! in the shell, mesh-wide (`shell/run/gate.rs`); the core only learns that an attempt it
//! dispatched was not sent, and later that it was. What it decides is the clock:
//!
//! | event                  | call's `agent_slot` | commands                                  |
//! |------------------------|---------------------|-------------------------------------------|
//! | `SlotWaiting(t, a)`    | none → waiting      | none: its timeout no longer fails it      |
//! | `SlotGranted(t, a)`    | any but granted → granted | `StartTimer` (now + timeout), `Dispatch` |
//! | either, stale attempt  | unchanged           | none                                      |
//!
//! A grant may overtake the waiting it answers (two replicas publish them): a
//! `SlotWaiting` after the grant is then ignored. The node's `timeout` thus counts from the
//! grant, never while the call waits; the run's own deadline still counts.

use super::engine::Cx;
use super::state::{AgentSlot, CallPhase};
use super::types::TaskKey;

impl Cx<'_> {
    /// Whether the call's running attempt waits for its agent's slot.
    pub(super) fn waits_for_slot(&self, key: &TaskKey) -> bool {
        self.st
            .calls
            .get(key)
            .is_some_and(|c| c.agent_slot == AgentSlot::Waiting)
    }

    pub(super) fn slot_waiting(&mut self, key: &TaskKey, attempt: u32) {
        if !self.running(key, attempt) {
            return;
        }
        if let Some(call) = self.st.calls.get_mut(key) {
            if call.agent_slot == AgentSlot::None {
                call.agent_slot = AgentSlot::Waiting;
            }
        }
    }

    pub(super) fn slot_granted(&mut self, key: &TaskKey, attempt: u32) {
        if !self.running(key, attempt) {
            return;
        }
        let timeout = self
            .call_def(key)
            .and_then(|c| c.timeout)
            .unwrap_or(self.wf.default_node_timeout);
        let deadline = self.now.plus(timeout);
        let Some(call) = self.st.calls.get_mut(key) else {
            return;
        };
        if call.agent_slot == AgentSlot::Granted {
            return;
        }
        call.agent_slot = AgentSlot::Granted;
        call.phase = CallPhase::Running { deadline };
        call.dispatched_at = Some(self.now);
        let Some(dispatch) = self.dispatch_of(key, attempt, deadline) else {
            return;
        };
        self.send_attempt(key, attempt, deadline, dispatch);
    }
}

#[cfg(test)]
mod tests {
    use crate::core::{apply, AgentSlot, Command, Event, Execution, ExecutionId, Millis, TimerId};
    use serde_json::json;

    fn workflow() -> crate::definition::Workflow {
        let yaml = "name: W\nworkflow:\n  description: d\n  agents: {A: {max_in_flight: 1}}\n  nodes:\n    - {id: a, type: agent, agent_name: A, timeout: 10s}\n  output_mapping: {a: \"{{a.output}}\"}\n";
        crate::definition::parse_str(yaml, "w.yaml").expect("valid")
    }

    #[test]
    fn a_waiting_call_does_not_time_out_and_its_timeout_starts_with_the_grant() {
        let wf = workflow();
        let mut st = Execution::new(ExecutionId("e".into()), "W");
        let out = apply(&wf, &mut st, Event::Started { input: json!({}) }, Millis(0));
        let d = out
            .iter()
            .find_map(|c| match c {
                Command::Dispatch(d) => Some(d.clone()),
                _ => None,
            })
            .expect("a dispatch");
        let task = d.task.clone();
        let waiting = Event::SlotWaiting {
            task: task.clone(),
            attempt: 1,
        };
        assert!(apply(&wf, &mut st, waiting, Millis(5)).is_empty());
        assert_eq!(st.calls[&task].agent_slot, AgentSlot::Waiting);
        // Its timeout comes due while it waits: nothing fails.
        let timer = TimerId::CallTimeout {
            task: task.clone(),
            attempt: 1,
        };
        let fired = Event::TimerFired {
            timer: timer.clone(),
        };
        assert!(apply(&wf, &mut st, fired.clone(), Millis(60_000)).is_empty());
        assert!(!st.status.is_terminal());
        let granted = Event::SlotGranted {
            task: task.clone(),
            attempt: 1,
        };
        let out = apply(&wf, &mut st, granted.clone(), Millis(61_000));
        assert!(out.contains(&Command::StartTimer {
            timer: timer.clone(),
            at: Millis(71_000)
        }));
        assert!(out
            .iter()
            .any(|c| matches!(c, Command::Dispatch(x) if x.sub_task_id == d.sub_task_id)));
        // A copy of the grant, or a late waiting, changes nothing.
        assert!(apply(&wf, &mut st, granted, Millis(62_000)).is_empty());
        let late = Event::SlotWaiting { task, attempt: 1 };
        assert!(apply(&wf, &mut st, late, Millis(62_000)).is_empty());
        // The timeout now counts from the grant.
        let out = apply(&wf, &mut st, fired, Millis(71_000));
        assert!(st.status.is_terminal(), "{out:?}");
    }
}
