//! Run history: every event that changed a run, with when and by which replica, kept for
//! the retention in a limits-based stream of its own (`{ns}_wf_history`, subjects
//! `{ns}.wf.{workflow}.history.{execution}`). The event stream is a work queue and forgets
//! what it delivered; this one remembers, for `workflow-node runs history`.
//!
//! An entry is made by `plan` with the commit that applies its event, numbered by the run's
//! count of commits (`RunRecord::applied`), which the compare-and-swap makes a total order,
//! and held in the run's record (`RunRecord::history_held`), so it is as durable as the
//! commit. Once [`HELD_MAX`] entries are held, or the run has ended, the commit that holds
//! the last one takes them all out of the record and into its outbox entry, and they go
//! the way of the event's other commands: published (by `store::history`) after the commit holds, as **one**
//! message (a JSON array; a single entry is published as an object, as before), and
//! published again when a redelivered event replays its outbox entry. The message id is
//! `history.{execution}.{first}-{last}` (`.{n}` for one entry): the stream keeps one copy of
//! a replay within its duplicate window, and readers drop a later copy by number. Readers
//! ([`crate::shell::store::inspect::Inspector::history`]) add the entries still held in the
//! record. So an entry is never lost and never shown twice, and a run's history costs one
//! write per 16 events instead of one per event.

use serde::{Deserialize, Serialize};

use crate::core::{Event, Millis, RunStatus, Slot};
use crate::shell::run::envelope::Envelope;

/// History entries a run's record holds before they are published together.
pub const HELD_MAX: usize = 16;

/// The longest detail an entry keeps (an agent's error message may be long).
const DETAIL_MAX: usize = 300;

/// One event applied to a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Its place in the run's history (1 for the first event that changed the run).
    pub n: u64,
    /// When it was applied (the applying replica's clock).
    pub at: Millis,
    /// The replica that applied it (`Config::replica`).
    pub replica: String,
    /// The event's kind: `started`, `caller_joined`, `call_succeeded`, `call_failed`,
    /// `timer_fired`, `cancel_requested`, `approval_decided`, `abandoned`.
    pub event: String,
    /// The node it concerns, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Which call of the node: `item 3`, `branch 0`, `iteration 2` (none for a node's
    /// single call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// The call's attempt, for a call's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// What else matters: an error, a timer, a reason, a decision and its comment, the
    /// size of an input or output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The run's status once the event was applied.
    pub status: RunStatus,
}

/// The history entry of `envelope`, the `n`th event to change its run, applied at `now`
/// by `replica`, leaving the run `status`.
pub(in crate::shell) fn entry(
    envelope: &Envelope,
    n: u64,
    now: Millis,
    replica: &str,
    status: RunStatus,
) -> HistoryEntry {
    let mut e = HistoryEntry {
        n,
        at: now,
        replica: replica.to_string(),
        event: String::new(),
        node: None,
        slot: None,
        attempt: None,
        detail: None,
        status,
    };
    let size = |v: &serde_json::Value| serde_json::to_vec(v).map_or(0, |b| b.len());
    match &envelope.event {
        Event::Started { .. } if envelope.attach => {
            e.event = "caller_joined".into();
            e.detail = caller_name(envelope).map(|c| format!("caller {c}"));
        }
        Event::Started { input } => {
            e.event = "started".into();
            let by = caller_name(envelope).map(|c| format!(", caller {c}"));
            e.detail = Some(format!(
                "input {} bytes{}",
                size(input),
                by.unwrap_or_default()
            ));
        }
        Event::CallSucceeded {
            task,
            attempt,
            output,
        } => {
            e.event = "call_succeeded".into();
            (e.node, e.slot, e.attempt) =
                (Some(task.node.clone()), slot(task.slot), Some(*attempt));
            e.detail = Some(format!("output {} bytes", size(output)));
        }
        Event::CallFailed {
            task,
            attempt,
            failure,
        } => {
            e.event = "call_failed".into();
            (e.node, e.slot, e.attempt) =
                (Some(task.node.clone()), slot(task.slot), Some(*attempt));
            let class = serde_json::to_value(failure.class)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let kind = failure
                .kind
                .as_deref()
                .map(|k| format!(" [{k}]"))
                .unwrap_or_default();
            e.detail = Some(format!("{class}{kind}: {}", failure.message));
        }
        Event::SlotWaiting { task, attempt } | Event::SlotGranted { task, attempt } => {
            let waiting = matches!(envelope.event, Event::SlotWaiting { .. });
            e.event = if waiting {
                "slot_waiting"
            } else {
                "slot_granted"
            }
            .into();
            (e.node, e.slot, e.attempt) =
                (Some(task.node.clone()), slot(task.slot), Some(*attempt));
        }
        Event::TimerFired { timer } => {
            e.event = "timer_fired".into();
            e.detail = Some(timer.key());
        }
        Event::CancelRequested { reason } => {
            e.event = "cancel_requested".into();
            e.detail = reason.clone();
        }
        Event::Abandoned { reason } => {
            e.event = "abandoned".into();
            e.detail = Some(reason.clone());
        }
        Event::ApprovalDecided {
            node,
            approved,
            by,
            comment,
        } => {
            e.event = "approval_decided".into();
            e.node = Some(node.clone());
            let word = if *approved { "approved" } else { "rejected" };
            let by = by
                .as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default();
            let comment = comment
                .as_deref()
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            e.detail = Some(format!("{word}{by}{comment}"));
        }
        Event::PauseRequested { reason } => {
            e.event = "pause_requested".into();
            e.detail = reason.clone();
        }
        Event::ResumeRequested => e.event = "resume_requested".into(),
        Event::Admitted => e.event = "admitted".into(),
        Event::SignalReceived { signal } => {
            e.event = "signal_received".into();
            let by = signal
                .by
                .as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default();
            e.detail = Some(format!(
                "'{}' (id {}){by}, payload {} bytes",
                signal.name,
                signal.id,
                size(&signal.data)
            ));
        }
    }
    e.detail = e.detail.map(|d| truncate(d, DETAIL_MAX));
    e
}

fn caller_name(envelope: &Envelope) -> Option<&str> {
    envelope.caller.as_ref().and_then(|c| c.name.as_deref())
}

fn slot(slot: Slot) -> Option<String> {
    match slot {
        Slot::Single => None,
        Slot::Item(i) => Some(format!("item {i}")),
        Slot::Branch(i) => Some(format!("branch {i}")),
        Slot::Iteration(i) => Some(format!("iteration {i}")),
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Holds `entry` in the run's record (`held`; `ended` when the run has ended); what to
/// publish now: every entry held, once [`HELD_MAX`] are or the run has ended (see the
/// module doc), nothing otherwise.
pub(in crate::shell) fn hold(
    held: &mut Vec<HistoryEntry>,
    ended: bool,
    entry: HistoryEntry,
) -> Vec<HistoryEntry> {
    held.push(entry);
    if held.len() >= HELD_MAX || ended {
        std::mem::take(held)
    } else {
        Vec::new()
    }
}

/// The entries of one message of the history stream: one entry, or several in an array.
pub fn parse(payload: &[u8]) -> serde_json::Result<Vec<HistoryEntry>> {
    match serde_json::from_slice::<HistoryEntry>(payload) {
        Ok(entry) => Ok(vec![entry]),
        Err(_) => serde_json::from_slice(payload),
    }
}

/// Orders entries read from the stream by their number and drops repeats (a replay
/// published after the duplicate window).
pub fn in_order(mut entries: Vec<HistoryEntry>) -> Vec<HistoryEntry> {
    entries.sort_by_key(|e| e.n);
    entries.dedup_by_key(|e| e.n);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ExecutionId;
    use crate::shell::run::record::RunRecord;

    /// [`hold`] on a record's fields, as the plan calls it.
    fn hold(record: &mut RunRecord, entry: HistoryEntry) -> Vec<HistoryEntry> {
        let ended = record.state.status.is_terminal();
        super::hold(&mut record.history_held, ended, entry)
    }
    use crate::core::{Failure, FailureClass, TaskKey};
    use serde_json::json;

    #[test]
    fn entries_name_the_call_and_keep_details_short() {
        let failed = Envelope::event(Event::CallFailed {
            task: TaskKey {
                node: "m_inner".into(),
                slot: Slot::Item(3),
            },
            attempt: 2,
            failure: Failure {
                class: FailureClass::Failed,
                message: "x".repeat(1000),
                kind: Some("bad".into()),
            },
        });
        let e = entry(&failed, 4, Millis(9), "r1", RunStatus::Running);
        assert_eq!(e.event, "call_failed");
        assert_eq!(e.node.as_deref(), Some("m_inner"));
        assert_eq!(e.slot.as_deref(), Some("item 3"));
        assert_eq!(e.attempt, Some(2));
        let detail = e.detail.unwrap();
        assert!(detail.starts_with("failed [bad]: xxx"), "{detail}");
        assert!(detail.len() <= DETAIL_MAX + '…'.len_utf8());
        let started = Envelope::event(Event::Started {
            input: json!({"a": 1}),
        });
        let e = entry(&started, 1, Millis(1), "r1", RunStatus::Running);
        assert_eq!(e.detail.as_deref(), Some("input 7 bytes"));
    }

    /// The `n`th entry of a run, a resume applied at `n` ms.
    fn at(n: u64) -> HistoryEntry {
        let resume = Envelope::event(Event::ResumeRequested);
        entry(&resume, n, Millis(n), "r", RunStatus::Running)
    }

    #[test]
    fn a_message_holds_one_entry_or_several() {
        let one = serde_json::to_vec(&at(1)).unwrap();
        assert_eq!(parse(&one).unwrap(), vec![at(1)]);
        let batch = serde_json::to_vec(&vec![at(2), at(3)]).unwrap();
        assert_eq!(parse(&batch).unwrap(), vec![at(2), at(3)]);
        assert!(parse(b"{\"n\": \"x\"}").is_err());
    }

    #[test]
    fn entries_are_held_until_sixteen_or_the_end() {
        use crate::core::Execution;
        let state = Execution::new(ExecutionId("x".into()), "W");
        let mut record = RunRecord::new(state, Default::default());
        for n in 1..HELD_MAX as u64 {
            assert!(hold(&mut record, at(n)).is_empty());
        }
        let out = hold(&mut record, at(HELD_MAX as u64));
        assert_eq!(out.len(), HELD_MAX);
        assert!(record.history_held.is_empty());
        assert!(hold(&mut record, at(17)).is_empty());
        record.state.status = RunStatus::Success;
        let out: Vec<u64> = hold(&mut record, at(18)).iter().map(|e| e.n).collect();
        assert_eq!(out, vec![17, 18]);
    }

    #[test]
    fn reading_orders_by_number_and_drops_repeats() {
        let read = in_order(vec![at(2), at(1), at(2), at(3)]);
        let ns: Vec<u64> = read.iter().map(|e| e.n).collect();
        assert_eq!(ns, vec![1, 2, 3]);
    }
}
