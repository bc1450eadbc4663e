//! The entries of a run's outbox (`run::outbox`), where a commit keeps its event's commands until they are carried out:
//! whether a delivery finds its event's entry there (then it is replayed, never applied
//! again), carrying an entry out again, and dropping the entries of events that are
//! settled while keeping what they were still to publish or arm.

use super::*;

/// Whether `delivery` is of an event whose commands are still in `record`'s outbox:
/// committed before, maybe not carried out. The driver then skips loading anything the
/// event itself would need. A first delivery counts too: the replica holding it was cut
/// off or frozen past the ack wait while another took the event over and committed it, and
/// that one may have failed to carry it out (its wake write refused for want of quorum) and
/// given it back. Applied again, the event is a no-op, and its ack (by stream sequence)
/// would settle it with the entry not carried out: a wake never armed, and the run waiting
/// on it for good. Carried out again, it is at least once, as every replay is.
pub(in crate::shell) fn replays(record: &RunRecord, delivery: Delivery) -> bool {
    delivery.delivered > 0 && record.outbox.iter().any(|e| holds(e, delivery.seq))
}

/// Whether outbox entry `e` holds the commands of event `seq` (its own, or one committed
/// with it).
pub(super) fn holds(e: &OutboxEntry, seq: u64) -> bool {
    e.seq == seq || e.group.contains(&seq)
}

/// Carries out a committed outbox entry again (at-least-once), then removes it.
pub(super) fn replay(
    workflow: &Workflow,
    run_key: &str,
    revision: Option<u64>,
    mut record: RunRecord,
    delivery: Delivery,
    now: Millis,
) -> Result<Steps, serde_json::Error> {
    let pos = record
        .outbox
        .iter()
        .position(|e| holds(e, delivery.seq))
        .expect("replay is planned only when the entry is in the outbox");
    let entry = record.outbox.remove(pos);
    let tidy = match revision {
        Some(revision) => Some(Commit {
            revision: Some(revision),
            bytes: apart::encode(&mut record)?,
            ends_run: record.state.status.is_terminal(),
            unstarted: !record.state.started,
        }),
        None => None,
    };
    Ok(Steps {
        callers: record.callers(),
        before: Vec::new(),
        commit: None,
        after: apart::result_writes(run_key, &entry.results)?,
        commands: outbox::thicken(workflow, &mut record.state, entry.commands),
        history: entry
            .history
            .into_iter()
            .chain(entry.more_history)
            .collect(),
        wake: entry.wake,
        legacy_timers: !entry.timers_in_wake,
        apart_for: apart_for(&record.state, now),
        ending: None,
        keep: tidy.is_some().then_some(record),
        tidy,
        observed: Observed::default(),
        spans: entry.spans,
    })
}

/// Drops the outbox entries whose events are `settled` (gone from the work queue); the
/// history entries they were to publish, for the commit dropping them to publish again,
/// and the run's `current` wake if one of them armed it, to be armed again.
///
/// An event is acked once its entry is carried out, but it can also go without that: a
/// frozen replica's late ack, or its stale first delivery applied as a no-op and acked, acts
/// on the event by its stream sequence while the replica that committed the entry is still
/// carrying it out, or failing to (its history publish refused, the replica killed). The
/// entry's history entries would then be in neither the record nor the stream. Published
/// again, they are stored once: the message id of a batch is that of its first and last
/// entries, which the stream keeps one copy of, and readers drop a number seen twice. So
/// would the wake the entry armed, and the run would wait on it for good: it is written
/// again (one with a key of its own per arming, so an old one never overwrites a newer).
pub(super) fn drop_settled(
    outbox: &mut Vec<OutboxEntry>,
    settled: &BTreeSet<u64>,
    current: Option<Wake>,
) -> (Vec<HistoryEntry>, Option<(Wake, core::TimerId)>) {
    let mut left = Vec::new();
    let mut rearm = None;
    outbox.retain_mut(|e| {
        if !settled.contains(&e.seq) {
            return true;
        }
        left.extend(e.history.take());
        left.append(&mut e.more_history);
        if let Some((wake, timer)) = e.wake.as_ref().and_then(|w| w.arm.clone()) {
            if Some(wake) == current {
                rearm = Some((wake, timer));
            }
        }
        false
    });
    (left, rearm)
}
