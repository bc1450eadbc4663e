//! A run's control state: everything but the values it carries (its input, the run's and
//! the nodes' outputs, a map's items and results, a fork's branch outputs). The shell looks
//! at it before and after each event (to tell whether the event changed the run, which
//! spans and metrics it ended) without copying a byte of data: what that costs does not grow
//! with the payloads a run carries.
//!
//! It works because the core never changes a value alone: an output is set with its node's
//! status or `output_rev`, a map's result with its `done` count, a fork's branch output with
//! its `pending` count, the input with `started`, the run's output with its status. The
//! simulator checks this after every event it applies (so every property test does).

use super::state::{Detail, ForkState, MapState, NodeState};
use super::Execution;

impl Execution {
    /// A copy of the run without its values (see the module doc): nulls, `None`s and empty
    /// lists in their place, the lengths of a map's items and results aside.
    pub fn control(&self) -> Execution {
        let Execution {
            id,
            workflow,
            status,
            started,
            input: _,
            started_at,
            deadline,
            nodes,
            calls,
            queue,
            in_flight,
            unfinished_main,
            stopping,
            cancel_requested,
            deadline_passed,
            error,
            outcome,
            exit_pending,
            output: _,
            paused,
            retry_of,
            signals,
            flow,
        } = self;
        Execution {
            id: id.clone(),
            workflow: workflow.clone(),
            status: *status,
            started: *started,
            input: serde_json::Value::Null,
            started_at: *started_at,
            deadline: *deadline,
            nodes: nodes
                .iter()
                .map(|(id, node)| (id.clone(), node.control()))
                .collect(),
            calls: calls.clone(),
            queue: queue.clone(),
            in_flight: *in_flight,
            unfinished_main: *unfinished_main,
            stopping: *stopping,
            cancel_requested: *cancel_requested,
            deadline_passed: *deadline_passed,
            error: error.clone(),
            outcome: *outcome,
            exit_pending: exit_pending.clone(),
            output: None,
            paused: paused.clone(),
            retry_of: retry_of.clone(),
            signals: super::signals::Signals {
                kept: signals
                    .kept
                    .iter()
                    .map(|s| super::signals::Signal {
                        data: serde_json::Value::Null,
                        ..s.clone()
                    })
                    .collect(),
                taken: signals.taken.clone(),
            },
            flow: flow.clone(),
        }
    }

    /// Whether `self` and `other` have the same control state (their values aside).
    pub fn same_control(&self, other: &Execution) -> bool {
        self.control() == other.control()
    }
}

impl NodeState {
    fn control(&self) -> NodeState {
        let NodeState {
            status,
            output: _,
            error,
            error_kind,
            started_at,
            ended_at,
            output_rev,
            detail,
        } = self;
        NodeState {
            status: *status,
            output: None,
            error: error.clone(),
            error_kind: error_kind.clone(),
            started_at: *started_at,
            ended_at: *ended_at,
            output_rev: *output_rev,
            detail: detail.as_ref().map(Detail::control),
        }
    }
}

impl Detail {
    fn control(&self) -> Detail {
        match self {
            Detail::Map(MapState {
                items: _,
                next,
                active,
                done,
                results: _,
            }) => Detail::Map(MapState {
                items: Vec::new(),
                next: *next,
                active: *active,
                done: *done,
                results: Vec::new(),
            }),
            Detail::Fork(ForkState {
                pending,
                outputs: _,
                failures,
            }) => Detail::Fork(ForkState {
                pending: *pending,
                outputs: serde_json::Map::new(),
                failures: failures.clone(),
            }),
            Detail::Loop { iteration } => Detail::Loop {
                iteration: *iteration,
            },
            Detail::Approval { deadline } => Detail::Approval {
                deadline: *deadline,
            },
            Detail::Wait(w) => Detail::Wait(w.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::{ExecutionId, NodeStatus};

    fn run() -> Execution {
        let mut st = Execution::new(ExecutionId("r".into()), "W");
        st.input = json!({"big": "x".repeat(1000)});
        let mut node = NodeState::new(NodeStatus::Running);
        node.output = Some(json!([1, 2, 3]));
        node.detail = Some(Detail::Fork(ForkState {
            pending: 2,
            outputs: serde_json::Map::from_iter([("a".to_string(), json!(1))]),
            failures: Vec::new(),
        }));
        st.nodes.insert("n".into(), node);
        st
    }

    #[test]
    fn the_control_copy_holds_no_value_and_keeps_the_rest() {
        let st = run();
        let c = st.control();
        assert_eq!(c.input, serde_json::Value::Null);
        assert_eq!(c.nodes["n"].output, None);
        assert!(
            matches!(&c.nodes["n"].detail, Some(Detail::Fork(f)) if f.outputs.is_empty() && f.pending == 2)
        );
        assert!(c.same_control(&st) && st.same_control(&c));
    }

    #[test]
    fn values_alone_do_not_change_the_control_state_and_everything_else_does() {
        let st = run();
        let mut values = st.clone();
        values.input = json!(null);
        values.nodes.get_mut("n").unwrap().output = Some(json!("other"));
        assert!(st.same_control(&values));
        let mut status = st.clone();
        status.nodes.get_mut("n").unwrap().status = NodeStatus::Success;
        assert!(!st.same_control(&status));
        let mut pending = st.clone();
        if let Some(Detail::Fork(f)) = &mut pending.nodes.get_mut("n").unwrap().detail {
            f.pending = 1;
        }
        assert!(!st.same_control(&pending));
        let mut more = st.clone();
        more.nodes
            .insert("m".into(), NodeState::new(NodeStatus::Running));
        assert!(!st.same_control(&more) && !more.same_control(&st));
    }
}
