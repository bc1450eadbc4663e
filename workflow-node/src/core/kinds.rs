//! What each node type does when it starts, and when one of its calls ends.
//!
//! - call (agent, workflow): one call; the node ends with it.
//! - conditional, switch: evaluate, skip the targets not taken, end at once.
//! - map: one call per item, at most `concurrency_limit` at once; results in item order;
//!   the first failed item cancels the others and fails the map.
//! - fork: one call per branch; output keyed by `output_key`; `fail_fast` cancels siblings.
//! - loop: do-while over its inner node, with `delay` between iterations and a bounded
//!   number of iterations.
//! - approval: waits for a decision or its timeout.
//! - wait: waits for a signal or its timeout (see `signals`).
//! - join: ends at once when its strategy is met (see the engine's readiness).

use serde_json::{json, Value};
use workflow_expr::{Condition, Template};

use super::calls::CallEnd;
use super::engine::Cx;
use super::scope::RunScope;
use super::state::{CallPhase, Detail, ForkState, MapState};
use super::types::{Command, Millis, NodeStatus, Progress, Slot, TaskKey, TimerId};
use crate::definition::{
    ApprovalNode, ForkBranch, LoopNode, MapItems, MapNode, NodeId, NodeKind, NodeRole, OnExhausted,
    OnTimeout, SwitchCase,
};

/// How much earlier than the record says a timer may fire and still count: the clock
/// skew allowed between replicas (a timer fires by its replica's clock, the event is
/// applied by another's). Earlier than that it is not a timer of ours.
pub const TIMER_EARLY_TOLERANCE_MS: u64 = 60_000;

impl Cx<'_> {
    /// Starts a node whose dependencies allow it (and whose `when` held).
    pub(super) fn start_node(&mut self, idx: usize) {
        self.node_started(idx);
        match &self.wf.nodes[idx].kind {
            NodeKind::Call(_) => self.start_call(idx),
            NodeKind::Conditional {
                condition,
                true_branch,
                false_branch,
            } => self.start_conditional(idx, condition, true_branch, false_branch.as_ref()),
            NodeKind::Switch { cases, default } => self.start_switch(idx, cases, default.as_ref()),
            NodeKind::Map(map) => self.start_map(idx, map),
            NodeKind::Fork { branches, .. } => self.start_fork(idx, branches),
            NodeKind::Loop(_) => {
                self.set_detail(idx, Detail::Loop { iteration: 0 });
                self.start_iteration(idx, 0);
            }
            NodeKind::Approval(approval) => self.start_approval(idx, approval),
            NodeKind::Wait(wait) => self.start_wait(idx, wait),
            NodeKind::Join { .. } => {
                // Joins end as soon as their strategy is met; the engine does it.
            }
        }
    }

    fn start_call(&mut self, idx: usize) {
        let key = TaskKey::single(&self.wf.nodes[idx].id);
        match self.call_request(&key) {
            Ok(_) => self.add_call(key),
            Err(e) => self.fail(idx, e),
        }
    }

    /// Skips the branch not taken and ends at once.
    fn start_conditional(
        &mut self,
        idx: usize,
        condition: &Condition,
        true_branch: &NodeId,
        false_branch: Option<&NodeId>,
    ) {
        let taken = match condition.evaluate(&self.node_scope(idx)) {
            Ok(b) => b,
            Err(e) => return self.fail(idx, format!("condition: {e}")),
        };
        let (selected, other) = if taken {
            (Some(true_branch), false_branch)
        } else {
            (false_branch, Some(true_branch))
        };
        if let Some(other) = other {
            self.skip_branch(other, &self.wf.nodes[idx].id);
        }
        let output = json!({"condition_result": taken, "selected_branch": selected});
        self.finish_node_with(
            idx,
            NodeStatus::Success,
            Some(output),
            None,
            Some(taken),
            selected.cloned(),
        );
    }

    /// Takes the first case that holds (or the default), skips every other target and ends
    /// at once.
    fn start_switch(&mut self, idx: usize, cases: &[SwitchCase], default: Option<&NodeId>) {
        let scope = self.node_scope(idx);
        let mut selected = None;
        for (i, case) in cases.iter().enumerate() {
            match case.condition.evaluate(&scope) {
                Ok(true) => {
                    selected = Some((i, &case.target));
                    break;
                }
                Ok(false) => {}
                Err(e) => return self.fail(idx, format!("cases[{i}]: {e}")),
            }
        }
        let target = selected.map(|(_, t)| t).or(default);
        let targets = cases.iter().map(|c| &c.target).chain(default);
        let others: Vec<String> = targets.filter(|t| Some(*t) != target).cloned().collect();
        for other in others {
            self.skip_branch(&other, &self.wf.nodes[idx].id);
        }
        let output = json!({
            "selected_branch": target,
            "selected_case_index": selected.map(|(i, _)| i),
        });
        self.finish_node_with(
            idx,
            NodeStatus::Success,
            Some(output),
            None,
            None,
            target.cloned(),
        );
    }

    /// Resolves the items; an empty list succeeds at once, otherwise items start as the
    /// map's limit allows.
    fn start_map(&mut self, idx: usize, map: &MapNode) {
        let items = match &map.items {
            MapItems::Literal(items) => Ok(Value::Array(items.clone())),
            MapItems::Template(t) => t.resolve(&self.node_scope(idx)),
        };
        let items = match items {
            Ok(Value::Array(items)) => items,
            Ok(Value::Null) => Vec::new(),
            Ok(other) => {
                let kind = workflow_expr::type_name(&other);
                return self.fail(idx, format!("items: resolved to {kind}, expected an array"));
            }
            Err(e) => return self.fail(idx, format!("items: {e}")),
        };
        if items.len() > map.max_items {
            let n = items.len();
            let max = map.max_items;
            return self.fail(idx, format!("items: {n} items exceed max_items ({max})"));
        }
        if items.is_empty() {
            let output = json!({"results": []});
            self.set_inner_status(&map.node, NodeStatus::Skipped, None);
            return self.finish_node(idx, NodeStatus::Success, Some(output), None);
        }
        let n = items.len();
        let state = MapState {
            items,
            next: 0,
            active: 0,
            done: 0,
            results: vec![Value::Null; n],
        };
        self.set_detail(idx, Detail::Map(state));
        self.pump_map(idx);
    }

    /// Creates one call per branch; a branch whose request cannot resolve ends as failed
    /// (which may end the fork, and then no further branch starts).
    fn start_fork(&mut self, idx: usize, branches: &[ForkBranch]) {
        let node_id = &self.wf.nodes[idx].id;
        let state = ForkState {
            pending: branches.len() as u32,
            outputs: serde_json::Map::new(),
            failures: Vec::new(),
        };
        self.set_detail(idx, Detail::Fork(state));
        for (i, branch) in branches.iter().enumerate() {
            let key = TaskKey {
                node: node_id.clone(),
                slot: Slot::Branch(i as u32),
            };
            match self.call_request(&key) {
                Ok(_) => self.add_call(key),
                Err(e) => {
                    let msg = format!("branches[{i}] ('{}'): {e}", branch.id);
                    return self.fork_branch_ended(idx, i, CallEnd::Failed(msg, None));
                }
            }
            if self.st.node_status(node_id).is_terminal() {
                return;
            }
        }
    }

    /// Waits for a decision: asks the approvers and, with a timeout, arms its timer.
    fn start_approval(&mut self, idx: usize, approval: &ApprovalNode) {
        let node_id = &self.wf.nodes[idx].id;
        let message = match resolve_text(approval.message.as_ref(), &self.node_scope(idx)) {
            Ok(m) => m,
            Err(e) => return self.fail(idx, format!("message: {e}")),
        };
        let deadline = approval.timeout.map(|t| self.now.plus(t));
        if let Some(n) = self.st.nodes.get_mut(node_id) {
            n.status = NodeStatus::Waiting;
        }
        self.set_detail(idx, Detail::Approval { deadline });
        self.out.push(Command::RequestApproval {
            node: node_id.clone(),
            approvers: approval.approvers.clone(),
            message,
            deadline,
        });
        if let Some(at) = deadline {
            let timer = TimerId::ApprovalTimeout {
                node: node_id.clone(),
            };
            self.out.push(Command::StartTimer { timer, at });
        }
    }

    fn fail(&mut self, idx: usize, message: String) {
        self.finish_node(idx, NodeStatus::Failure, None, Some(message));
    }

    /// Fails a node because one of its calls failed with this error kind. The kind is
    /// recorded before the node ends, so the run's error (decided as it ends) carries it.
    /// A call that failed with kind `timeout` (its timeout passed) ends it `timed_out`.
    fn fail_with_kind(&mut self, idx: usize, message: String, kind: Option<String>) {
        let id = &self.wf.nodes[idx].id;
        let status = if kind.as_deref() == Some(super::Failure::TIMEOUT) {
            NodeStatus::TimedOut
        } else {
            NodeStatus::Failure
        };
        if let Some(node) = self.st.nodes.get_mut(id) {
            if !node.status.is_terminal() {
                node.error_kind = kind;
            }
        }
        self.finish_node(idx, status, None, Some(message));
    }

    /// Ends a node as cancelled because the run stopped.
    pub(super) fn end_as_stopped(&mut self, idx: usize) {
        let reason = Some("the run stopped".into());
        self.finish_node(idx, NodeStatus::Cancelled, None, reason);
    }

    fn skip_branch(&mut self, target: &str, by: &str) {
        if let Some(&t) = self.wf.graph.index.get(target) {
            if self.st.node_status(target) == NodeStatus::Pending {
                self.skip(t, format!("branch not taken by '{by}'"));
            }
        }
    }

    fn set_detail(&mut self, idx: usize, detail: Detail) {
        if let Some(n) = self.st.nodes.get_mut(&self.wf.nodes[idx].id) {
            n.detail = Some(detail);
        }
    }

    fn set_inner_status(&mut self, inner: &str, status: NodeStatus, output: Option<Value>) {
        let n = self
            .st
            .nodes
            .entry(inner.to_string())
            .or_insert_with(|| super::state::NodeState::new(status));
        n.status = status;
        if output.is_some() {
            n.output = output;
            n.output_rev += 1;
        }
        n.ended_at = status.is_terminal().then_some(self.now);
    }

    /// Whether any call of this node (or of its inner node) has not ended.
    pub(super) fn has_calls(&self, idx: usize) -> bool {
        let node = &self.wf.nodes[idx];
        let id = match &node.kind {
            NodeKind::Map(m) => &m.node,
            NodeKind::Loop(l) => &l.node,
            _ => &node.id,
        };
        self.st
            .calls
            .range(TaskKey::single(id)..)
            .next()
            .is_some_and(|(k, _)| k.node == *id)
    }

    /// The input of a node without `input`: the workflow input (no dependency), the
    /// dependency's output (one; through a conditional or switch, that node's own input),
    /// or an object keyed by dependency (several).
    fn implicit_input(&self, idx: usize) -> Value {
        let node = &self.wf.nodes[idx];
        match node.depends_on.as_slice() {
            [] => self.st.input.clone(),
            [dep] => {
                let Some(&d) = self.wf.graph.index.get(dep) else {
                    return Value::Null;
                };
                match self.wf.nodes[d].kind {
                    NodeKind::Conditional { .. } | NodeKind::Switch { .. } => {
                        self.implicit_input(d)
                    }
                    _ => self.output_of(dep),
                }
            }
            deps => Value::Object(
                deps.iter()
                    .map(|d| (d.clone(), self.output_of(d)))
                    .collect(),
            ),
        }
    }

    fn output_of(&self, id: &str) -> Value {
        self.st
            .nodes
            .get(id)
            .and_then(|n| n.output.clone())
            .unwrap_or(Value::Null)
    }

    /// Routes a call's end to its owner.
    pub(super) fn call_ended(&mut self, key: &TaskKey, end: CallEnd) {
        let Some(&idx) = self.wf.graph.index.get(&key.node) else {
            return;
        };
        match key.slot {
            Slot::Single => match end {
                CallEnd::Output(out) => self.finish_node(idx, NodeStatus::Success, Some(out), None),
                CallEnd::Failed(msg, kind) => self.fail_with_kind(idx, msg, kind),
                CallEnd::Stopped { ran: true } => self.end_as_stopped(idx),
                CallEnd::Stopped { ran: false } => {
                    self.skip(idx, "the run stopped before it was dispatched".into())
                }
            },
            Slot::Branch(i) => self.fork_branch_ended(idx, i as usize, end),
            Slot::Item(i) => {
                if let NodeRole::Inner { owner } = self.wf.graph.roles[idx] {
                    self.map_item_ended(owner, i, end);
                }
            }
            Slot::Iteration(i) => {
                if let NodeRole::Inner { owner } = self.wf.graph.roles[idx] {
                    self.iteration_ended(owner, i, end);
                }
            }
        }
    }

    fn map_state(&mut self, idx: usize) -> Option<&mut MapState> {
        match self
            .st
            .nodes
            .get_mut(&self.wf.nodes[idx].id)?
            .detail
            .as_mut()?
        {
            Detail::Map(m) => Some(m),
            _ => None,
        }
    }

    /// Starts items while the map's limit allows.
    fn pump_map(&mut self, idx: usize) {
        let NodeKind::Map(def) = &self.wf.nodes[idx].kind else {
            return;
        };
        let limit = def.concurrency_limit.map_or(u32::MAX, |c| c as u32);
        loop {
            if self.halted() {
                break;
            }
            let Some(map) = self.map_state(idx) else {
                return;
            };
            if map.active >= limit || map.next as usize >= map.items.len() {
                break;
            }
            let i = map.next;
            map.next += 1;
            map.active += 1;
            let key = TaskKey {
                node: def.node.clone(),
                slot: Slot::Item(i),
            };
            match self.call_request(&key) {
                Ok(_) => self.add_call(key),
                Err(e) => return self.map_item_ended(idx, i, CallEnd::Failed(e, None)),
            }
        }
        self.map_maybe_stopped(idx);
    }

    fn map_item_ended(&mut self, idx: usize, i: u32, end: CallEnd) {
        let NodeKind::Map(def) = &self.wf.nodes[idx].kind else {
            return;
        };
        let node_id = self.wf.nodes[idx].id.clone();
        let end = self.tolerate_inner(&def.node, end);
        let Some(map) = self.map_state(idx) else {
            return;
        };
        map.active -= 1;
        match end {
            CallEnd::Output(out) => {
                map.results[i as usize] = out;
                map.done += 1;
                let (total, done) = (map.items.len() as u32, map.done);
                self.out.push(Command::Progress(Progress::MapProgress {
                    node_id,
                    total_items: total,
                    completed_items: done,
                }));
                if done == total {
                    let Some(map) = self.map_state(idx) else {
                        return;
                    };
                    let results = std::mem::take(&mut map.results);
                    self.set_inner_status(&def.node, NodeStatus::Success, None);
                    let output = json!({ "results": results });
                    return self.finish_node(idx, NodeStatus::Success, Some(output), None);
                }
                self.pump_map(idx);
            }
            CallEnd::Failed(msg, kind) => {
                let keys: Vec<TaskKey> = self
                    .st
                    .calls
                    .range(
                        TaskKey {
                            node: def.node.clone(),
                            slot: Slot::Item(0),
                        }..,
                    )
                    .take_while(|(k, _)| k.node == def.node && matches!(k.slot, Slot::Item(_)))
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in keys {
                    self.remove_call(&key);
                }
                self.set_inner_status(&def.node, NodeStatus::Failure, None);
                self.fail_with_kind(idx, format!("item {i} failed: {msg}"), kind);
            }
            CallEnd::Stopped { .. } => self.map_maybe_stopped(idx),
        }
    }

    /// A halted map with no item in flight ends as cancelled.
    fn map_maybe_stopped(&mut self, idx: usize) {
        let halted = self.halted();
        let Some(map) = self.map_state(idx) else {
            return;
        };
        if halted && map.active == 0 {
            let NodeKind::Map(def) = &self.wf.nodes[idx].kind else {
                return;
            };
            self.set_inner_status(&def.node, NodeStatus::Cancelled, None);
            self.end_as_stopped(idx);
        }
    }

    fn fork_branch_ended(&mut self, idx: usize, i: usize, end: CallEnd) {
        let NodeKind::Fork {
            branches,
            fail_fast,
        } = &self.wf.nodes[idx].kind
        else {
            return;
        };
        let node_id = self.wf.nodes[idx].id.clone();
        let Some(Detail::Fork(fork)) = self
            .st
            .nodes
            .get_mut(&node_id)
            .and_then(|n| n.detail.as_mut())
        else {
            return;
        };
        fork.pending -= 1;
        let mut stopped = false;
        match end {
            CallEnd::Output(out) => {
                fork.outputs.insert(branches[i].output_key.clone(), out);
            }
            // A fork's failure may join several branches' errors: it carries no one kind.
            CallEnd::Failed(msg, _) => fork
                .failures
                .push(format!("branch '{}': {msg}", branches[i].id)),
            CallEnd::Stopped { .. } => stopped = true,
        }
        let failed = !fork.failures.is_empty();
        if failed && *fail_fast {
            let message = fork.failures.join("; ");
            for b in 0..branches.len() {
                self.remove_call(&TaskKey {
                    node: node_id.clone(),
                    slot: Slot::Branch(b as u32),
                });
            }
            return self.fail(idx, message);
        }
        if fork.pending > 0 {
            return;
        }
        let fork = std::mem::replace(
            fork,
            ForkState {
                pending: 0,
                outputs: serde_json::Map::new(),
                failures: Vec::new(),
            },
        );
        if failed {
            self.fail(idx, fork.failures.join("; "))
        } else if stopped || self.halted() {
            self.end_as_stopped(idx)
        } else {
            self.finish_node(
                idx,
                NodeStatus::Success,
                Some(Value::Object(fork.outputs)),
                None,
            )
        }
    }

    fn start_iteration(&mut self, idx: usize, iteration: u32) {
        let NodeKind::Loop(def) = &self.wf.nodes[idx].kind else {
            return;
        };
        let key = TaskKey {
            node: def.node.clone(),
            slot: Slot::Iteration(iteration),
        };
        match self.call_request(&key) {
            Ok(_) => {
                let prev = self.st.nodes.get(&def.node).and_then(|n| n.output.clone());
                self.set_inner_status(&def.node, NodeStatus::Running, prev);
                self.add_call(key)
            }
            Err(e) => self.iteration_ended(idx, iteration, CallEnd::Failed(e, None)),
        }
    }

    fn iteration_ended(&mut self, idx: usize, iteration: u32, end: CallEnd) {
        let NodeKind::Loop(def) = &self.wf.nodes[idx].kind else {
            return;
        };
        match self.tolerate_inner(&def.node, end) {
            CallEnd::Output(out) => {
                self.set_inner_status(&def.node, NodeStatus::Success, Some(out));
                self.iteration_succeeded(idx, def, iteration);
            }
            CallEnd::Failed(msg, kind) => {
                self.set_inner_status(&def.node, NodeStatus::Failure, None);
                self.fail_with_kind(idx, format!("iteration {iteration} failed: {msg}"), kind);
            }
            CallEnd::Stopped { .. } => {
                self.set_inner_status(&def.node, NodeStatus::Cancelled, None);
                self.end_as_stopped(idx);
            }
        }
    }

    /// Evaluates the loop's condition after an iteration: the loop ends (condition false,
    /// limit reached, run stopped) or goes on.
    fn iteration_succeeded(&mut self, idx: usize, def: &LoopNode, iteration: u32) {
        let mut scope = RunScope::new(self.wf, self.st);
        scope.loop_iteration = Some(iteration);
        let completed = iteration + 1;
        let output =
            |reason: &str| json!({"iterations_completed": completed, "stopped_reason": reason});
        match def.condition.evaluate(&scope) {
            Err(e) => self.fail(idx, format!("condition: {e}")),
            Ok(false) => self.finish_node(
                idx,
                NodeStatus::Success,
                Some(output("condition_false")),
                None,
            ),
            Ok(true) if completed >= def.max_iterations => match def.on_exhausted {
                OnExhausted::Succeed => self.finish_node(
                    idx,
                    NodeStatus::Success,
                    Some(output("max_iterations")),
                    None,
                ),
                OnExhausted::Fail => self.fail(
                    idx,
                    format!(
                        "reached max_iterations ({}) while its condition still held",
                        def.max_iterations
                    ),
                ),
            },
            Ok(true) if self.halted() => self.end_as_stopped(idx),
            Ok(true) => self.next_iteration(idx, def, completed),
        }
    }

    /// Starts iteration `iteration` now, or after the loop's delay.
    fn next_iteration(&mut self, idx: usize, def: &LoopNode, iteration: u32) {
        self.set_detail(idx, Detail::Loop { iteration });
        match def.delay {
            Some(delay) if !delay.is_zero() => {
                let node = self.wf.nodes[idx].id.clone();
                let timer = TimerId::LoopDelay { node, iteration };
                let at = self.now.plus(delay);
                self.out.push(Command::StartTimer { timer, at });
            }
            _ => self.start_iteration(idx, iteration),
        }
    }

    /// Any timer came due. One that the run's record says is not due yet (by more than
    /// [`TIMER_EARLY_TOLERANCE_MS`], the clock skew allowed between replicas) is ignored:
    /// the event names a timer, the record says when it is due.
    pub(super) fn timer_fired(&mut self, timer: TimerId) {
        if self.suspended(&timer) {
            return;
        }
        if let Some(due) = self.due(&timer) {
            if self.now.0.saturating_add(TIMER_EARLY_TOLERANCE_MS) < due.0 {
                return;
            }
        }
        match timer {
            TimerId::CallTimeout { .. } | TimerId::Retry { .. } => self.call_timer(timer),
            TimerId::Deadline => self.deadline(),
            TimerId::ExitGrace => self.exit_grace_over(),
            TimerId::WaitTimeout { node } => self.wait_timed_out(&node),
            TimerId::LoopDelay { node, iteration } => {
                let Some(&idx) = self.wf.graph.index.get(&node) else {
                    return;
                };
                let waiting = self.st.nodes.get(&node).is_some_and(|n| {
                    n.status == NodeStatus::Running && n.detail == Some(Detail::Loop { iteration })
                });
                if waiting && !self.has_calls(idx) {
                    self.start_iteration(idx, iteration);
                }
            }
            TimerId::ApprovalTimeout { node } => {
                let Some(&idx) = self.wf.graph.index.get(&node) else {
                    return;
                };
                let NodeKind::Approval(def) = &self.wf.nodes[idx].kind else {
                    return;
                };
                if self.st.node_status(&node) != NodeStatus::Waiting {
                    return;
                }
                let secs = def.timeout.map_or(0.0, |t| t.as_secs_f64());
                match def.on_timeout {
                    OnTimeout::Approve => {
                        let output = json!({"approved": true, "by": null, "timed_out": true});
                        self.finish_node(idx, NodeStatus::Success, Some(output), None)
                    }
                    OnTimeout::Reject => self.finish_node(
                        idx,
                        NodeStatus::TimedOut,
                        None,
                        Some(format!("no decision within {secs} s (on_timeout: reject)")),
                    ),
                }
            }
        }
    }
}

impl Cx<'_> {
    /// When `timer` is due by the record, for the timers whose due time it keeps (call
    /// timeouts, retries, approval timeouts and the run's deadline).
    fn due(&self, timer: &TimerId) -> Option<Millis> {
        match timer {
            TimerId::CallTimeout { task, attempt } | TimerId::Retry { task, attempt } => {
                let call = self.st.calls.get(task).filter(|c| c.attempt == *attempt)?;
                match (timer, call.phase) {
                    (TimerId::CallTimeout { .. }, CallPhase::Running { deadline }) => {
                        Some(deadline)
                    }
                    (TimerId::Retry { .. }, CallPhase::BackingOff { until }) => Some(until),
                    _ => None,
                }
            }
            TimerId::ApprovalTimeout { node } => match self.st.nodes.get(node)?.detail {
                Some(Detail::Approval { deadline }) => deadline,
                _ => None,
            },
            TimerId::WaitTimeout { node } => self.wait_due(node),
            TimerId::Deadline => self.st.started.then_some(self.st.deadline),
            TimerId::LoopDelay { .. } | TimerId::ExitGrace => None,
        }
    }

    /// The input and instruction of a call, resolved from the run's values: the node's
    /// scope, the map item, or the loop iteration. Deterministic for the life of the call,
    /// so it is resolved when the call is created (to fail early) and again per dispatch
    /// (so the state need not keep it).
    pub(super) fn call_request(&self, key: &TaskKey) -> Result<(Value, Option<String>), String> {
        let Some(&idx) = self.wf.graph.index.get(&key.node) else {
            return Err(format!("no node '{}'", key.node));
        };
        match (&self.wf.nodes[idx].kind, key.slot) {
            (NodeKind::Fork { branches, .. }, Slot::Branch(b)) => {
                let branch = branches.get(b as usize).ok_or("no such branch")?;
                resolve_call(&branch.call, &self.node_scope(idx), || {
                    self.implicit_input(idx)
                })
            }
            (NodeKind::Call(call), Slot::Item(i)) => {
                let owner = match self.wf.graph.roles[idx] {
                    NodeRole::Inner { owner } => &self.wf.nodes[owner].id,
                    _ => return Err("a map item of a node that is no map's".into()),
                };
                let map = self.st.nodes.get(owner).and_then(|n| n.detail.as_ref());
                let item = match map {
                    Some(Detail::Map(m)) => m.items.get(i as usize).unwrap_or(&Value::Null),
                    _ => &Value::Null,
                };
                let mut scope = RunScope::new(self.wf, self.st);
                scope.map_item = Some((item, i));
                resolve_call(call, &scope, || item.clone())
            }
            (NodeKind::Call(call), Slot::Iteration(i)) => {
                let mut scope = RunScope::new(self.wf, self.st);
                scope.loop_iteration = Some(i);
                resolve_call(call, &scope, || self.implicit_input(idx))
            }
            (NodeKind::Call(call), _) => {
                resolve_call(call, &self.node_scope(idx), || self.implicit_input(idx))
            }
            _ => Err(format!("node '{}' makes no call", key.node)),
        }
    }
}

/// Resolves a call's input (or its implicit input) and instruction.
fn resolve_call(
    call: &crate::definition::Call,
    scope: &RunScope<'_>,
    implicit: impl FnOnce() -> Value,
) -> Result<(Value, Option<String>), String> {
    let input =
        resolve_input(call.input.as_ref(), scope, implicit).map_err(|e| format!("input: {e}"))?;
    let instruction =
        resolve_text(call.instruction.as_ref(), scope).map_err(|e| format!("instruction: {e}"))?;
    Ok((input, instruction))
}

/// Resolves `input`, or takes the implicit input when there is none.
fn resolve_input(
    template: Option<&Template>,
    scope: &RunScope<'_>,
    implicit: impl FnOnce() -> Value,
) -> Result<Value, workflow_expr::ExprError> {
    match template {
        Some(t) => t.resolve(scope),
        None => Ok(implicit()),
    }
}

/// Resolves a text template (instruction, approval message) to a string.
fn resolve_text(
    template: Option<&Template>,
    scope: &RunScope<'_>,
) -> Result<Option<String>, workflow_expr::ExprError> {
    let Some(t) = template else { return Ok(None) };
    Ok(Some(match t.resolve(scope)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    }))
}

#[cfg(test)]
mod tests;
