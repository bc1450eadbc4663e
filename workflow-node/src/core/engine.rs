//! Readiness, node ends, stopping, and the end of a run (how a run stops and ends is
//! `ending`; this file decides when).
//!
//! | event             | effect                                                           |
//! |-------------------|------------------------------------------------------------------|
//! | `Started`         | validate input, start the deadline, consider the roots           |
//! | `CallSucceeded`   | end the call; its owner (node, map, fork, loop) moves on          |
//! | `CallFailed`      | retry with backoff, or end the call as failed                     |
//! | `TimerFired`      | call timeout, retry start, loop delay, approval timeout, deadline |
//! | `CancelRequested` | cancel running calls, skip the rest, run the cancel handlers      |
//! | `ApprovalDecided` | end a waiting approval                                            |
//! | `SignalReceived`  | a waiting wait node takes it, or the run keeps it (`signals`)     |
//! | `Abandoned`       | end the run failed at once: cancel calls, skip the rest          |
//! | `Pause/ResumeRequested` | see `pause`                                                |
//! | `Admitted`        | a queued run starts (`flow`); a queued run takes only this, a cancel, an abandonment and signals |
//!
//! A node is considered when one of its dependencies ends; consideration goes through a
//! work list, so cascades of skips never recurse. Unstarted runs absorb every event but
//! `Started` and `CancelRequested` (kept: the run ends cancelled as it starts); terminal
//! runs absorb every event.

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::scope::RunScope;
use super::state::{Execution, NodeState};
use super::types::{Command, Event, Millis, NodeStatus, Progress, RunError, RunStatus, TimerId};
use crate::definition::{JoinStrategy, LoopNode, MapNode, NodeKind, NodeRole, Workflow};

/// Applies one event to a run and returns what the shell must do.
///
/// Deterministic: the same workflow, state, event and time always give the same new state
/// and the same commands. Events that do not matter (duplicates, stale attempts, anything
/// before `Started` or after the end) change nothing and return no commands. The converse does not hold: an
/// event may change the state and return no command (a fork branch that is not the last
/// one ends), so a shell must commit whenever the state changed, not only when commands
/// came out.
pub fn apply(
    workflow: &Workflow,
    state: &mut Execution,
    event: Event,
    now: Millis,
) -> Vec<Command> {
    let mut cx = Cx {
        wf: workflow,
        st: state,
        now,
        out: Vec::new(),
        work: VecDeque::new(),
    };
    if cx.st.status.is_terminal() {
        return Vec::new();
    }
    if cx.st.status == RunStatus::Queued {
        cx.while_queued(event);
        return cx.out;
    }
    match event {
        Event::Started { input } => cx.start(input),
        Event::Abandoned { reason } => {
            cx.abandon(reason);
            return cx.out;
        }
        // A cancel that overtook its run's start is kept: the run ends cancelled when it
        // starts.
        Event::CancelRequested { .. } if !cx.st.started => {
            cx.st.cancel_requested = true;
            return Vec::new();
        }
        // Nothing can have been dispatched or armed before the start: whatever comes
        // first is stray, and must neither change the run nor end it.
        _ if !cx.st.started => return Vec::new(),
        Event::CallSucceeded {
            task,
            attempt,
            output,
        } => cx.call_succeeded(task, attempt, output),
        Event::CallFailed {
            task,
            attempt,
            failure,
        } => cx.call_failed(task, attempt, failure),
        Event::SlotWaiting { task, attempt } => cx.slot_waiting(&task, attempt),
        Event::SlotGranted { task, attempt } => cx.slot_granted(&task, attempt),
        Event::TimerFired { timer } => cx.timer_fired(timer),
        Event::CancelRequested { reason } => cx.cancel(reason),
        Event::ApprovalDecided {
            node,
            approved,
            by,
            comment,
        } => cx.approval_decided(&node, approved, by, comment),
        Event::PauseRequested { reason } => cx.pause(reason),
        Event::ResumeRequested => cx.resume(),
        Event::SignalReceived { signal } => cx.signal_received(signal),
        Event::Admitted => {}
    }
    cx.settle();
    cx.out
}

/// The context of one `apply`.
pub(super) struct Cx<'a> {
    pub(super) wf: &'a Workflow,
    pub(super) st: &'a mut Execution,
    pub(super) now: Millis,
    pub(super) out: Vec<Command>,
    /// Main nodes to consider, because a dependency ended.
    work: VecDeque<usize>,
}

impl<'a> Cx<'a> {
    /// A context that only reads `st`: no event, no clock, no commands kept.
    pub(super) fn reading(wf: &'a Workflow, st: &'a mut Execution) -> Cx<'a> {
        Cx {
            wf,
            st,
            now: Millis(0),
            out: Vec::new(),
            work: VecDeque::new(),
        }
    }
}

impl Cx<'_> {
    fn start(&mut self, input: Value) {
        if self.st.started {
            return;
        }
        self.st.started = true;
        self.st.started_at = self.now;
        self.st.deadline = self.now.plus(self.wf.max_execution_time);
        self.st.input = input;
        // Before anything sees the input: validation, templates, the progress that
        // reports it. Deterministic, so a replayed start completes it the same way.
        if let Some(schema) = &self.wf.input_schema {
            schema.apply_defaults(&mut self.st.input);
        }
        self.st.unfinished_main = self.main_to_end();
        self.out.push(Command::Progress(Progress::RunStarted {
            input: self.st.input.clone(),
        }));
        self.report_kept();
        if self.st.cancel_requested {
            self.st.error = Some(RunError {
                node_id: None,
                message: "cancelled before it started".into(),
                kind: None,
            });
            self.st.outcome = Some(RunStatus::Cancelled);
            self.finish_run();
            return;
        }
        if let Some(schema) = &self.wf.input_schema {
            let violations = schema.violations_as_is(&self.st.input);
            if !violations.is_empty() {
                self.st.error = Some(RunError {
                    node_id: None,
                    message: format!(
                        "input does not match input_schema: {}",
                        violations.join("; ")
                    ),
                    kind: None,
                });
                self.st.outcome = Some(RunStatus::Failure);
                self.finish_run();
                return;
            }
        }
        if self.queue_if_gated() {
            return;
        }
        self.begin();
    }

    /// Arms the deadline and considers the first nodes: the run's work begins (at its
    /// start, or when a queued run is admitted).
    pub(super) fn begin(&mut self) {
        self.out.push(Command::StartTimer {
            timer: TimerId::Deadline,
            at: self.st.deadline,
        });
        self.work.extend(self.first_considered());
    }

    /// Drains the work list, then ends the main DAG or the run when their time has come.
    ///
    /// An unstarted run is never settled: its `unfinished_main` of zero means "not yet
    /// counted", not "all ended".
    pub(super) fn settle(&mut self) {
        if !self.st.started {
            return;
        }
        loop {
            while let Some(idx) = self.work.pop_front() {
                self.consider(idx);
            }
            if self.st.status == RunStatus::Running && self.st.unfinished_main == 0 {
                self.main_done();
                continue;
            }
            if self.st.status == RunStatus::Finishing && self.st.exit_pending.is_empty() {
                self.finish_run();
            }
            if self.work.is_empty() {
                break;
            }
        }
    }

    /// Whether new main-DAG work must not start.
    pub(super) fn halted(&self) -> bool {
        self.st.stopping && self.st.status == RunStatus::Running
    }

    fn consider(&mut self, idx: usize) {
        let node = &self.wf.nodes[idx];
        if self.st.node_status(&node.id) != NodeStatus::Pending {
            return;
        }
        let status = |id: &String| self.st.node_status(id);
        if let NodeKind::Join { wait_for, strategy } = &node.kind {
            return self.consider_join(idx, wait_for, *strategy);
        }
        if !node.depends_on.iter().all(|d| status(d).is_terminal()) {
            return;
        }
        if let Some(reason) = self.stop_reason(idx, false) {
            return self.skip(idx, reason);
        }
        if self.when_holds(idx) {
            self.start_node(idx);
        }
    }

    /// A join ends as soon as its strategy is met (and every dependency outside `wait_for`
    /// has ended), or is skipped once everything has ended and the strategy cannot be met.
    fn consider_join(&mut self, idx: usize, wait_for: &[String], strategy: JoinStrategy) {
        let node = &self.wf.nodes[idx];
        let status = |id: &String| self.st.node_status(id);
        let succeeded = wait_for
            .iter()
            .filter(|d| status(d) == NodeStatus::Success)
            .count();
        let skipped = wait_for
            .iter()
            .filter(|d| status(d) == NodeStatus::Skipped)
            .count();
        let broken = wait_for.iter().any(|d| self.breaks_join(d));
        let continued = wait_for.iter().filter(|d| self.continued(d)).count();
        let all_ended = node.depends_on.iter().all(|d| status(d).is_terminal());
        let others_ended = node
            .depends_on
            .iter()
            .filter(|d| !wait_for.contains(d))
            .all(|d| status(d).is_terminal());
        let met = match strategy {
            JoinStrategy::All => all_ended && !broken && succeeded + continued > 0,
            JoinStrategy::Any => succeeded >= 1,
            JoinStrategy::NOfM(n) => succeeded >= n,
        };
        if met && others_ended {
            return self.end_join(idx, wait_for);
        }
        if !all_ended {
            return;
        }
        if let Some(reason) = self.stop_reason(idx, false) {
            return self.skip(idx, reason);
        }
        let reason = if skipped == wait_for.len() {
            "all nodes it waits for were skipped".to_string()
        } else {
            format!(
                "join strategy {} cannot be met: {succeeded} of {} nodes succeeded",
                strategy_name(strategy),
                wait_for.len()
            )
        };
        self.skip(idx, reason)
    }

    /// A join whose strategy is met succeeds with the outputs of the nodes it waited for
    /// that have one (unless the run stopped, a dependency broke, or `when` does not hold).
    fn end_join(&mut self, idx: usize, wait_for: &[String]) {
        if let Some(reason) = self.stop_reason(idx, true) {
            return self.skip(idx, reason);
        }
        if !self.when_holds(idx) {
            return;
        }
        let mut output = serde_json::Map::new();
        for d in wait_for {
            if let Some(out) = self.st.nodes.get(d).and_then(|n| n.output.clone()) {
                output.insert(d.clone(), out);
            }
        }
        self.node_started(idx);
        self.finish_node(idx, NodeStatus::Success, Some(Value::Object(output)), None);
    }

    /// Why a node whose dependencies have ended must be skipped, if it must.
    fn stop_reason(&self, idx: usize, join_met: bool) -> Option<String> {
        let node = &self.wf.nodes[idx];
        if self.halted() {
            return Some("the run stopped before reaching it".into());
        }
        let wait_for: &[String] = match &node.kind {
            NodeKind::Join { wait_for, .. } if join_met => wait_for,
            _ => &[],
        };
        for d in node.depends_on.iter().filter(|d| !wait_for.contains(d)) {
            if let Some(reason) = self.blocked_by(d) {
                return Some(reason);
            }
        }
        if !join_met
            && !node.depends_on.is_empty()
            && node
                .depends_on
                .iter()
                .all(|d| self.st.node_status(d) == NodeStatus::Skipped)
        {
            return Some("all its dependencies were skipped".into());
        }
        None
    }

    /// Evaluates `when`; skips (false) or fails (error) the node when it does not hold.
    fn when_holds(&mut self, idx: usize) -> bool {
        let Some(when) = &self.wf.nodes[idx].when else {
            return true;
        };
        let scope = self.node_scope(idx);
        match when.evaluate(&scope) {
            Ok(true) => true,
            Ok(false) => {
                self.skip(idx, format!("`when` is false: {}", when.source()));
                false
            }
            Err(e) => {
                self.node_started(idx);
                self.finish_node(idx, NodeStatus::Failure, None, Some(format!("when: {e}")));
                false
            }
        }
    }

    /// The scope of templates in a node: exit handlers also see the run's outcome.
    pub(super) fn node_scope(&self, idx: usize) -> RunScope<'_> {
        let mut scope = RunScope::new(self.wf, self.st);
        scope.outcome = self.wf.graph.roles[idx] == NodeRole::ExitHandler;
        scope
    }

    pub(super) fn skip(&mut self, idx: usize, reason: String) {
        self.finish_node(idx, NodeStatus::Skipped, None, Some(reason));
    }

    /// Marks a node running and says so.
    pub(super) fn node_started(&mut self, idx: usize) {
        let node = &self.wf.nodes[idx];
        let entry = self
            .st
            .nodes
            .entry(node.id.clone())
            .or_insert_with(|| NodeState::new(NodeStatus::Running));
        entry.status = NodeStatus::Running;
        entry.started_at = Some(self.now);
        if matches!(node.kind, NodeKind::Call(_)) {
            return; // calls say so when dispatched, with their sub-task id
        }
        self.out.push(Command::Progress(Progress::NodeStarted {
            node_id: node.id.clone(),
            node_type: node.kind.type_name().into(),
            agent: None,
            sub_task_id: None,
            iteration_index: None,
            parent_node_id: None,
            attempt: None,
        }));
    }

    /// Ends a node once; later calls for an ended node do nothing.
    pub(super) fn finish_node(
        &mut self,
        idx: usize,
        status: NodeStatus,
        output: Option<Value>,
        error: Option<String>,
    ) {
        self.finish_node_with(idx, status, output, error, None, None);
    }

    pub(super) fn finish_node_with(
        &mut self,
        idx: usize,
        status: NodeStatus,
        output: Option<Value>,
        error: Option<String>,
        condition_result: Option<bool>,
        selected_branch: Option<String>,
    ) {
        let node = &self.wf.nodes[idx];
        let kept = self.kept_output(idx, status, output.clone());
        let entry = self
            .st
            .nodes
            .entry(node.id.clone())
            .or_insert_with(|| NodeState::new(NodeStatus::Pending));
        if entry.status.is_terminal() {
            return;
        }
        entry.status = status;
        entry.output_rev += u32::from(kept.is_some());
        entry.output = kept;
        entry.error = error.clone();
        entry.ended_at = Some(self.now);
        entry.detail = None;
        self.out.push(Command::Progress(Progress::NodeFinished {
            node_id: node.id.clone(),
            status,
            output,
            error: error.clone(),
            condition_result,
            selected_branch,
        }));
        if let NodeKind::Map(MapNode { node: inner, .. })
        | NodeKind::Loop(LoopNode { node: inner, .. }) = &node.kind
        {
            self.end_inner(inner);
        }
        match self.wf.graph.roles[idx] {
            NodeRole::Main => {
                self.st.unfinished_main -= 1;
                if self.halts_run(idx, status) {
                    self.main_failed(idx, error.unwrap_or_default());
                }
                self.work
                    .extend(self.wf.graph.dependents[idx].iter().copied());
            }
            NodeRole::Inner { .. } => {}
            NodeRole::ExitHandler => {
                self.exit_handler_ended(&node.id, self.halts_run(idx, status), error)
            }
        }
    }

    /// A map's or loop's inner node ends with its owner, once, for callers that follow
    /// nodes (its per-item or per-iteration calls are reported as they start).
    fn end_inner(&mut self, inner: &str) {
        let state = self
            .st
            .nodes
            .entry(inner.to_string())
            .or_insert_with(|| NodeState::new(NodeStatus::Skipped));
        if !state.status.is_terminal() {
            state.status = NodeStatus::Cancelled;
        }
        state.ended_at.get_or_insert(self.now);
        self.out.push(Command::Progress(Progress::NodeFinished {
            node_id: inner.to_string(),
            status: state.status,
            output: state.output.clone(),
            error: None,
            condition_result: None,
            selected_branch: None,
        }));
    }

    /// An exit handler that failed under `halt` turns a successful run into a failed one.
    fn exit_handler_ended(&mut self, id: &str, halts: bool, error: Option<String>) {
        self.st.exit_pending.retain(|pending| pending != id);
        if halts && self.st.outcome == Some(RunStatus::Success) {
            self.st.outcome = Some(RunStatus::Failure);
            self.st.output = None;
            self.st.error = Some(RunError {
                node_id: Some(id.to_string()),
                message: format!("exit handler '{id}' failed: {}", error.unwrap_or_default()),
                kind: self.st.nodes.get(id).and_then(|n| n.error_kind.clone()),
            });
        }
    }

    fn main_failed(&mut self, idx: usize, message: String) {
        let id = &self.wf.nodes[idx].id;
        if self.st.error.is_none() {
            self.st.error = Some(RunError {
                node_id: Some(id.clone()),
                message: format!("node '{id}' failed: {message}"),
                kind: self.st.nodes.get(id).and_then(|n| n.error_kind.clone()),
            });
        }
        if self.wf.fail_fast && !self.st.stopping {
            self.stop(false);
        }
    }

    fn approval_decided(
        &mut self,
        node: &str,
        approved: bool,
        by: Option<String>,
        comment: Option<String>,
    ) {
        let Some(&idx) = self.wf.graph.index.get(node) else {
            return;
        };
        let NodeKind::Approval(def) = &self.wf.nodes[idx].kind else {
            return;
        };
        if self.st.node_status(node) != NodeStatus::Waiting {
            return;
        }
        if !def.approvers.is_empty() && !by.as_ref().is_some_and(|b| def.approvers.contains(b)) {
            return;
        }
        if def.timeout.is_some() {
            let timer = TimerId::ApprovalTimeout {
                node: node.to_string(),
            };
            self.out.push(Command::CancelTimer { timer });
        }
        if approved {
            let output = json!({"approved": true, "by": by, "comment": comment});
            self.finish_node(idx, NodeStatus::Success, Some(output), None);
        } else {
            let who = by.as_deref().unwrap_or("an approver");
            let why = comment.map(|c| format!(": {c}")).unwrap_or_default();
            self.finish_node(
                idx,
                NodeStatus::Failure,
                None,
                Some(format!("rejected by {who}{why}")),
            );
        }
    }
}

fn strategy_name(s: JoinStrategy) -> String {
    match s {
        JoinStrategy::All => "all".into(),
        JoinStrategy::Any => "any".into(),
        JoinStrategy::NOfM(n) => format!("n_of_m (n = {n})"),
    }
}

mod ending;
#[cfg(test)]
mod tests;
