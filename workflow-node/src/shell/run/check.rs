//! The liveness check of a run's calls in flight, decided without I/O: a call whose request
//! or reply was lost (a NATS server restarted under it, the agent's process died before it
//! answered) is sent again, the same attempt under the same sub-task id, after a window
//! without a sign of life, whether or not the workflow set a `timeout`.
//!
//! Every dispatch arms a check of its attempt at `now + window` in the run's record
//! ([`RunRecord::checks`]); the run's wake (see `wake`) stands for the earliest check as for
//! the earliest timer, so the check is as durable as a timer: a replica that dies leaves it
//! to the one that fires the wake. When a check comes due and its attempt still runs, the
//! call is sent again unless this replica heard from it within the window (a heartbeat or a
//! status update; agents send one every second while a handler runs), and the check is
//! armed again. An agent takes the copy as a copy: a running call answers it with a sign of
//! life, a finished one with its answer again, and a process that never had the call (the
//! first one died) runs it. A check whose attempt ended is dropped with the commit that
//! ended it.
//!
//! Heartbeats go to any replica of the workflow (a queue group), so the replica firing a
//! check hears only its share of them: it may send a copy of a call that is alive, which
//! costs one request and one status update, never a second result (the run takes the first
//! answer of an attempt).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::{self, CallPhase, Command, Execution, Millis, TaskKey};
use crate::definition::Workflow;

/// When a call in flight is next looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCheck {
    /// The attempt it checks: once that attempt ends, the check is dropped.
    pub attempt: u32,
    /// When it is due.
    pub at: Millis,
}

/// How the checks of calls are made: the window of silence after which a call is sent
/// again (`None`: never), and what this replica heard.
#[derive(Clone, Copy)]
pub(in crate::shell) struct Liveness<'a> {
    /// How long a call may stay silent before it is sent again; `None` turns checks off.
    pub(in crate::shell) window: Option<Duration>,
    /// Whether this replica heard from the call with this sub-task id within the window.
    pub(in crate::shell) heard: &'a dyn Fn(&str) -> bool,
    /// Whether calls to this agent pass its gate (see `gate`): their ends give back a slot.
    /// `None` when the node limits no agent, which spares every event the look.
    pub(in crate::shell) limited: Option<&'a dyn Fn(&str) -> bool>,
}

impl Liveness<'_> {
    /// No checks at all.
    #[cfg(test)]
    pub(in crate::shell) fn off() -> Liveness<'static> {
        Liveness {
            window: None,
            heard: &|_| false,
            limited: None,
        }
    }
}

impl std::fmt::Debug for Liveness<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// Keeps `checks` in step with `state` after `commands` were applied at `now`: a check for
/// every attempt dispatched, none for an attempt that no longer runs. Whether any changed.
pub(in crate::shell) fn track(
    checks: &mut BTreeMap<TaskKey, CallCheck>,
    state: &Execution,
    commands: &[Command],
    now: Millis,
    window: Option<Duration>,
) -> bool {
    let Some(window) = window else {
        let had = !checks.is_empty();
        checks.clear();
        return had;
    };
    let mut moved = false;
    for command in commands {
        if let Command::Dispatch(d) = command {
            let check = CallCheck {
                attempt: d.attempt,
                at: now.plus(window),
            };
            checks.insert(d.task.clone(), check);
            moved = true;
        }
    }
    let before = checks.len();
    checks.retain(|task, check| running(state, task, check.attempt));
    moved || checks.len() != before
}

/// The earliest check's deadline.
pub(in crate::shell) fn earliest(checks: &BTreeMap<TaskKey, CallCheck>) -> Option<Millis> {
    checks.values().map(|c| c.at).min()
}

/// The checks due by `cutoff`: their calls sent again (those this replica did not hear
/// from) and the checks armed again for `now + window`. Returns the copies to send, and the
/// sub-task ids checked.
pub(in crate::shell) fn fire(
    workflow: &Workflow,
    state: &mut Execution,
    checks: &mut BTreeMap<TaskKey, CallCheck>,
    cutoff: Millis,
    now: Millis,
    liveness: Liveness<'_>,
) -> (Vec<Command>, Vec<String>) {
    let Some(window) = liveness.window else {
        checks.clear();
        return (Vec::new(), Vec::new());
    };
    let due: Vec<(TaskKey, u32)> = checks
        .iter()
        .filter(|(_, c)| c.at <= cutoff)
        .map(|(t, c)| (t.clone(), c.attempt))
        .collect();
    let mut copies = Vec::new();
    let mut checked = Vec::new();
    for (task, attempt) in due {
        let Some(dispatch) = core::redispatch(workflow, state, &task, attempt) else {
            checks.remove(&task);
            continue;
        };
        checked.push(dispatch.sub_task_id.clone());
        if !(liveness.heard)(&dispatch.sub_task_id) {
            copies.push(Command::Dispatch(dispatch));
        }
        let again = CallCheck {
            attempt,
            at: now.plus(window),
        };
        checks.insert(task, again);
    }
    (copies, checked)
}

/// Whether attempt `attempt` of `task` is running in `state`.
fn running(state: &Execution, task: &TaskKey, attempt: u32) -> bool {
    state
        .calls
        .get(task)
        .is_some_and(|c| c.attempt == attempt && matches!(c.phase, CallPhase::Running { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Event, ExecutionId};
    use serde_json::json;

    fn workflow() -> Workflow {
        let yaml = r#"
name: W
workflow:
  description: one agent
  nodes:
    - {id: a, type: agent, agent_name: A, input: {x: "{{workflow.input.x}}"}}
  output_mapping: {x: "{{a.output.x}}"}
"#;
        crate::definition::parse_str(yaml, "w.yaml").expect("valid")
    }

    fn started(wf: &Workflow) -> (Execution, Vec<Command>) {
        let mut state = Execution::new(ExecutionId("e".into()), "W");
        let event = Event::Started {
            input: json!({"x": 1}),
        };
        let out = core::apply(wf, &mut state, event, Millis(1_000));
        (state, out)
    }

    const WINDOW: Option<Duration> = Some(Duration::from_secs(5));

    #[test]
    fn a_silent_call_is_sent_again_as_the_same_attempt_and_checked_again() {
        let wf = workflow();
        let (mut state, out) = started(&wf);
        let mut checks = BTreeMap::new();
        track(&mut checks, &state, &out, Millis(1_000), WINDOW);
        assert_eq!(earliest(&checks), Some(Millis(6_000)));
        let heard_nothing = Liveness {
            window: WINDOW,
            heard: &|_| false,
            limited: None,
        };
        let early = fire(
            &wf,
            &mut state,
            &mut checks,
            Millis(5_999),
            Millis(5_999),
            heard_nothing,
        );
        assert!(early.0.is_empty(), "nothing is due before its window ends");
        let (copies, checked) = fire(
            &wf,
            &mut state,
            &mut checks,
            Millis(6_000),
            Millis(6_000),
            heard_nothing,
        );
        let first = out.iter().find(|c| matches!(c, Command::Dispatch(_)));
        assert_eq!(
            copies.first(),
            first,
            "the same request, the same sub-task id"
        );
        assert_eq!(checked.len(), 1);
        assert_eq!(earliest(&checks), Some(Millis(11_000)));
    }

    #[test]
    fn a_call_heard_from_is_not_sent_again_and_an_ended_one_is_no_longer_checked() {
        let wf = workflow();
        let (mut state, out) = started(&wf);
        let mut checks = BTreeMap::new();
        track(&mut checks, &state, &out, Millis(1_000), WINDOW);
        let heard = Liveness {
            window: WINDOW,
            heard: &|_| true,
            limited: None,
        };
        let (copies, _) = fire(
            &wf,
            &mut state,
            &mut checks,
            Millis(6_000),
            Millis(6_000),
            heard,
        );
        assert!(copies.is_empty());
        assert_eq!(earliest(&checks), Some(Millis(11_000)), "still checked");
        let Some(Command::Dispatch(d)) = out.iter().find(|c| matches!(c, Command::Dispatch(_)))
        else {
            panic!("the start dispatches a");
        };
        let answer = Event::CallSucceeded {
            task: d.task.clone(),
            attempt: d.attempt,
            output: json!({"ok": true}),
        };
        let end = core::apply(&wf, &mut state, answer, Millis(7_000));
        track(&mut checks, &state, &end, Millis(7_000), WINDOW);
        assert!(checks.is_empty(), "an ended call is no longer checked");
    }

    #[test]
    fn checks_off_keep_nothing() {
        let wf = workflow();
        let (state, out) = started(&wf);
        let mut checks = BTreeMap::new();
        track(&mut checks, &state, &out, Millis(1_000), None);
        assert!(checks.is_empty());
    }
}
