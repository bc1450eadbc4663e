//! One call's life: queued for a concurrency slot, dispatched with a timeout, retried with
//! backoff, ended. Stale and duplicate results (another attempt, an ended call) are ignored.
//!
//! ```text
//! Queued --slot free--> Running --result--> ended (owner told)
//!                          |  \--failure, retries left--> BackingOff --timer--> Queued
//!                          \--timeout timer--> failure (TimedOut)
//! ```

use std::time::Duration;

use serde_json::Value;

use super::engine::Cx;
use super::state::{CallPhase, CallState, Execution};
use super::types::{
    Command, Dispatch, Failure, FailureClass, Millis, Progress, Slot, TaskKey, TimerId,
};
use crate::definition::{Call, NodeKind, NodeRole, RetryPolicy, Workflow};

/// How a call ended, as its owner hears it.
pub(super) enum CallEnd {
    /// The agent answered with this output.
    Output(Value),
    /// It failed for good (retries exhausted or not allowed): why, and the last attempt's
    /// error kind ([`Failure::kind`]) when it had one.
    Failed(String, Option<String>),
    /// The run stopped it; `ran` when some attempt was dispatched.
    Stopped {
        /// Whether an attempt was dispatched.
        ran: bool,
    },
}

/// The input and instruction that attempt `attempt` of call `task` was sent with, resolved
/// again from `state` (deterministic: what they name cannot change while the call runs);
/// `None` when that attempt is not running. A shell that kept only a dispatch's key sends
/// the request again with this.
pub fn call_request(
    workflow: &Workflow,
    state: &mut Execution,
    task: &TaskKey,
    attempt: u32,
) -> Option<(Value, Option<String>)> {
    let running = state
        .calls
        .get(task)
        .is_some_and(|c| c.attempt == attempt && matches!(c.phase, CallPhase::Running { .. }));
    if !running {
        return None;
    }
    Cx::reading(workflow, state).call_request(task).ok()
}

/// The request attempt `attempt` of call `task` was sent with, built again from `state`;
/// `None` when that attempt is not running. A shell that hears nothing from a call sends
/// this again: the same sub-task id, which the agent takes as a copy of the call.
pub fn redispatch(
    workflow: &Workflow,
    state: &mut Execution,
    task: &TaskKey,
    attempt: u32,
) -> Option<Dispatch> {
    let deadline = match state.calls.get(task) {
        Some(c) if c.attempt == attempt => match c.phase {
            CallPhase::Running { deadline } => deadline,
            _ => return None,
        },
        _ => return None,
    };
    Cx::reading(workflow, state).dispatch_of(task, attempt, deadline)
}

/// The definition of the call a task makes (a fork branch's, or its node's); `None` for a
/// task of no call of `workflow`.
pub fn call_of<'w>(workflow: &'w Workflow, task: &TaskKey) -> Option<&'w Call> {
    let node = workflow.node(&task.node)?;
    match (&node.kind, task.slot) {
        (NodeKind::Fork { branches, .. }, Slot::Branch(i)) => {
            branches.get(i as usize).map(|b| &b.call)
        }
        (NodeKind::Call(call), _) => Some(call),
        _ => None,
    }
}

impl Cx<'_> {
    /// The definition of the call a task makes.
    pub(super) fn call_def(&self, key: &TaskKey) -> Option<&Call> {
        call_of(self.wf, key)
    }

    /// Creates a call (its input already resolved once by the caller, so a template that
    /// cannot resolve fails the node before any call exists) and starts it when a slot is
    /// free.
    pub(super) fn add_call(&mut self, key: TaskKey) {
        let state = CallState {
            attempt: 1,
            phase: CallPhase::Queued,
            dispatched_at: None,
            agent_slot: Default::default(),
        };
        self.st.calls.insert(key.clone(), state);
        self.queue_or_dispatch(key);
    }

    fn queue_or_dispatch(&mut self, key: TaskKey) {
        let limit = self.wf.concurrency.map_or(u32::MAX, |c| c as u32);
        // A paused run dispatches nothing: the call waits in the queue for the resume.
        if self.st.in_flight >= limit || self.paused() {
            self.st.queue.push_back(key);
        } else {
            self.dispatch(&key);
        }
    }

    /// The request of attempt `attempt` of call `key`, timing out at `deadline`: the same
    /// whenever it is built while the attempt runs (the values its input names cannot change
    /// while the call lives).
    pub(super) fn dispatch_of(
        &mut self,
        key: &TaskKey,
        attempt: u32,
        deadline: Millis,
    ) -> Option<Dispatch> {
        let def = self.call_def(key)?;
        let target = def.target.clone();
        let input_schema = def.input_schema_override.as_ref().map(|s| s.source.clone());
        let output_schema = def
            .output_schema_override
            .as_ref()
            .map(|s| s.source.clone());
        let (input, instruction) = self.call_request(key).unwrap_or((Value::Null, None));
        Some(Dispatch {
            task: key.clone(),
            attempt,
            sub_task_id: key.sub_task_id(&self.st.id, attempt),
            node_id: key.node.clone(),
            target,
            input,
            instruction,
            input_schema,
            output_schema,
            deadline,
        })
    }

    fn dispatch(&mut self, key: &TaskKey) {
        let Some(def) = self.call_def(key) else {
            return;
        };
        let timeout = def.timeout.unwrap_or(self.wf.default_node_timeout);
        let deadline = self.now.plus(timeout);
        let Some(attempt) = self.st.calls.get(key).map(|c| c.attempt) else {
            return;
        };
        let Some(dispatch) = self.dispatch_of(key, attempt, deadline) else {
            return;
        };
        let target = dispatch.target.clone();
        let Some(call) = self.st.calls.get_mut(key) else {
            return;
        };
        call.phase = CallPhase::Running { deadline };
        call.dispatched_at = Some(self.now);
        call.agent_slot = Default::default();
        self.st.in_flight += 1;
        let (iteration_index, parent_node_id) = match key.slot {
            Slot::Single => (None, None),
            Slot::Branch(i) => (Some(i), None),
            Slot::Item(i) | Slot::Iteration(i) => (Some(i), self.owner_id(key)),
        };
        self.out.push(Command::Progress(Progress::NodeStarted {
            node_id: key.node.clone(),
            node_type: self
                .wf
                .node(&key.node)
                .map_or("agent", |n| n.kind.type_name())
                .into(),
            agent: Some(target.agent_name().to_string()),
            sub_task_id: Some(dispatch.sub_task_id.clone()),
            iteration_index,
            parent_node_id,
            attempt: Some(attempt),
        }));
        self.send_attempt(key, attempt, deadline, dispatch);
    }

    /// Arms the attempt's timeout and sends it: the two commands every dispatch ends with
    /// (a first send, and a call let through by its agent's gate).
    pub(super) fn send_attempt(
        &mut self,
        key: &TaskKey,
        attempt: u32,
        deadline: Millis,
        dispatch: Dispatch,
    ) {
        self.out.push(Command::StartTimer {
            timer: TimerId::CallTimeout {
                task: key.clone(),
                attempt,
            },
            at: deadline,
        });
        self.out.push(Command::Dispatch(dispatch));
    }

    fn owner_id(&self, key: &TaskKey) -> Option<String> {
        let idx = *self.wf.graph.index.get(&key.node)?;
        match self.wf.graph.roles[idx] {
            NodeRole::Inner { owner } => Some(self.wf.nodes[owner].id.clone()),
            _ => None,
        }
    }

    /// A running call stopped holding a slot: hand the slot to the oldest queued call.
    fn release_slot(&mut self) {
        self.st.in_flight = self.st.in_flight.saturating_sub(1);
        self.dispatch_queued();
    }

    /// Dispatches queued calls, oldest first, while slots are free and the run is not
    /// paused.
    pub(super) fn dispatch_queued(&mut self) {
        let limit = self.wf.concurrency.map_or(u32::MAX, |c| c as u32);
        while self.st.in_flight < limit && !self.paused() {
            let Some(key) = self.st.queue.pop_front() else {
                break;
            };
            let queued = self
                .st
                .calls
                .get(&key)
                .is_some_and(|c| c.phase == CallPhase::Queued);
            if queued {
                self.dispatch(&key);
            }
        }
    }

    /// The attempt `attempt` of `key` is running, or `None` (stale or duplicate event).
    pub(super) fn running(&self, key: &TaskKey, attempt: u32) -> bool {
        self.st
            .calls
            .get(key)
            .is_some_and(|c| c.attempt == attempt && matches!(c.phase, CallPhase::Running { .. }))
    }

    pub(super) fn call_succeeded(&mut self, key: TaskKey, attempt: u32, mut output: Value) {
        if !self.running(&key, attempt) {
            return;
        }
        // The output contract's defaults fill in what the agent left out, before the
        // contract is checked and before any template sees the output.
        let contract = self
            .call_def(&key)
            .and_then(|c| c.output_schema_override.as_ref());
        if let Some(schema) = contract {
            schema.apply_defaults(&mut output);
        }
        let violations = contract
            .map(|s| s.violations_as_is(&output))
            .unwrap_or_default();
        if !violations.is_empty() {
            let message = format!(
                "output does not match output_schema_override: {}",
                violations.join("; ")
            );
            let failure = Failure {
                class: FailureClass::Failed,
                message,
                kind: None,
            };
            return self.attempt_failed(key, attempt, failure);
        }
        self.st.calls.remove(&key);
        self.disarm_timeout(&key, attempt);
        self.release_slot();
        self.call_ended(&key, CallEnd::Output(output));
    }

    pub(super) fn call_failed(&mut self, key: TaskKey, attempt: u32, failure: Failure) {
        if self.running(&key, attempt) {
            self.disarm_timeout(&key, attempt);
            self.attempt_failed(key, attempt, failure);
        }
    }

    /// The attempt ended before its timeout: the timeout timer is no longer needed.
    fn disarm_timeout(&mut self, key: &TaskKey, attempt: u32) {
        let timer = TimerId::CallTimeout {
            task: key.clone(),
            attempt,
        };
        self.out.push(Command::CancelTimer { timer });
    }

    fn attempt_failed(&mut self, key: TaskKey, attempt: u32, failure: Failure) {
        let strategy = self
            .call_def(&key)
            .and_then(|c| self.wf.retry_strategy_for(c))
            .cloned();
        let agent = self
            .call_def(&key)
            .map(|c| c.target.agent_name().to_string());
        self.release_slot();
        let retry = strategy.as_ref().is_some_and(|s| {
            let class_ok = match s.policy {
                RetryPolicy::Always => true,
                RetryPolicy::OnFailure => failure.class == FailureClass::Failed,
                RetryPolicy::OnError => failure.class != FailureClass::Failed,
            };
            let kind_ok = !failure
                .kind
                .as_ref()
                .is_some_and(|k| s.non_retryable_errors.contains(k));
            class_ok && kind_ok && attempt <= s.limit && !self.halted()
        });
        if let (true, Some(s)) = (retry, strategy.as_ref()) {
            let until = self.now.plus(s.backoff.delay_after(attempt));
            if let Some(call) = self.st.calls.get_mut(&key) {
                call.attempt = attempt + 1;
                call.phase = CallPhase::BackingOff { until };
            }
            let timer = TimerId::Retry {
                task: key,
                attempt: attempt + 1,
            };
            self.out.push(Command::StartTimer { timer, at: until });
            return;
        }
        self.st.calls.remove(&key);
        let attempts = strategy.map_or(1, |s| s.limit + 1);
        let agent = agent.unwrap_or_default();
        let why = match failure.class {
            FailureClass::Failed => format!("agent '{agent}' failed: {}", failure.message),
            FailureClass::Unreachable => {
                format!("agent '{agent}' could not be reached: {}", failure.message)
            }
            FailureClass::TimedOut => format!("agent '{agent}' {}", failure.message),
        };
        let message = if attempt > 1 || attempts > 1 {
            format!("{why} (attempt {attempt} of {attempts})")
        } else {
            why
        };
        self.call_ended(&key, CallEnd::Failed(message, failure.kind));
    }

    /// A call timeout or a retry backoff came due.
    pub(super) fn call_timer(&mut self, timer: TimerId) {
        match timer {
            TimerId::CallTimeout { task, attempt } => {
                // A call waiting for its agent's slot was not sent: its timeout starts with
                // the grant (see `agent_slots`).
                if !self.running(&task, attempt) || self.waits_for_slot(&task) {
                    return;
                }
                let timeout = self
                    .call_def(&task)
                    .and_then(|c| c.timeout)
                    .unwrap_or(self.wf.default_node_timeout);
                self.cancel_remote(&task, attempt);
                let failure = Failure {
                    class: FailureClass::TimedOut,
                    message: format!("timed out after {}", readable(timeout)),
                    kind: Some(Failure::TIMEOUT.into()),
                };
                self.attempt_failed(task, attempt, failure);
            }
            TimerId::Retry { task, attempt } => {
                let due = self.st.calls.get(&task).is_some_and(|c| {
                    c.attempt == attempt && matches!(c.phase, CallPhase::BackingOff { .. })
                });
                if !due {
                    return;
                }
                if self.halted() {
                    self.st.calls.remove(&task);
                    return self.call_ended(&task, CallEnd::Stopped { ran: true });
                }
                if let Some(c) = self.st.calls.get_mut(&task) {
                    c.phase = CallPhase::Queued;
                }
                self.queue_or_dispatch(task);
            }
            _ => {}
        }
    }

    fn cancel_remote(&mut self, key: &TaskKey, attempt: u32) {
        let agent = self
            .call_def(key)
            .map(|c| c.target.agent_name().to_string());
        self.out.push(Command::CancelCall {
            task: key.clone(),
            attempt,
            sub_task_id: key.sub_task_id(&self.st.id, attempt),
            agent: agent.unwrap_or_default(),
        });
    }

    /// Ends a call because the run stopped it: a running attempt is cancelled at the
    /// agent, and the owner hears `Stopped`.
    pub(super) fn drop_call(&mut self, key: &TaskKey) {
        let Some(call) = self.remove_call(key) else {
            return;
        };
        let ran = call.attempt > 1 || matches!(call.phase, CallPhase::Running { .. });
        self.call_ended(key, CallEnd::Stopped { ran });
    }

    /// Removes a call without telling its owner; a running attempt is cancelled and frees
    /// its slot.
    pub(super) fn remove_call(&mut self, key: &TaskKey) -> Option<CallState> {
        let call = self.st.calls.remove(key)?;
        if let CallPhase::Running { .. } = call.phase {
            self.cancel_remote(key, call.attempt);
            self.disarm_timeout(key, call.attempt);
            self.release_slot();
        }
        Some(call)
    }
}

/// A duration in the largest units that fit, for messages: `0.5 s`, `30 s`, `2 min`,
/// `1 min 30 s`, `1 h 30 min` (millisecond precision).
fn readable(d: Duration) -> String {
    let ms = d.as_millis();
    let (hours, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let mut parts = Vec::new();
    if hours > 0 {
        parts.push(format!("{hours} h"));
    }
    if minutes > 0 {
        parts.push(format!("{minutes} min"));
    }
    if rest > 0 || parts.is_empty() {
        let secs = format!("{}.{:03}", rest / 1000, rest % 1000);
        let secs = secs.trim_end_matches('0').trim_end_matches('.');
        parts.push(format!("{secs} s"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::testkit::{dispatches, started_timers, with_nodes, workflow, Run};
    use super::super::types::{Command, FailureClass, Millis, NodeStatus, TaskKey, TimerId};
    use super::readable;

    fn retrying(strategy: &str) -> crate::definition::Workflow {
        workflow(&format!(
            r#"
name: R
workflow:
  description: d
  nodes:
    - {{id: a, type: agent, agent_name: A, timeout: 10s, retry_strategy: {strategy}}}
  output_mapping: {{a: "{{{{a.output}}}}"}}
"#
        ))
    }

    fn a() -> TaskKey {
        TaskKey::single("a")
    }

    /// Fails attempt `attempt` and returns when its retry timer is due.
    fn fail_and_backoff(run: &mut Run<'_>, attempt: u32) -> Millis {
        let out = run.fail(a(), attempt, FailureClass::Failed);
        let timers = started_timers(&out);
        let retry = TimerId::Retry {
            task: a(),
            attempt: attempt + 1,
        };
        assert_eq!(timers.len(), 1, "{out:?}");
        assert_eq!(*timers[0].0, retry);
        timers[0].1
    }

    #[test]
    fn backoff_grows_by_its_factor_up_to_its_cap() {
        let wf = retrying("{limit: 4, backoff: {duration: 1s, factor: 2, max_duration: 3s}}");
        let (mut run, _) = Run::start(&wf, json!({}));
        let mut delays = Vec::new();
        for attempt in 1..=3 {
            let due = fail_and_backoff(&mut run, attempt);
            delays.push(due.0 - run.now.0);
            run.now = due;
            let out = run.fire(TimerId::Retry {
                task: a(),
                attempt: attempt + 1,
            });
            assert_eq!(dispatches(&out)[0].attempt, attempt + 1);
        }
        assert_eq!(delays, vec![1000, 2000, 3000]);
    }

    #[test]
    fn a_stale_attempt_result_is_ignored() {
        let wf = retrying("{limit: 1, backoff: {duration: 1s}}");
        let (mut run, _) = Run::start(&wf, json!({}));
        run.now = fail_and_backoff(&mut run, 1);
        run.fire(TimerId::Retry {
            task: a(),
            attempt: 2,
        });
        let before = run.st.clone();
        assert!(run.succeed(a(), 1, json!("late")).is_empty());
        assert!(run.fail(a(), 1, FailureClass::Failed).is_empty());
        let stale_timeout = TimerId::CallTimeout {
            task: a(),
            attempt: 1,
        };
        assert!(run.fire(stale_timeout).is_empty());
        assert_eq!(run.st, before);
        run.succeed(a(), 2, json!("ok"));
        assert_eq!(run.status("a"), NodeStatus::Success);
    }

    #[test]
    fn retry_policies_pick_the_failure_classes_they_retry() {
        let retried = |policy: &str, class: FailureClass| {
            let wf = retrying(&format!("{{limit: 1, retry_policy: {policy}}}"));
            let (mut run, _) = Run::start(&wf, json!({}));
            !started_timers(&run.fail(a(), 1, class)).is_empty()
        };
        assert!(retried("Always", FailureClass::Failed));
        assert!(retried("Always", FailureClass::Unreachable));
        assert!(retried("OnFailure", FailureClass::Failed));
        assert!(!retried("OnFailure", FailureClass::TimedOut));
        assert!(retried("OnError", FailureClass::Unreachable));
        assert!(retried("OnError", FailureClass::TimedOut));
        assert!(!retried("OnError", FailureClass::Failed));
    }

    #[test]
    fn a_timeout_cancels_the_attempt_at_the_agent_and_ends_the_node_timed_out() {
        let wf = retrying("{limit: 0}");
        let (mut run, start) = Run::start(&wf, json!({}));
        let sub_task_id = dispatches(&start)[0].sub_task_id.clone();
        run.now = Millis(10_000);
        let out = run.fire(TimerId::CallTimeout {
            task: a(),
            attempt: 1,
        });
        assert!(out.contains(&Command::CancelCall {
            task: a(),
            attempt: 1,
            sub_task_id,
            agent: "A".into(),
        }));
        assert_eq!(run.status("a"), NodeStatus::TimedOut);
        assert_eq!(run.error("a"), "agent 'A' timed out after 10 s");
        assert_eq!(run.st.nodes["a"].error_kind.as_deref(), Some("timeout"));
    }

    #[test]
    fn a_timeout_is_not_retried_when_non_retryable_errors_lists_timeout() {
        let wf = retrying("{limit: 3, non_retryable_errors: [timeout]}");
        let (mut run, _) = Run::start(&wf, json!({}));
        run.now = Millis(10_000);
        let out = run.fire(TimerId::CallTimeout {
            task: a(),
            attempt: 1,
        });
        assert!(started_timers(&out).is_empty(), "no retry: {out:?}");
        assert_eq!(run.status("a"), NodeStatus::TimedOut);
    }

    #[test]
    fn timeouts_read_in_the_largest_units_that_fit() {
        let cases = [
            (Duration::from_millis(500), "0.5 s"),
            (Duration::from_millis(1250), "1.25 s"),
            (Duration::from_secs(30), "30 s"),
            (Duration::from_secs(120), "2 min"),
            (Duration::from_secs(90), "1 min 30 s"),
            (Duration::from_millis(61_500), "1 min 1.5 s"),
            (Duration::from_secs(3600), "1 h"),
            (Duration::from_secs(5400), "1 h 30 min"),
            (Duration::from_secs(3 * 86_400), "72 h"),
            (Duration::ZERO, "0 s"),
        ];
        for (d, text) in cases {
            assert_eq!(readable(d), text, "{d:?}");
        }
    }

    #[test]
    fn sub_task_ids_name_the_run_node_slot_and_attempt() {
        let wf = retrying("{limit: 1, backoff: {duration: 1s}}");
        let (mut run, start) = Run::start(&wf, json!({}));
        assert_eq!(dispatches(&start)[0].sub_task_id, "x_a_x_1");
        run.now = fail_and_backoff(&mut run, 1);
        let out = run.fire(TimerId::Retry {
            task: a(),
            attempt: 2,
        });
        assert_eq!(dispatches(&out)[0].sub_task_id, "x_a_x_2");
        // The same run, state and event give the same id: a replica resuming agrees.
        let (_, again) = Run::start(&wf, json!({}));
        assert_eq!(dispatches(&again)[0].sub_task_id, "x_a_x_1");
    }

    #[test]
    fn the_run_concurrency_queues_calls_and_a_freed_slot_dispatches_the_oldest() {
        let wf = with_nodes(
            "  concurrency: 1\n",
            r#"
    - {id: p, type: agent, agent_name: A}
    - {id: q, type: agent, agent_name: A}
    - {id: r, type: agent, agent_name: A}
"#,
        );
        let (mut run, start) = Run::start(&wf, json!({}));
        let first: Vec<&str> = dispatches(&start)
            .iter()
            .map(|d| d.node_id.as_str())
            .collect();
        assert_eq!(first, vec!["p"]);
        run.wait(Duration::from_millis(5));
        let out = run.succeed(TaskKey::single("p"), 1, json!(1));
        let next: Vec<&str> = dispatches(&out)
            .iter()
            .map(|d| d.node_id.as_str())
            .collect();
        assert_eq!(next, vec!["q"]);
        assert_eq!(run.st.in_flight, 1);
    }
}
