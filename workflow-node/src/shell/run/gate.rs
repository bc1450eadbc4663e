//! An agent's gate, sans I/O: which calls hold its slots, which wait and in what order,
//! and when its last calls started, so that its `max_in_flight` and `rate` hold across
//! every run, replica and workflow of the mesh (see `definition::AgentLimits`).
//!
//! One KV entry per limited agent (`{ns}_wf_agent_gates`, key: the agent's name) holds a
//! [`Gate`]; every change is a compare-and-swap of the whole entry (`worker::slots`), so
//! two replicas never hand out the same slot. What each operation decides is here:
//!
//! | operation            | decides                                                        |
//! |----------------------|----------------------------------------------------------------|
//! | [`Gate::admit`]      | a call to send: holder already (a copy) → send; first in line or no line, room → holds, send; else waits at the back |
//! | [`Gate::release`]    | a call ended: it leaves holders and waiters; the first waiters take the room freed, granted by it |
//! | [`Gate::fill`]       | room freed by time (the rate's window, an expired holder): the first waiters take it |
//!
//! A holder whose run vanished (its definition removed, its stream purged) cannot release:
//! each holder carries an expiry, its call's own deadline plus [`EXPIRY_GRACE`] (the core
//! fails an attempt at its deadline, and that failure releases), and an expired holder is
//! dropped by the next operation. Grants are published as events after the entry is
//! written; one lost with its replica is published again when the release is carried
//! out again (the holders it granted name it), and the waiting run's liveness check
//! (`check`) admits a first-in-line waiter when room exists, whoever granted nothing.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::{self, CallPhase, Command, Execution, ExecutionId, Millis, TaskKey};
use crate::definition::{AgentLimits, Workflow};

/// How long past its call's deadline a holder keeps its slot without a release.
pub const EXPIRY_GRACE: Duration = Duration::from_secs(60);

/// The most waiters one gate keeps (its entry must stay well under a message's size); a
/// call beyond them is not sent and not recorded, and asks again at its next liveness
/// check.
pub const MAX_WAITERS: usize = 4_000;

/// One agent's entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// The calls sent and not yet ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// The calls not sent, first come first.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub waiters: VecDeque<Holder>,
    /// When the latest calls were let through, oldest first (the rate's window).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub sent: VecDeque<Millis>,
}

/// A call in a gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    /// Its sub-task id: who it is.
    pub id: String,
    /// Its run's workflow.
    pub workflow: String,
    /// Its run.
    pub execution: ExecutionId,
    /// Its call.
    pub task: TaskKey,
    /// Its attempt.
    pub attempt: u32,
    /// How long its attempt may run once sent (its timeout).
    pub span_ms: u64,
    /// When a holder's slot lapses without a release.
    pub expires: Millis,
    /// The call whose release handed it the slot (or `fill` for time freeing it): that
    /// release, carried out again, publishes its grant again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_by: Option<String>,
    /// When a grant counted it in the rate's window, until its run sends it: the send
    /// moves it to the send's time, so a grant's delay never packs sends closer than the
    /// rate allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_at: Option<Millis>,
}

/// What [`Gate::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Send the call; `changed` when the entry must be written first.
    Send {
        /// Whether the gate changed.
        changed: bool,
    },
    /// Do not send: it waits (recorded when `changed`, already before otherwise, not at
    /// all past [`MAX_WAITERS`]).
    Wait {
        /// Whether the gate changed.
        changed: bool,
    },
}

/// Who granted the waiters that time let through.
pub const FILL: &str = "fill";

impl Gate {
    /// Drops holders past their expiry and sends older than the rate's window.
    fn tidy(&mut self, limits: &AgentLimits, now: Millis) -> bool {
        let before = (self.holders.len(), self.sent.len());
        self.holders.retain(|h| h.expires > now);
        match limits.rate {
            Some(rate) => {
                while self.sent.front().is_some_and(|t| t.plus(rate.per) <= now) {
                    self.sent.pop_front();
                }
            }
            None => self.sent.clear(),
        }
        before != (self.holders.len(), self.sent.len())
    }

    /// Whether one more call may start now.
    fn room(&self, limits: &AgentLimits) -> bool {
        let cap = limits
            .max_in_flight
            .is_none_or(|n| self.holders.len() < n as usize);
        let rate = limits
            .rate
            .is_none_or(|r| self.sent.len() < r.calls as usize);
        cap && rate
    }

    fn hold(&mut self, mut h: Holder, limits: &AgentLimits, now: Millis) {
        h.expires = now
            .plus(Duration::from_millis(h.span_ms))
            .plus(EXPIRY_GRACE);
        self.holders.push(h);
        if limits.rate.is_some() {
            self.sent.push_back(now);
        }
    }

    /// A call about to be sent (`call`, its `expires` unset): whether to send it.
    pub fn admit(&mut self, call: Holder, limits: &AgentLimits, now: Millis) -> Admit {
        let tidied = self.tidy(limits, now);
        if let Some(h) = self.holders.iter_mut().find(|h| h.id == call.id) {
            // A copy (the liveness check, a replay) or the call a grant let through.
            let expires = now
                .plus(Duration::from_millis(call.span_ms))
                .plus(EXPIRY_GRACE);
            let mut changed = tidied || h.expires < expires;
            h.expires = h.expires.max(expires);
            if let Some(at) = h.granted_at.take() {
                changed = true;
                if let Some(i) = self.sent.iter().position(|t| *t == at) {
                    self.sent.remove(i);
                    let j = self.sent.partition_point(|t| *t <= now);
                    self.sent.insert(j, now);
                }
            }
            return Admit::Send { changed };
        }
        let position = self.waiters.iter().position(|w| w.id == call.id);
        let first = matches!(position, Some(0)) || (position.is_none() && self.waiters.is_empty());
        if first && self.room(limits) {
            if position.is_some() {
                self.waiters.pop_front();
            }
            self.hold(call, limits, now);
            return Admit::Send { changed: true };
        }
        if position.is_some() {
            return Admit::Wait { changed: tidied };
        }
        if self.waiters.len() >= MAX_WAITERS {
            return Admit::Wait { changed: tidied };
        }
        self.waiters.push_back(call);
        Admit::Wait { changed: true }
    }

    /// The call `id` ended (or was never sent): it leaves the gate, and the waiters first
    /// in line take the room it freed. Whether the gate changed.
    pub fn release(&mut self, id: &str, limits: &AgentLimits, now: Millis) -> bool {
        let tidied = self.tidy(limits, now);
        let before = (self.holders.len(), self.waiters.len());
        self.holders.retain(|h| h.id != id);
        self.waiters.retain(|w| w.id != id);
        let left = before != (self.holders.len(), self.waiters.len());
        let granted = self.grant(id, limits, now);
        tidied || left || granted
    }

    /// Lets the first waiters through while there is room (time freed it), granted by
    /// [`FILL`]. Whether the gate changed.
    pub fn fill(&mut self, limits: &AgentLimits, now: Millis) -> bool {
        let tidied = self.tidy(limits, now);
        self.grant(FILL, limits, now) || tidied
    }

    fn grant(&mut self, by: &str, limits: &AgentLimits, now: Millis) -> bool {
        let mut any = false;
        while !self.waiters.is_empty() && self.room(limits) {
            let Some(mut w) = self.waiters.pop_front() else {
                break;
            };
            w.granted_by = Some(by.to_string());
            w.granted_at = Some(now);
            self.hold(w, limits, now);
            any = true;
        }
        any
    }

    /// The holders granted by `by`: their runs are told.
    pub fn granted_by<'a>(&'a self, by: &'a str) -> impl Iterator<Item = &'a Holder> + 'a {
        self.holders
            .iter()
            .filter(move |h| h.granted_by.as_deref() == Some(by))
    }

    /// When the rate's window next lets a call through, if waiters wait for it.
    pub fn next_opening(&self, limits: &AgentLimits) -> Option<Millis> {
        let rate = limits.rate?;
        if self.waiters.is_empty() || self.sent.len() < rate.calls as usize {
            return None;
        }
        self.sent.front().map(|t| t.plus(rate.per))
    }
}

/// A call to a limited agent that was running when an event came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatedCall {
    task: TaskKey,
    attempt: u32,
    agent: String,
}

/// The calls of `state` running (sent or waiting) to agents `limited` says are limited
/// (none when no agent is).
pub fn gated_calls(
    workflow: &Workflow,
    state: &Execution,
    limited: Option<&dyn Fn(&str) -> bool>,
) -> Vec<GatedCall> {
    let Some(limited) = limited else {
        return Vec::new();
    };
    state
        .calls
        .iter()
        .filter(|(_, c)| matches!(c.phase, CallPhase::Running { .. }))
        .filter_map(|(task, c)| {
            let agent = core::call_of(workflow, task)?.target.agent_name();
            limited(agent).then(|| GatedCall {
                task: task.clone(),
                attempt: c.attempt,
                agent: agent.to_string(),
            })
        })
        .collect()
}

/// A [`Command::ReleaseSlot`] for each call of `before` whose attempt no longer runs in
/// `state` (answered, failed, timed out, cancelled, its run ended): committed with the
/// event that ended it, so the slot is given back even if this replica dies.
pub fn releases(before: Vec<GatedCall>, state: &Execution) -> Vec<Command> {
    before
        .into_iter()
        .filter(|g| {
            !state.calls.get(&g.task).is_some_and(|c| {
                c.attempt == g.attempt && matches!(c.phase, CallPhase::Running { .. })
            })
        })
        .map(|g| Command::ReleaseSlot {
            sub_task_id: g.task.sub_task_id(&state.id, g.attempt),
            agent: g.agent,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::Rate;

    fn call(n: u32) -> Holder {
        Holder {
            id: format!("c{n}"),
            workflow: "W".into(),
            execution: ExecutionId("e".into()),
            task: TaskKey::single("a"),
            attempt: 1,
            span_ms: 10_000,
            expires: Millis(0),
            granted_by: None,
            granted_at: None,
        }
    }

    fn cap(n: u32) -> AgentLimits {
        AgentLimits {
            max_in_flight: Some(n),
            rate: None,
        }
    }

    #[test]
    fn the_cap_holds_and_a_release_hands_the_slot_to_the_first_waiter() {
        let mut g = Gate::default();
        let l = cap(2);
        let now = Millis(1_000);
        assert_eq!(g.admit(call(1), &l, now), Admit::Send { changed: true });
        assert_eq!(g.admit(call(2), &l, now), Admit::Send { changed: true });
        assert_eq!(g.admit(call(3), &l, now), Admit::Wait { changed: true });
        assert_eq!(g.admit(call(4), &l, now), Admit::Wait { changed: true });
        // A copy of a waiting call stays waiting; of a holder is sent again.
        assert_eq!(g.admit(call(3), &l, now), Admit::Wait { changed: false });
        assert!(matches!(g.admit(call(1), &l, now), Admit::Send { .. }));
        assert!(g.release("c1", &l, now));
        let granted: Vec<&str> = g.granted_by("c1").map(|h| h.id.as_str()).collect();
        assert_eq!(granted, ["c3"]);
        // Released twice (a replay): nothing more changes, the grant is still named.
        assert!(!g.release("c1", &l, now));
        assert_eq!(g.granted_by("c1").count(), 1);
        assert_eq!(g.holders.len(), 2);
        // The granted call, dispatched, is sent.
        assert!(matches!(g.admit(call(3), &l, now), Admit::Send { .. }));
        // A waiter that ends (its run cancelled) leaves the line.
        assert!(g.release("c4", &l, now));
        assert!(g.waiters.is_empty());
    }

    #[test]
    fn a_holder_past_its_expiry_gives_its_slot_up() {
        let mut g = Gate::default();
        let l = cap(1);
        assert!(matches!(
            g.admit(call(1), &l, Millis(0)),
            Admit::Send { .. }
        ));
        assert!(matches!(
            g.admit(call(2), &l, Millis(1)),
            Admit::Wait { .. }
        ));
        let later = Millis(10_000).plus(EXPIRY_GRACE);
        assert!(g.fill(&l, later));
        assert_eq!(g.holders.len(), 1);
        assert_eq!(g.holders[0].id, "c2");
    }

    #[test]
    fn the_rate_spaces_calls_out() {
        let mut g = Gate::default();
        let l = AgentLimits {
            max_in_flight: None,
            rate: Some(Rate {
                calls: 2,
                per: Duration::from_secs(1),
            }),
        };
        assert!(matches!(
            g.admit(call(1), &l, Millis(0)),
            Admit::Send { .. }
        ));
        assert!(matches!(
            g.admit(call(2), &l, Millis(10)),
            Admit::Send { .. }
        ));
        assert!(matches!(
            g.admit(call(3), &l, Millis(20)),
            Admit::Wait { .. }
        ));
        g.release("c1", &l, Millis(30));
        g.release("c2", &l, Millis(40));
        assert_eq!(g.waiters.len(), 1, "the window is still full");
        assert_eq!(g.next_opening(&l), Some(Millis(1_000)));
        assert!(!g.fill(&l, Millis(999)));
        assert!(g.fill(&l, Millis(1_000)));
        assert_eq!(g.granted_by(FILL).count(), 1);
        // Sent 300 ms after its grant: the window counts it from the send.
        assert!(matches!(
            g.admit(call(3), &l, Millis(1_300)),
            Admit::Send { changed: true }
        ));
        assert_eq!(g.sent, [Millis(1_300)]);
    }
}
