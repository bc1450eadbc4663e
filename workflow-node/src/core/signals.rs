//! The `wait` node and the signals it takes.
//!
//! | event / moment                | effect                                                  |
//! |-------------------------------|---------------------------------------------------------|
//! | wait node starts              | resolve its key; take a kept signal, or wait (+ timer)  |
//! | `SignalReceived`, node waits  | it ends with the payload (schema and signer hold)       |
//! | `SignalReceived`, none waits  | kept with the run, when a wait node may still take it   |
//! | `TimerFired(WaitTimeout)`     | the waiting node ends `timed_out` (kind `timeout`)      |
//! | `ResumeRequested`             | waiting nodes take what was kept during the pause       |
//!
//! A signal is taken once: its id is remembered (see [`Signals`]), so a delivery applied
//! twice, or sent twice with the same id, changes nothing the second time. The shell has
//! already refused a payload that breaks the schema and a sender who may not send it; the
//! core checks both again, since a stream's events are its only input, and drops what
//! fails. At most [`MAX_KEPT_SIGNALS`] are kept, each at most [`MAX_KEPT_SIGNAL_BYTES`];
//! the shell tells the sender of one more, or of one larger.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::engine::Cx;
use super::state::{Detail, WaitState};
use super::types::{Command, Millis, NodeStatus, TimerId};
use crate::definition::{NodeKind, WaitNode};

/// How many signals a run keeps for wait nodes that do not wait yet.
pub const MAX_KEPT_SIGNALS: usize = 16;

/// The largest payload a run keeps for a wait node that does not wait yet (its JSON
/// bytes): kept signals live in the run's record, which must stay small.
pub const MAX_KEPT_SIGNAL_BYTES: usize = 64 * 1024;

/// Whether a run may keep `data` for a node that does not wait yet.
pub fn keepable(data: &Value) -> bool {
    serde_json::to_vec(data).is_ok_and(|b| b.len() <= MAX_KEPT_SIGNAL_BYTES)
}

/// A signal sent to a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Its name; the wait nodes with this `signal` take it.
    pub name: String,
    /// Its id: the sender's, or one the node made; a second signal with an id already
    /// taken changes nothing.
    pub id: String,
    /// The payload, the waiting node's output `data`.
    pub data: Value,
    /// Who sent it (a signer's name or key) when the node checked a signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When it was applied to the run (set by the core).
    pub at: Millis,
}

/// The signals of a run: those kept for a wait node that does not wait yet, and the ids of
/// every signal taken (kept or delivered).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Signals {
    /// Kept, oldest first, at most [`MAX_KEPT_SIGNALS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<Signal>,
    /// The ids taken: at most the kept bound plus one per wait node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taken: Vec<String>,
}

impl Signals {
    /// Whether there is nothing to keep in the record.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.taken.is_empty()
    }
}

/// Why a wait node does not take a payload: the schema's violations.
pub fn refused_payload(def: &WaitNode, data: &Value) -> Option<String> {
    let violations = def.schema.as_ref()?.violations_as_is(data);
    (!violations.is_empty()).then(|| {
        format!(
            "the payload of signal '{}' does not match its schema: {}",
            def.signal,
            violations.join("; ")
        )
    })
}

impl Cx<'_> {
    /// A wait node starts: resolve its key, take a kept signal if one fits, else wait.
    pub(super) fn start_wait(&mut self, idx: usize, def: &WaitNode) {
        let key = match &def.correlation {
            None => None,
            Some(t) => match t.resolve(&self.node_scope(idx)) {
                Ok(Value::String(s)) => Some(s),
                Ok(v @ (Value::Number(_) | Value::Bool(_))) => Some(v.to_string()),
                Ok(other) => {
                    let kind = workflow_expr::type_name(&other);
                    let msg = format!("correlation: resolved to {kind}, expected a string");
                    return self.finish_node(idx, NodeStatus::Failure, None, Some(msg));
                }
                Err(e) => {
                    let msg = format!("correlation: {e}");
                    return self.finish_node(idx, NodeStatus::Failure, None, Some(msg));
                }
            },
        };
        let node_id = self.wf.nodes[idx].id.clone();
        let deadline = def.timeout.map(|t| self.now.plus(t));
        if let Some(n) = self.st.nodes.get_mut(&node_id) {
            n.status = NodeStatus::Waiting;
            n.detail = Some(Detail::Wait(WaitState {
                signal: def.signal.clone(),
                key,
                since: self.now,
                deadline,
            }));
        }
        if let Some(at) = deadline {
            let timer = TimerId::WaitTimeout { node: node_id };
            self.out.push(Command::StartTimer { timer, at });
        }
        self.take_kept(idx, def);
    }

    /// A signal arrived: the waiting node takes it, or the run keeps it.
    pub(super) fn signal_received(&mut self, mut signal: Signal) {
        if self.st.signals.taken.contains(&signal.id) {
            return;
        }
        signal.at = self.now;
        if !self.paused() {
            if let Some(idx) = self.waiting_for(&signal) {
                return self.deliver(idx, signal);
            }
        }
        let kept = &self.st.signals.kept;
        if kept.len() < MAX_KEPT_SIGNALS && keepable(&signal.data) && self.may_wait_for(&signal) {
            self.st.signals.taken.push(signal.id.clone());
            self.st.signals.kept.push(signal);
        }
    }

    /// After a resume: every waiting node takes what was kept for it meanwhile.
    pub(super) fn take_kept_after_pause(&mut self) {
        for idx in 0..self.wf.nodes.len() {
            if let NodeKind::Wait(def) = &self.wf.nodes[idx].kind {
                if self.st.node_status(&self.wf.nodes[idx].id) == NodeStatus::Waiting {
                    self.take_kept(idx, def);
                }
            }
        }
    }

    /// A wait node's timeout passed: it ends `timed_out`.
    pub(super) fn wait_timed_out(&mut self, node: &str) {
        let Some(&idx) = self.wf.graph.index.get(node) else {
            return;
        };
        let NodeKind::Wait(def) = &self.wf.nodes[idx].kind else {
            return;
        };
        if self.st.node_status(node) != NodeStatus::Waiting {
            return;
        }
        if let Some(n) = self.st.nodes.get_mut(node) {
            n.error_kind = Some(super::Failure::TIMEOUT.into());
        }
        let secs = def.timeout.map_or(0.0, |t| t.as_secs_f64());
        let why = format!("no signal '{}' within {secs} s", def.signal);
        self.finish_node(idx, NodeStatus::TimedOut, None, Some(why));
    }

    /// When a wait node's timeout is due, by the record.
    pub(super) fn wait_due(&self, node: &str) -> Option<Millis> {
        match &self.st.nodes.get(node)?.detail {
            Some(Detail::Wait(w)) => w.deadline,
            _ => None,
        }
    }

    /// Takes the oldest kept signal that fits the waiting node `idx`, if the run is not
    /// paused.
    fn take_kept(&mut self, idx: usize, def: &WaitNode) {
        if self.paused() {
            return;
        }
        let found = self
            .st
            .signals
            .kept
            .iter()
            .position(|s| s.name == def.signal && fits(def, s));
        if let Some(at) = found {
            let signal = self.st.signals.kept.remove(at);
            self.end_wait(idx, def, signal);
        }
    }

    /// The waiting node this signal is for, if one waits for it and takes it.
    fn waiting_for(&self, signal: &Signal) -> Option<usize> {
        self.wf.nodes.iter().enumerate().find_map(|(idx, node)| {
            let NodeKind::Wait(def) = &node.kind else {
                return None;
            };
            let waiting = self.st.node_status(&node.id) == NodeStatus::Waiting;
            (waiting && def.signal == signal.name && fits(def, signal)).then_some(idx)
        })
    }

    /// Whether a wait node that would take `signal` may still come to: the run goes on
    /// and such a node has not started (or waits while the run is paused).
    fn may_wait_for(&self, signal: &Signal) -> bool {
        if self.st.stopping || self.st.status.is_terminal() {
            return false;
        }
        self.wf.nodes.iter().any(|node| {
            let NodeKind::Wait(def) = &node.kind else {
                return false;
            };
            let later = match self.st.node_status(&node.id) {
                NodeStatus::Pending => true,
                NodeStatus::Waiting => self.paused(),
                _ => false,
            };
            later && def.signal == signal.name && fits(def, signal)
        })
    }

    fn deliver(&mut self, idx: usize, signal: Signal) {
        let NodeKind::Wait(def) = &self.wf.nodes[idx].kind else {
            return;
        };
        self.st.signals.taken.push(signal.id.clone());
        self.end_wait(idx, def, signal);
    }

    /// Ends the waiting node `idx` with `signal`, its timer cancelled.
    fn end_wait(&mut self, idx: usize, def: &WaitNode, signal: Signal) {
        let node = self.wf.nodes[idx].id.clone();
        if def.timeout.is_some() {
            let timer = TimerId::WaitTimeout { node };
            self.out.push(Command::CancelTimer { timer });
        }
        let output = json!({
            "signal": signal.name,
            "data": signal.data,
            "by": signal.by,
            "signal_id": signal.id,
            "received_at": signal.at.rfc3339(),
        });
        self.finish_node(idx, NodeStatus::Success, Some(output), None);
    }
}

/// Whether `def` takes `signal`: its payload matches the schema, its sender is a signer.
fn fits(def: &WaitNode, signal: &Signal) -> bool {
    let signer_ok = def.signers.is_empty()
        || signal
            .by
            .as_ref()
            .is_some_and(|by| def.signers.contains(by));
    signer_ok && refused_payload(def, &signal.data).is_none()
}

#[cfg(test)]
mod tests;
