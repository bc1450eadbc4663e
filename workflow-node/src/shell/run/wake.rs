//! One timer entry per run: its *wake*, a lower bound of the earliest deadline among the
//! run's pending timers. Decided without I/O, with the commit; the driver writes it.
//!
//! The core's `StartTimer` and `CancelTimer` commands only change the run's record
//! ([`RunRecord::timers`]); the wakes bucket holds one entry per run, written when the
//! run's earliest deadline falls before the wake it holds (or the entry was consumed by
//! its firing), and removed when the run has no timer left (it ended). A dispatch whose
//! deadline is not earlier than the wake writes nothing: a chain of nodes with equal
//! timeouts writes the entry about once per timeout period, not twice per node.
//!
//! When the entry fires, its replica publishes a `TimerFired` carrying the wake
//! ([`Wake`], in the envelope); the run's worker applies `TimerFired` for every pending
//! timer due by then (earliest first; the core still ignores one that is too early), and
//! arms the wake again at the new earliest deadline.
//!
//! Crash safety: the write goes in the commit's outbox entry ([`WakeWrite`]), so a
//! replica that dies after the commit leaves it to be written again by the event's
//! redelivery. Every arming has a key of its own (`wake-{n}`, `n` the commit that armed
//! it), so an old write carried out again never overwrites a newer, earlier wake: at worst
//! it adds a wake that fires for nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::{Command, Millis, TimerId};

/// A timer the run has started and not yet seen fire or cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingTimer {
    /// The timer, as the core names it.
    pub timer: TimerId,
    /// When it is due.
    pub at: Millis,
}

/// One arming of a run's wake entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    /// When it fires: no later than the run's earliest pending deadline when armed.
    pub at: Millis,
    /// The commit that armed it (`RunRecord::applied`): names its key.
    pub n: u64,
}

impl Wake {
    /// The timer part of its key in the wakes bucket.
    pub fn key(&self) -> String {
        format!("wake-{}", self.n)
    }
}

/// The timers-bucket writes a commit promises: arm a new wake (with the timer it was
/// armed for, named in its firing), drop one that is no longer needed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeWrite {
    /// The wake to write, and the earliest timer it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<(Wake, TimerId)>,
    /// The wake to remove (superseded or no longer needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<Wake>,
}

/// Keeps the record's pending timers in step with `commands`.
pub(in crate::shell) fn track(timers: &mut BTreeMap<String, PendingTimer>, commands: &[Command]) {
    for command in commands {
        match command {
            Command::StartTimer { timer, at } => {
                let pending = PendingTimer {
                    timer: timer.clone(),
                    at: *at,
                };
                timers.insert(timer.key(), pending);
            }
            Command::CancelTimer { timer } => {
                timers.remove(&timer.key());
            }
            _ => {}
        }
    }
}

/// Takes out the pending timers due by `cutoff`, earliest first: those a wake fires.
pub(in crate::shell) fn take_due(
    timers: &mut BTreeMap<String, PendingTimer>,
    cutoff: Millis,
) -> Vec<TimerId> {
    let mut due: Vec<(Millis, String)> = timers
        .iter()
        .filter(|(_, p)| p.at <= cutoff)
        .map(|(k, p)| (p.at, k.clone()))
        .collect();
    due.sort();
    due.into_iter()
        .filter_map(|(_, k)| timers.remove(&k).map(|p| p.timer))
        .collect()
}

/// After a commit's events are applied: what becomes of the run's wake (`wake`, for its
/// pending `timers` and the earliest of its calls' liveness checks, `check`; `ended` when
/// the run has ended). `fired` is the wake whose firing the commit applies, if any (its
/// entry is gone once it fired); `n` numbers the commit. Changes `wake` and says what to
/// write, if anything.
pub(in crate::shell) fn rewake(
    timers: &mut BTreeMap<String, PendingTimer>,
    check: Option<Millis>,
    wake: &mut Option<Wake>,
    ended: bool,
    fired: Option<Wake>,
    n: u64,
) -> Option<WakeWrite> {
    if ended {
        // A terminal run absorbs every event: none of its timers can matter.
        timers.clear();
    }
    let check = check.filter(|_| !ended);
    if fired.is_some() && fired == *wake {
        *wake = None;
    }
    let timer = timers
        .values()
        .min_by_key(|p| p.at)
        .map(|p| (p.at, p.timer.clone()));
    // A wake armed for a check names the run's earliest timer all the same (the run's
    // deadline at least): the name only tells a reader of the bucket what it is for.
    let earliest = match (timer, check) {
        (Some((at, t)), Some(c)) if c < at => Some((c, t)),
        (None, Some(c)) => Some((c, TimerId::Deadline)),
        (timer, _) => timer,
    };
    match (earliest, *wake) {
        (None, None) => None,
        (None, Some(old)) => {
            *wake = None;
            Some(WakeWrite {
                arm: None,
                drop: Some(old),
            })
        }
        (Some((at, _)), Some(old)) if old.at <= at => None,
        (Some((at, timer)), old) => {
            let next = Wake { at, n };
            *wake = Some(next);
            Some(WakeWrite {
                arm: Some((next, timer)),
                drop: old,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::run::record::RunRecord;

    /// [`rewake`] on a record's fields, as the plan calls it.
    fn rewake(r: &mut RunRecord, fired: Option<Wake>, n: u64) -> Option<WakeWrite> {
        let ended = r.state.status.is_terminal();
        super::rewake(&mut r.timers, None, &mut r.wake, ended, fired, n)
    }
    use crate::core::{Execution, ExecutionId, RunStatus, Slot, TaskKey};

    fn call(node: &str, attempt: u32) -> TimerId {
        TimerId::CallTimeout {
            task: TaskKey {
                node: node.into(),
                slot: Slot::Single,
            },
            attempt,
        }
    }

    fn start(timer: TimerId, at: u64) -> Command {
        Command::StartTimer {
            timer,
            at: Millis(at),
        }
    }

    fn record() -> RunRecord {
        let state = Execution::new(ExecutionId("e".into()), "W");
        RunRecord::new(state, Default::default())
    }

    #[test]
    fn a_chain_of_equal_timeouts_arms_once_per_period_not_per_node() {
        let mut r = record();
        track(&mut r.timers, &[start(TimerId::Deadline, 100_000)]);
        track(&mut r.timers, &[start(call("a", 1), 1_000)]);
        let first = rewake(&mut r, None, 1).expect("the first deadline arms the wake");
        assert_eq!(first.arm.as_ref().map(|a| a.0.at), Some(Millis(1_000)));
        let mut writes = 0;
        for (i, node) in ["b", "c", "d", "e"].iter().enumerate() {
            let now = 10 * (i as u64 + 1);
            let prev = if i == 0 { "a" } else { ["b", "c", "d"][i - 1] };
            let cmds = [
                Command::CancelTimer {
                    timer: call(prev, 1),
                },
                start(call(node, 1), now + 1_000),
            ];
            track(&mut r.timers, &cmds);
            writes += usize::from(rewake(&mut r, None, 2 + i as u64).is_some());
        }
        assert_eq!(writes, 0, "later deadlines write nothing");
        // The wake fires at 1000: nothing due (e's timeout is at 1040); armed again.
        assert!(take_due(&mut r.timers, Millis(1_000)).is_empty());
        let again = rewake(
            &mut r,
            Some(Wake {
                at: Millis(1_000),
                n: 1,
            }),
            9,
        )
        .unwrap();
        assert_eq!(
            again.arm.as_ref().map(|a| a.0),
            Some(Wake {
                at: Millis(1_040),
                n: 9
            })
        );
        assert_eq!(again.drop, None, "the fired wake's entry is gone already");
    }

    #[test]
    fn an_earlier_deadline_arms_anew_and_drops_the_old_wake() {
        let mut r = record();
        track(&mut r.timers, &[start(TimerId::Deadline, 5_000)]);
        rewake(&mut r, None, 1).unwrap();
        track(&mut r.timers, &[start(call("a", 1), 2_000)]);
        let w = rewake(&mut r, None, 2).unwrap();
        assert_eq!(
            w.arm.map(|a| a.0),
            Some(Wake {
                at: Millis(2_000),
                n: 2
            })
        );
        assert_eq!(
            w.drop,
            Some(Wake {
                at: Millis(5_000),
                n: 1
            })
        );
    }

    #[test]
    fn an_ended_run_drops_its_wake_and_a_stale_firing_keeps_the_current_one() {
        let mut r = record();
        track(&mut r.timers, &[start(TimerId::Deadline, 5_000)]);
        rewake(&mut r, None, 1).unwrap();
        // A firing of another (older) wake leaves the current one armed.
        assert_eq!(
            rewake(
                &mut r,
                Some(Wake {
                    at: Millis(1),
                    n: 0
                }),
                2
            ),
            None
        );
        r.state.status = RunStatus::Success;
        let w = rewake(&mut r, None, 3).unwrap();
        assert_eq!(
            (w.arm, w.drop),
            (
                None,
                Some(Wake {
                    at: Millis(5_000),
                    n: 1
                })
            )
        );
        assert!(r.timers.is_empty() && r.wake.is_none());
    }

    #[test]
    fn due_timers_come_out_earliest_first_and_the_rest_stay() {
        let mut timers = BTreeMap::new();
        track(
            &mut timers,
            &[
                start(call("late", 1), 30),
                start(call("early", 1), 10),
                start(TimerId::Deadline, 99),
            ],
        );
        assert_eq!(
            take_due(&mut timers, Millis(30)),
            [call("early", 1), call("late", 1)]
        );
        assert_eq!(timers.len(), 1);
    }
}
