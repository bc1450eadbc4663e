//! Runs queued for a slot under the workflow's flow control (`max_concurrent_runs`,
//! `concurrency_key`): the core's half. The slots themselves are shared by every replica
//! and kept by the shell (`shell/run/flow.rs` decides, `shell/worker/flow.rs` writes);
//! the core only says when a run asks for one and when it gives it back.
//!
//! | state   | event                      | effect                                           |
//! |---------|----------------------------|--------------------------------------------------|
//! | (start) | `Started`, gated workflow  | resolve the key; `Queued`, `Admit`, progress      |
//! | Queued  | `Admitted`                 | `Running`: deadline armed from now, roots started |
//! | Queued  | `CancelRequested`          | ends `cancelled`; `Release` (leaves the queue)    |
//! | Queued  | `Abandoned`                | ends `failure`; `Release`                         |
//! | Queued  | `SignalReceived`           | kept for the wait node, as before a start         |
//! | Queued  | anything else              | nothing (nothing was dispatched or armed)         |
//! | any end | (the run ends)             | `Release` in the same commit                      |
//!
//! `Admit` and `Release` are carried out from the outbox, so a replica killed after the
//! commit leaves them to the next one; both are idempotent in the shell, and `Admitted`
//! applied to a run that is not queued changes nothing, so a run never starts twice.

use serde::{Deserialize, Serialize};

use super::engine::Cx;
use super::scope::RunScope;
use super::types::{Command, Event, Millis, Progress, RunError, RunStatus};
use crate::definition::key_text;

/// A run's place under its workflow's flow control.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowTicket {
    /// Its concurrency key, resolved from the input on arrival (empty without
    /// `concurrency_key`).
    pub key: String,
    /// When it arrived and queued.
    pub queued_at: Millis,
    /// When it got its slot; `None` while it waits (or if it ended waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<Millis>,
}

impl Cx<'_> {
    /// At the start, once the input holds: a run of a flow-controlled workflow queues for
    /// a slot instead of beginning. True when the run does not begin now (queued, or
    /// failed because its key does not resolve).
    pub(super) fn queue_if_gated(&mut self) -> bool {
        if !self.wf.flow.gated() {
            return false;
        }
        let key = match self.run_key() {
            Ok(key) => key,
            Err(message) => {
                self.st.error = Some(RunError {
                    node_id: None,
                    message,
                    kind: None,
                });
                self.st.outcome = Some(RunStatus::Failure);
                self.finish_run();
                return true;
            }
        };
        self.st.status = RunStatus::Queued;
        self.st.flow = Some(FlowTicket {
            key: key.clone(),
            queued_at: self.now,
            admitted_at: None,
        });
        self.out
            .push(Command::Progress(Progress::RunQueued { key: key.clone() }));
        self.out.push(Command::Admit { key });
        true
    }

    /// The run's concurrency key, from its input.
    fn run_key(&self) -> Result<String, String> {
        let Some(limit) = &self.wf.flow.key else {
            return Ok(String::new());
        };
        let scope = RunScope::new(self.wf, self.st);
        let value = limit
            .key
            .resolve(&scope)
            .map_err(|e| format!("concurrency_key.key: {e}"))?;
        key_text(&value)
    }

    /// What a queued run does with an event: see the table above.
    pub(super) fn while_queued(&mut self, event: Event) {
        match event {
            Event::Admitted => self.admitted(),
            Event::CancelRequested { reason } => self.cancel_queued(reason),
            Event::Abandoned { reason } => self.abandon(reason),
            Event::SignalReceived { signal } => self.signal_received(signal),
            _ => {}
        }
    }

    fn admitted(&mut self) {
        self.st.status = RunStatus::Running;
        if let Some(ticket) = &mut self.st.flow {
            ticket.admitted_at = Some(self.now);
        }
        // The deadline bounds the work, not the wait: it counts from the admission.
        self.st.deadline = self.now.plus(self.wf.max_execution_time);
        self.out.push(Command::Progress(Progress::RunAdmitted));
        self.begin();
        self.settle();
    }

    fn cancel_queued(&mut self, reason: Option<String>) {
        self.st.cancel_requested = true;
        let message = match reason {
            Some(r) => format!("cancelled while queued: {r}"),
            None => "cancelled while queued".to_string(),
        };
        self.st.error = Some(RunError {
            node_id: None,
            message,
            kind: None,
        });
        self.st.outcome = Some(RunStatus::Cancelled);
        self.finish_run();
    }

    /// At the run's end, whatever ended it: a run that queued gives its slot back (or
    /// leaves the queue) in the commit that ends it.
    pub(super) fn give_back_run_slot(&mut self) {
        if let Some(ticket) = &self.st.flow {
            self.out.push(Command::Release {
                key: ticket.key.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{apply, Execution, ExecutionId};
    use crate::definition::{parse_str, Workflow};
    use serde_json::json;

    fn workflow() -> Workflow {
        let yaml = r#"
name: F
workflow:
  description: one agent per customer at a time
  concurrency_key: {key: "{{workflow.input.customer}}", max: 1}
  nodes:
    - {id: a, type: agent, agent_name: A}
  output_mapping: {a: "{{a.output}}"}
"#;
        parse_str(yaml, "f.yaml").expect("valid")
    }

    /// Applies `event` after a serde round trip of the state, as a replica resuming does.
    fn step(wf: &Workflow, st: &mut Execution, event: Event, now: u64) -> Vec<Command> {
        *st = serde_json::from_value(serde_json::to_value(&*st).unwrap()).unwrap();
        apply(wf, st, event, Millis(now))
    }

    fn dispatches(commands: &[Command]) -> usize {
        commands
            .iter()
            .filter(|c| matches!(c, Command::Dispatch(_)))
            .count()
    }

    fn start(customer: serde_json::Value) -> Event {
        Event::Started {
            input: json!({ "customer": customer }),
        }
    }

    #[test]
    fn a_run_queues_then_starts_once_when_admitted() {
        let wf = workflow();
        let mut st = Execution::new(ExecutionId("r".into()), "F");
        let out = step(&wf, &mut st, start(json!("acme")), 10);
        assert_eq!(st.status, RunStatus::Queued);
        assert_eq!(dispatches(&out), 0);
        assert!(out.contains(&Command::Admit { key: "acme".into() }));
        // Anything but the admission changes nothing while queued.
        let before = st.clone();
        let timer = Event::TimerFired {
            timer: crate::core::TimerId::Deadline,
        };
        assert!(step(&wf, &mut st, timer, 20).is_empty());
        assert_eq!(st, before);
        let out = step(&wf, &mut st, Event::Admitted, 1_000);
        assert_eq!(st.status, RunStatus::Running);
        assert_eq!(dispatches(&out), 1);
        assert_eq!(st.deadline, Millis(1_000).plus(wf.max_execution_time));
        // An admission again (a re-published one) starts nothing.
        assert!(step(&wf, &mut st, Event::Admitted, 1_001).is_empty());
        let task = crate::core::TaskKey::single("a");
        let out = step(
            &wf,
            &mut st,
            Event::CallSucceeded {
                task,
                attempt: 1,
                output: json!(1),
            },
            2_000,
        );
        assert_eq!(st.status, RunStatus::Success);
        let release = out
            .iter()
            .position(|c| c == &Command::Release { key: "acme".into() });
        let finish = out.iter().position(|c| matches!(c, Command::Finish { .. }));
        assert!(release.is_some() && release < finish, "{out:?}");
    }

    #[test]
    fn a_queued_run_cancelled_ends_cancelled_and_leaves_the_queue() {
        let wf = workflow();
        let mut st = Execution::new(ExecutionId("r".into()), "F");
        step(&wf, &mut st, start(json!(7)), 10);
        let out = step(&wf, &mut st, Event::CancelRequested { reason: None }, 20);
        assert_eq!(st.status, RunStatus::Cancelled);
        assert!(out.contains(&Command::Release { key: "7".into() }));
        assert!(out.iter().any(|c| matches!(
            c,
            Command::Finish {
                status: RunStatus::Cancelled,
                ..
            }
        )));
        // A late admission finds it ended.
        assert!(step(&wf, &mut st, Event::Admitted, 30).is_empty());
    }

    #[test]
    fn a_key_that_does_not_resolve_to_a_string_fails_the_run_without_a_slot() {
        let wf = workflow();
        let mut st = Execution::new(ExecutionId("r".into()), "F");
        let out = step(&wf, &mut st, start(json!({"x": 1})), 10);
        assert_eq!(st.status, RunStatus::Failure);
        let error = st.error.as_ref().expect("an error").message.clone();
        assert!(
            error.contains("concurrency_key.key must give a string"),
            "{error}"
        );
        assert!(!out
            .iter()
            .any(|c| matches!(c, Command::Admit { .. } | Command::Release { .. })));
    }

    #[test]
    fn a_queued_run_abandoned_gives_its_place_back() {
        let wf = workflow();
        let mut st = Execution::new(ExecutionId("r".into()), "F");
        step(&wf, &mut st, start(json!("k")), 10);
        let out = step(
            &wf,
            &mut st,
            Event::Abandoned {
                reason: "gone".into(),
            },
            20,
        );
        assert_eq!(st.status, RunStatus::Failure);
        assert!(out.contains(&Command::Release { key: "k".into() }));
    }
}
