//! A schedule's state and what one look at it decides, sans I/O. Every replica looks at
//! every schedule of the workflows it serves; what each look decides goes into the
//! schedule's entry by compare-and-swap *before* it is carried out (the entry's
//! `pending`), so a replica killed between the two leaves the work in the entry for the
//! next look, by any replica. What is carried out is idempotent: a slot's run has an id
//! derived from the schedule and the slot ([`slot_task`]), so a start made twice is one run.
//!
//! The table (for a slot due, not paused, within the catch-up window):
//!
//! | previous run | skip | buffer_one | allow_all | cancel_other |
//! |---|---|---|---|---|
//! | none or ended | start | start | start | start |
//! | still going | count it skipped | keep the slot (a kept one is dropped) | start | cancel it, keep the slot |
//!
//! A kept slot starts once the previous run has ended. Slots come in turn, one per look:
//! one older than the catch-up window is counted missed and starts nothing. A trigger by
//! hand starts at once.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::definition::{Overlap, Schedule};

/// What a schedule's entry in the schedules bucket holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// The last slot dealt with (started, skipped, kept or missed), Unix milliseconds; set
    /// to the time the entry was made, so a new schedule does not start the past.
    pub last_slot: u64,
    /// The execution id of the schedule's last run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// A slot kept until `running` ends (`buffer_one`, `cancel_other`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<u64>,
    /// Whether slots start nothing (a trigger by hand still starts).
    #[serde(default)]
    pub paused: bool,
    /// Why it was paused or resumed, as the operator said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Decided and committed, not yet known to be carried out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Action>,
    /// How many runs it started, slots it skipped, kept slots it dropped, slots it missed.
    #[serde(default)]
    pub counts: Counts,
    /// Why the last start failed (the input did not match the schema, say), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// A schedule added with `schedules add` (not from the workflow file): as it was sent,
    /// and the operator key that added it (its runs' signer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<Added>,
    /// A schedule the workflow file declares: as the file writes it (kept current by the
    /// replicas, for `schedules list` and the web view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<Value>,
}

impl ScheduleState {
    /// The schedule's fields as written: added, or declared in the file.
    pub fn spec(&self) -> Option<&Value> {
        self.added
            .as_ref()
            .map(|a| &a.spec)
            .or(self.declared.as_ref())
    }
}

/// A schedule added by an operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Added {
    /// The schedule's fields, as a file would write them.
    pub spec: Value,
    /// The operator key that signed the request adding it, if it was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A schedule's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Runs started.
    pub started: u64,
    /// Slots that started nothing because the previous run still went (`skip`).
    pub skipped: u64,
    /// Kept slots replaced by a later one (`buffer_one`, `cancel_other`).
    pub dropped: u64,
    /// Slots older than the catch-up window when a replica looked.
    pub missed: u64,
}

/// Work a look decided, carried out after it is committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum Action {
    /// Start the run of `slot` (by hand when `manual`).
    Start {
        /// The slot, Unix milliseconds (for a trigger by hand, when it was asked).
        slot: u64,
        /// Whether it is a trigger by hand (its task id says so).
        manual: bool,
    },
    /// Cancel the run `execution` (`cancel_other`).
    Cancel {
        /// Its execution id.
        execution: String,
    },
}

/// The task id of a slot's run, under the caller name [`caller_name`]: the slot's time
/// (RFC 3339, UTC, to the second), with `manual-` before it for a trigger by hand.
pub fn slot_task(slot: u64, manual: bool) -> String {
    let time = crate::definition::slot_time(slot);
    if manual {
        format!("manual-{time}-{}", slot % 1000)
    } else {
        time
    }
}

/// The caller name of a schedule's runs (shown by `runs list`): `schedule:{name}`.
pub fn caller_name(schedule: &str) -> String {
    format!("schedule:{schedule}")
}

/// What one look at `schedule` at `now` (Unix milliseconds, the servers' clock) decides,
/// given whether its last run still goes: the new state, or `None` when nothing changes.
/// Pending work is never decided over: the caller carries it out and clears it first.
pub fn look(
    schedule: &Schedule,
    state: &ScheduleState,
    now: u64,
    previous_running: bool,
) -> Option<ScheduleState> {
    if !state.pending.is_empty() {
        return None;
    }
    let mut next = state.clone();
    if let Some(kept) = state.kept.filter(|_| !previous_running) {
        next.kept = None;
        next.pending.push(Action::Start {
            slot: kept,
            manual: false,
        });
        return Some(next);
    }
    if state.paused {
        return None;
    }
    let due = schedule.first_due(state.last_slot, now, schedule.catchup_window)?;
    let slot = due.slot;
    if due.in_window && slot + schedule.jitter_of(slot) > now {
        return None; // not yet: its jitter puts it later
    }
    next.last_slot = slot;
    next.counts.missed += due.missed;
    if !due.in_window {
        return Some(next);
    }
    let start = Action::Start {
        slot,
        manual: false,
    };
    match (previous_running, schedule.overlap) {
        (false, _) | (true, Overlap::AllowAll) => next.pending.push(start),
        (true, Overlap::Skip) => next.counts.skipped += 1,
        (true, Overlap::BufferOne) | (true, Overlap::CancelOther) => {
            if next.kept.replace(slot).is_some() {
                next.counts.dropped += 1;
            }
            if schedule.overlap == Overlap::CancelOther {
                if let Some(execution) = &state.running {
                    next.pending.push(Action::Cancel {
                        execution: execution.clone(),
                    });
                }
            }
        }
    }
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(overlap: &str) -> Schedule {
        let wf = crate::definition::parse_str(
            &format!(
                "name: S\nworkflow:\n  description: d\n  schedules:\n    - {{name: tick, every: 10s, overlap: {overlap}, catchup_window: 30s}}\n  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
            ),
            "s.yaml",
        )
        .unwrap();
        wf.schedules[0].clone()
    }

    fn state(last_slot: u64) -> ScheduleState {
        ScheduleState {
            last_slot,
            running: Some("e0".into()),
            ..ScheduleState::default()
        }
    }

    /// Serialised and read back between looks, as a replica reading the entry would.
    fn again(s: ScheduleState) -> ScheduleState {
        serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap()
    }

    #[test]
    fn a_due_slot_starts_once_and_then_nothing_is_due() {
        let s = schedule("skip");
        assert_eq!(look(&s, &state(10_000), 15_000, false), None);
        let next = again(look(&s, &state(10_000), 21_000, false).unwrap());
        assert_eq!(next.last_slot, 20_000);
        let start = Action::Start {
            slot: 20_000,
            manual: false,
        };
        assert_eq!(next.pending, vec![start]);
        // Pending work is carried out before anything else is decided.
        assert_eq!(look(&s, &next, 40_000, false), None);
        let done = ScheduleState {
            pending: vec![],
            ..next
        };
        assert_eq!(look(&s, &done, 29_999, false), None);
    }

    #[test]
    fn each_overlap_policy_does_what_its_table_row_says() {
        let skip = look(&schedule("skip"), &state(10_000), 20_000, true).unwrap();
        assert!(skip.pending.is_empty());
        assert_eq!(skip.counts.skipped, 1);
        let all = look(&schedule("allow_all"), &state(10_000), 20_000, true).unwrap();
        assert_eq!(all.pending.len(), 1);
        let buffer = schedule("buffer_one");
        let kept = again(look(&buffer, &state(10_000), 20_000, true).unwrap());
        assert_eq!((kept.kept, kept.pending.len()), (Some(20_000), 0));
        let dropped = look(&buffer, &kept, 30_000, true).unwrap();
        assert_eq!((dropped.kept, dropped.counts.dropped), (Some(30_000), 1));
        let started = look(&buffer, &dropped, 31_000, false).unwrap();
        let start = Action::Start {
            slot: 30_000,
            manual: false,
        };
        assert_eq!((started.kept, started.pending), (None, vec![start]));
        let cancel = look(&schedule("cancel_other"), &state(10_000), 20_000, true).unwrap();
        let action = Action::Cancel {
            execution: "e0".into(),
        };
        assert_eq!((cancel.kept, cancel.pending), (Some(20_000), vec![action]));
    }

    #[test]
    fn a_slot_older_than_the_catch_up_window_is_missed_and_a_paused_one_waits() {
        let s = Schedule {
            when: crate::definition::When::Every(std::time::Duration::from_secs(100)),
            ..schedule("skip")
        };
        // Down from 90 s to 140 s: the 100 s slot is 40 s old, past the 30 s window.
        let missed = look(&s, &state(0), 140_000, false).unwrap();
        assert_eq!(missed.last_slot, 100_000);
        assert_eq!((missed.counts.missed, missed.pending.len()), (1, 0));
        // Back at 120 s: 20 s old, within it.
        let late = look(&s, &state(0), 120_000, false).unwrap();
        assert_eq!((late.counts.missed, late.pending.len()), (0, 1));
        let paused = ScheduleState {
            paused: true,
            ..state(0)
        };
        assert_eq!(look(&s, &paused, 120_000, false), None);
        assert_eq!(slot_task(90_000, false), "1970-01-01T00:01:30Z");
        assert_eq!(slot_task(90_123, true), "manual-1970-01-01T00:01:30Z-123");
    }
}
