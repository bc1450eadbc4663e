//! What one applied event did to its run, for the metrics, decided without I/O: the run
//! started or ended, nodes ended, call attempts ended. [`observe`] compares the state before
//! and after [`crate::core::apply`]; the plan carries the answer, and the worker records it
//! only once the commit holds. A commit that loses its compare-and-swap records nothing
//! (the event is planned again on the newer state, where a duplicate changes nothing), and
//! a redelivery that only carries out a committed outbox entry observes nothing: every
//! start and end is counted once, by the replica whose commit made it, whichever that is.

use crate::core::{
    call_of, CallPhase, Event, Execution, FailureClass, Millis, NodeStatus, RunStatus, TaskKey,
    TimerId,
};
use crate::definition::Workflow;

/// What a committed event did, in the terms of the metrics (labels carry no ids).
#[derive(Debug, Default, PartialEq)]
pub(in crate::shell) struct Observed {
    /// The run started with this event, or ended without ever starting (abandoned before
    /// its start was applied): every run that ends has been counted as started.
    pub(in crate::shell) run_started: bool,
    /// The run ended with this event.
    pub(in crate::shell) run_ended: Option<RunEnd>,
    /// Nodes that ran and ended with this event (skipped nodes never ran).
    pub(in crate::shell) nodes: Vec<NodeEnd>,
    /// Call attempts that ended with this event.
    pub(in crate::shell) attempts: Vec<AttemptEnd>,
    /// 1 when the run queued for a slot with this event, -1 when it left the queue
    /// (admitted, or ended waiting), else 0.
    pub(in crate::shell) queued: i8,
}

/// A run's end.
#[derive(Debug, PartialEq)]
pub(in crate::shell) struct RunEnd {
    /// Success, failure or cancelled.
    pub(in crate::shell) status: RunStatus,
    /// Seconds since it started; `None` for a run that ended without starting.
    pub(in crate::shell) seconds: Option<f64>,
}

/// A node's end.
#[derive(Debug, PartialEq)]
pub(in crate::shell) struct NodeEnd {
    /// Its `type` as written in files.
    pub(in crate::shell) node_type: &'static str,
    /// How it ended.
    pub(in crate::shell) status: NodeStatus,
    /// From its start to its end.
    pub(in crate::shell) seconds: f64,
}

/// The end of one attempt of an agent (or workflow) call.
#[derive(Debug, PartialEq)]
pub(in crate::shell) struct AttemptEnd {
    /// The agent or workflow called.
    pub(in crate::shell) agent: String,
    /// How the attempt ended.
    pub(in crate::shell) outcome: Outcome,
    /// From its dispatch to its end; `None` when the dispatch time is unknown (a record
    /// written before it was kept).
    pub(in crate::shell) seconds: Option<f64>,
    /// Whether the call tries again after it.
    pub(in crate::shell) retried: bool,
}

/// How a call attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::shell) enum Outcome {
    /// The agent answered with an output the node accepted.
    Success,
    /// The agent answered with a failure, or with an output its schema refused.
    Failure,
    /// The attempt's timeout passed first.
    Timeout,
    /// The agent could not be reached.
    Unreachable,
    /// The run stopped the call (a cancel, a failure elsewhere, the deadline).
    Cancelled,
}

impl Outcome {
    /// The label value.
    pub(in crate::shell) fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Timeout => "timeout",
            Outcome::Unreachable => "unreachable",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// What `events` (one, or the timers one wake fired), applied at `now`, did to a run that
/// was `before` and is now `after`.
pub(in crate::shell) fn observe(
    workflow: &Workflow,
    before: &Execution,
    after: &Execution,
    events: &[Event],
    now: Millis,
) -> Observed {
    let ended = !before.status.is_terminal() && after.status.is_terminal();
    Observed {
        run_started: !before.started && (after.started || ended),
        run_ended: ended.then(|| RunEnd {
            status: after.status,
            seconds: after.started.then(|| seconds(after.started_at, now)),
        }),
        nodes: node_ends(workflow, before, after),
        attempts: attempt_ends(workflow, before, after, events, now),
        queued: match (before.status, after.status) {
            (RunStatus::Queued, RunStatus::Queued) => 0,
            (RunStatus::Queued, _) => -1,
            (_, RunStatus::Queued) => 1,
            _ => 0,
        },
    }
}

/// Nodes with a start that turned terminal: each node of a run ends once.
fn node_ends(workflow: &Workflow, before: &Execution, after: &Execution) -> Vec<NodeEnd> {
    let mut ends = Vec::new();
    for (id, node) in &after.nodes {
        let was_over = before.nodes.get(id).is_some_and(|n| n.status.is_terminal());
        let (Some(start), Some(end)) = (node.started_at, node.ended_at) else {
            continue;
        };
        if was_over || !node.status.is_terminal() {
            continue;
        }
        let Some(def) = workflow.node(id) else {
            continue;
        };
        ends.push(NodeEnd {
            node_type: def.kind.type_name(),
            status: node.status,
            seconds: seconds(start, end),
        });
    }
    ends
}

/// Attempts running before that are no longer running after: answered, failed, timed out
/// or stopped.
fn attempt_ends(
    workflow: &Workflow,
    before: &Execution,
    after: &Execution,
    events: &[Event],
    now: Millis,
) -> Vec<AttemptEnd> {
    let mut ends = Vec::new();
    for (task, call) in &before.calls {
        if !matches!(call.phase, CallPhase::Running { .. }) {
            continue;
        }
        let next = after.calls.get(task);
        let still_running = next.is_some_and(|n| {
            n.attempt == call.attempt && matches!(n.phase, CallPhase::Running { .. })
        });
        if still_running {
            continue;
        }
        let Some(def) = call_of(workflow, task) else {
            continue;
        };
        ends.push(AttemptEnd {
            agent: def.target.agent_name().to_string(),
            outcome: events
                .iter()
                .find_map(|e| outcome(workflow, task, call.attempt, e))
                .unwrap_or(Outcome::Cancelled),
            seconds: call.dispatched_at.map(|at| seconds(at, now)),
            retried: next.is_some(),
        });
    }
    ends
}

/// How attempt `attempt` of `task` ended, if `event` ended it.
fn outcome(workflow: &Workflow, task: &TaskKey, attempt: u32, event: &Event) -> Option<Outcome> {
    Some(match event {
        Event::CallSucceeded {
            task: t,
            attempt: a,
            output,
        } if t == task && *a == attempt => {
            // The node refuses an output its schema override rejects, as the core does.
            let refused = call_of(workflow, task)
                .and_then(|c| c.output_schema_override.as_ref())
                .is_some_and(|s| !s.violations(output).is_empty());
            if refused {
                Outcome::Failure
            } else {
                Outcome::Success
            }
        }
        Event::CallFailed {
            task: t,
            attempt: a,
            failure,
        } if t == task && *a == attempt => match failure.class {
            FailureClass::Failed => Outcome::Failure,
            FailureClass::Unreachable => Outcome::Unreachable,
            FailureClass::TimedOut => Outcome::Timeout,
        },
        Event::TimerFired {
            timer:
                TimerId::CallTimeout {
                    task: t,
                    attempt: a,
                },
        } if t == task && *a == attempt => Outcome::Timeout,
        _ => return None,
    })
}

/// Seconds from `from` to `to` (0 if the clocks of two replicas disagree).
fn seconds(from: Millis, to: Millis) -> f64 {
    to.0.saturating_sub(from.0) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{self, Command, ExecutionId, Failure};
    use serde_json::json;

    const WORKFLOW: &str = r#"
name: Chain
workflow:
  description: two agents in a row, the second retried once
  nodes:
    - {id: a, type: agent, agent_name: A}
    - id: b
      type: agent
      agent_name: B
      depends_on: [a]
      timeout: 1s
      retry_strategy: {limit: 1, retry_policy: Always}
  output_mapping: {b: "{{b.output}}"}
"#;

    fn workflow() -> Workflow {
        crate::definition::parse_str(WORKFLOW, "chain.yaml").expect("valid workflow")
    }

    /// Applies `event` at `now` and observes it.
    fn step(wf: &Workflow, state: &mut Execution, event: Event, now: u64) -> Observed {
        let before = state.clone();
        core::apply(wf, state, event.clone(), Millis(now));
        observe(
            wf,
            &before,
            state,
            std::slice::from_ref(&event),
            Millis(now),
        )
    }

    fn dispatched(wf: &Workflow, state: &mut Execution, event: Event, now: u64) -> TaskKey {
        core::apply(wf, state, event, Millis(now))
            .iter()
            .find_map(|c| match c {
                Command::Dispatch(d) => Some(d.task.clone()),
                _ => None,
            })
            .expect("a dispatch")
    }

    fn new_run() -> Execution {
        Execution::new(ExecutionId("r1".into()), "Chain")
    }

    #[test]
    fn every_timer_one_wake_fired_is_seen_with_its_own_outcome() {
        let yaml = r#"
name: Pair
workflow:
  description: two calls that time out together
  nodes:
    - {id: a, type: agent, agent_name: A, timeout: 1s}
    - {id: b, type: agent, agent_name: B, timeout: 1s}
  output_mapping: {}
"#;
        let wf = crate::definition::parse_str(yaml, "pair.yaml").expect("valid workflow");
        let mut st = Execution::new(ExecutionId("r2".into()), "Pair");
        core::apply(&wf, &mut st, Event::Started { input: json!({}) }, Millis(0));
        let before = st.clone();
        let fired: Vec<Event> = st
            .calls
            .iter()
            .map(|(task, call)| Event::TimerFired {
                timer: core::TimerId::CallTimeout {
                    task: task.clone(),
                    attempt: call.attempt,
                },
            })
            .collect();
        assert_eq!(fired.len(), 2);
        for event in &fired {
            core::apply(&wf, &mut st, event.clone(), Millis(1_000));
        }
        let o = observe(&wf, &before, &st, &fired, Millis(1_000));
        let outcomes: Vec<Outcome> = o.attempts.iter().map(|a| a.outcome).collect();
        assert_eq!(outcomes, [Outcome::Timeout, Outcome::Timeout], "{o:?}");
        // Seen through the first timer only, the second call looked cancelled.
        let first = observe(&wf, &before, &st, &fired[..1], Millis(1_000));
        assert!(first
            .attempts
            .iter()
            .any(|a| a.outcome == Outcome::Cancelled));
    }

    #[test]
    fn a_run_is_observed_starting_once_and_ending_once_with_its_nodes_and_calls() {
        let wf = workflow();
        let mut st = new_run();
        let start = Event::Started { input: json!({}) };
        let o = step(&wf, &mut st, start.clone(), 1_000);
        assert!(o.run_started && o.run_ended.is_none());
        assert_eq!(
            step(&wf, &mut st, start, 1_100),
            Observed::default(),
            "a duplicate"
        );

        let a = TaskKey::single("a");
        let done = Event::CallSucceeded {
            task: a.clone(),
            attempt: 1,
            output: json!({"x": 1}),
        };
        let o = step(&wf, &mut st, done.clone(), 1_500);
        assert!(!o.run_started);
        assert_eq!(
            o.nodes,
            vec![NodeEnd {
                node_type: "agent",
                status: NodeStatus::Success,
                seconds: 0.5
            }]
        );
        assert_eq!(
            o.attempts,
            vec![AttemptEnd {
                agent: "A".into(),
                outcome: Outcome::Success,
                seconds: Some(0.5),
                retried: false
            }]
        );
        assert_eq!(
            step(&wf, &mut st, done, 1_600),
            Observed::default(),
            "stale"
        );

        let b = TaskKey::single("b");
        let fail = Event::CallFailed {
            task: b.clone(),
            attempt: 1,
            failure: Failure {
                class: FailureClass::Unreachable,
                message: "no card".into(),
                kind: None,
            },
        };
        let o = step(&wf, &mut st, fail, 2_000);
        assert_eq!(o.attempts.len(), 1);
        assert_eq!(o.attempts[0].outcome, Outcome::Unreachable);
        assert!(o.attempts[0].retried, "b has a retry left");
        assert!(o.nodes.is_empty() && o.run_ended.is_none());

        let retry = Event::TimerFired {
            timer: TimerId::Retry {
                task: b.clone(),
                attempt: 2,
            },
        };
        let o = step(&wf, &mut st, retry, 3_000);
        assert_eq!(o, Observed::default(), "a dispatch ends nothing");
        let timeout = Event::TimerFired {
            timer: TimerId::CallTimeout {
                task: b.clone(),
                attempt: 2,
            },
        };
        let o = step(&wf, &mut st, timeout, 4_000);
        assert_eq!(o.attempts[0].outcome, Outcome::Timeout);
        assert_eq!(o.attempts[0].seconds, Some(1.0));
        assert!(!o.attempts[0].retried);
        assert_eq!(o.nodes[0].status, NodeStatus::TimedOut);
        assert_eq!(
            o.run_ended,
            Some(RunEnd {
                status: RunStatus::Failure,
                seconds: Some(3.0)
            })
        );
    }

    #[test]
    fn a_cancel_stops_the_running_call_and_ends_the_run_cancelled() {
        let wf = workflow();
        let mut st = new_run();
        let task = dispatched(&wf, &mut st, Event::Started { input: json!({}) }, 0);
        assert_eq!(task, TaskKey::single("a"));
        let o = step(&wf, &mut st, Event::CancelRequested { reason: None }, 250);
        assert_eq!(o.attempts[0].outcome, Outcome::Cancelled);
        assert_eq!(o.run_ended.map(|e| e.status), Some(RunStatus::Cancelled));
    }

    #[test]
    fn a_cancel_that_overtakes_the_start_counts_the_run_when_the_start_ends_it() {
        let wf = workflow();
        let mut st = new_run();
        let o = step(&wf, &mut st, Event::CancelRequested { reason: None }, 0);
        assert_eq!(o, Observed::default(), "kept, waiting for the start");
        let o = step(&wf, &mut st, Event::Started { input: json!({}) }, 10);
        assert!(o.run_started);
        assert_eq!(
            o.run_ended,
            Some(RunEnd {
                status: RunStatus::Cancelled,
                seconds: Some(0.0)
            })
        );
    }

    #[test]
    fn a_run_abandoned_before_its_start_is_counted_started_and_ended() {
        let wf = workflow();
        let mut st = new_run();
        let abandoned = Event::Abandoned {
            reason: "state too large".into(),
        };
        let o = step(&wf, &mut st, abandoned, 0);
        assert!(o.run_started, "every run that ends was counted as started");
        assert_eq!(o.run_ended.map(|e| e.status), Some(RunStatus::Failure));
    }
}
