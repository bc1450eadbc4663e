//! What a run waits for, as every face shows it: read from what its state already keeps
//! (the approvals asked, each call's phase, a pause, the run's deadline), nothing
//! stored for it. A run that has ended waits for nothing.
//!
//! Each wait is `{"kind", "node"?, "until"?, "detail"}`: `approval` (a decision, by whom),
//! `retry` (a backoff timer, until the next attempt), `reply` (an agent's answer, until
//! the attempt times out), `agent_slot` (a slot of the call's agent, whose `max_in_flight`
//! or `rate` is reached: its timeout waits too), `slot` (a concurrency slot: queued), `resume` (the run is
//! paused) and `deadline` (the run's own, when it has one).

use serde_json::{json, Value};

use crate::core::{AgentSlot, CallPhase};
use crate::shell::FoundRun;

use super::view::rfc3339;

/// The waits of `run`, in the order above.
pub fn of(run: &FoundRun) -> Vec<Value> {
    let r = &run.record;
    let s = &r.state;
    if s.status.is_terminal() {
        return Vec::new();
    }
    let mut waits = Vec::new();
    for (node, ask) in &r.asks {
        let by = if ask.approvers.is_empty() {
            "anyone".to_string()
        } else {
            ask.approvers.join(", ")
        };
        waits.push(json!({
            "kind": "approval", "node": node, "until": rfc3339(ask.deadline),
            "detail": format!("a decision by {by}"),
        }));
    }
    for (key, call) in &s.calls {
        let (kind, until, detail) = match call.phase {
            CallPhase::BackingOff { until } => (
                "retry",
                Some(until),
                format!("attempt {} after a backoff", call.attempt + 1),
            ),
            CallPhase::Running { .. } if call.agent_slot == AgentSlot::Waiting => (
                "agent_slot",
                None,
                format!(
                    "a slot of its agent (its max_in_flight or rate reached) for attempt {}",
                    call.attempt
                ),
            ),
            CallPhase::Running { deadline } => (
                "reply",
                Some(deadline),
                format!("the answer to attempt {}", call.attempt),
            ),
            CallPhase::Queued => ("slot", None, "a concurrency slot".to_string()),
        };
        waits.push(json!({
            "kind": kind, "node": key.node, "until": until.and_then(|u| rfc3339(Some(u))),
            "detail": detail,
        }));
    }
    if let Some(paused) = s.paused.as_ref().filter(|_| s.is_paused()) {
        let why = paused.reason.as_deref().unwrap_or("no reason given");
        waits.push(json!({
            "kind": "resume", "until": null,
            "detail": format!("a resume (paused since {}: {why})", rfc3339(Some(paused.since)).unwrap_or_default()),
        }));
    }
    if s.deadline.0 > 0 {
        waits.push(json!({
            "kind": "deadline", "until": rfc3339(Some(s.deadline)),
            "detail": "the run's deadline",
        }));
    }
    waits
}
