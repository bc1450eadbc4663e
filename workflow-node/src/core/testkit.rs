//! Helpers for the core's unit tests: a workflow from YAML, and a run driven one event at a
//! time straight through [`super::apply`] (no simulator), so a test names every event.

use std::time::Duration;

use serde_json::Value;

use super::state::Execution;
use super::types::{
    Command, Dispatch, Event, ExecutionId, Failure, FailureClass, Millis, NodeStatus, TaskKey,
    TimerId,
};
use crate::definition::{parse_str, Workflow};

/// A workflow from YAML; panics with every problem when it does not load.
pub(super) fn workflow(yaml: &str) -> Workflow {
    parse_str(yaml, "unit.yaml").unwrap_or_else(|problems| {
        let lines: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        panic!("invalid test workflow:\n{}", lines.join("\n"))
    })
}

/// A workflow named `T` with these settings lines and node lines (YAML, indented as in a
/// file), and an empty output mapping.
pub(super) fn with_nodes(settings: &str, nodes: &str) -> Workflow {
    workflow(&format!(
        "name: T\nworkflow:\n  description: d\n{settings}  nodes:\n{nodes}  output_mapping: {{}}\n"
    ))
}

/// One run of a workflow at a virtual time.
pub(super) struct Run<'w> {
    pub(super) wf: &'w Workflow,
    pub(super) st: Execution,
    pub(super) now: Millis,
}

impl<'w> Run<'w> {
    /// A run not yet started, at time 0.
    pub(super) fn unstarted(wf: &'w Workflow) -> Run<'w> {
        let id = ExecutionId::parse("x").expect("'x' is a valid execution id");
        Run {
            wf,
            st: Execution::new(id, &wf.name),
            now: Millis(0),
        }
    }

    /// A run started with `input` at time 0, with the commands the start gave.
    pub(super) fn start(wf: &'w Workflow, input: Value) -> (Run<'w>, Vec<Command>) {
        let mut run = Run::unstarted(wf);
        let out = run.apply(Event::Started { input });
        (run, out)
    }

    /// Applies `event` at the current time.
    pub(super) fn apply(&mut self, event: Event) -> Vec<Command> {
        super::apply(self.wf, &mut self.st, event, self.now)
    }

    /// Moves the clock on by `d`.
    pub(super) fn wait(&mut self, d: Duration) {
        self.now = self.now.plus(d);
    }

    /// The attempt of `task` answers with `output`.
    pub(super) fn succeed(&mut self, task: TaskKey, attempt: u32, output: Value) -> Vec<Command> {
        self.apply(Event::CallSucceeded {
            task,
            attempt,
            output,
        })
    }

    /// The attempt of `task` fails with `class`.
    pub(super) fn fail(
        &mut self,
        task: TaskKey,
        attempt: u32,
        class: FailureClass,
    ) -> Vec<Command> {
        let failure = Failure {
            class,
            message: "boom".into(),
            kind: None,
        };
        self.apply(Event::CallFailed {
            task,
            attempt,
            failure,
        })
    }

    /// The timer fires.
    pub(super) fn fire(&mut self, timer: TimerId) -> Vec<Command> {
        self.apply(Event::TimerFired { timer })
    }

    /// A node's error message ("" when it has none).
    pub(super) fn error(&self, node: &str) -> String {
        let state = self.st.nodes.get(node);
        state.and_then(|n| n.error.clone()).unwrap_or_default()
    }

    /// A node's status.
    pub(super) fn status(&self, node: &str) -> NodeStatus {
        self.st.node_status(node)
    }
}

/// The dispatches among `commands`.
pub(super) fn dispatches(commands: &[Command]) -> Vec<&Dispatch> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Dispatch(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// The timers `commands` start, with their deadlines.
pub(super) fn started_timers(commands: &[Command]) -> Vec<(&TimerId, Millis)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::StartTimer { timer, at } => Some((timer, *at)),
            _ => None,
        })
        .collect()
}
