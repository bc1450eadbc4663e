//! Group commit: events of one run that wait together (in the worker's batch) are applied
//! in order and committed with one compare-and-swap, as one [`Steps`]. Their outbox
//! entries are merged into one under the first event's sequence (its commands, results,
//! history entries, wake write; `group` names the others), so a redelivery of any of them
//! after a crash replays the whole group's entry; the commands, writes and history entries
//! of the group are carried out together after the commit, and every event of the group is
//! acked once they are.
//!
//! Only first deliveries of events that carry no caller go in a group (agents' results,
//! timers); a start, a cancel, a caller joining or a redelivery is planned alone.

use super::*;

/// Whether `envelope`, delivered as `delivery`, may be committed with others.
pub(in crate::shell) fn groupable(envelope: &Envelope, delivery: Delivery) -> bool {
    delivery.delivered == 1
        && envelope.caller.is_none()
        && !envelope.attach
        && matches!(
            envelope.event,
            Event::CallSucceeded { .. } | Event::CallFailed { .. } | Event::TimerFired { .. }
        )
}

/// Plans `events` (all [`groupable`], of the run `loaded` holds, in stream order) as one
/// commit. `None` when the run has no record (a group is planned only for runs that
/// have one; the driver then plans the events one by one).
pub(in crate::shell) fn plan_group(
    workflow: &Workflow,
    run_key: &str,
    loaded: Loaded,
    events: &[(&Envelope, Delivery)],
    stamp: Stamp<'_>,
    traced: bool,
) -> Result<Option<Plan>, serde_json::Error> {
    let Loaded {
        revision,
        record,
        from_cache,
        settled,
    } = loaded;
    let (Some(record), Some(_)) = (record, revision) else {
        return Ok(None);
    };
    // An event whose entry another replica committed is carried out again, alone.
    if events.iter().any(|&(_, d)| replays(&record, d)) {
        return Ok(None);
    }
    // The record after the events so far.
    let mut record = record;
    let mut group: Option<Steps> = None;
    let mut last_commit: Option<Commit> = None;
    for &(envelope, delivery) in events {
        if record.state.status.is_terminal() {
            // A terminal run absorbs every event: the rest are acked with the group.
            break;
        }
        let applying = Applying {
            revision,
            from_cache,
            settled: &settled,
            delivery,
            stamp,
            traced,
            keep_entry: true,
        };
        match apply(workflow, run_key, record, envelope, applying)? {
            Plan::Reload => return Ok(Some(Plan::Reload)),
            Plan::Ack { keep } => {
                let Some((_, kept)) = keep else {
                    return Ok(None);
                };
                record = *kept;
            }
            Plan::Perform(mut steps) => {
                // Only whether it ends the run: its bytes were left to the group.
                last_commit = steps.commit.take();
                let Some(kept) = steps.keep.take() else {
                    return Ok(None);
                };
                record = kept;
                group = Some(merge(group, *steps));
            }
        }
    }
    let (Some(mut steps), Some(last)) = (group, last_commit) else {
        // Nothing changed the run.
        return Ok(Some(Plan::Ack {
            keep: revision.map(|r| (r, Box::new(record))),
        }));
    };
    // One outbox entry for the group, so the outbox stays as small as for one event.
    let seqs: BTreeSet<u64> = events.iter().map(|(_, d)| d.seq).collect();
    let (mine, others): (Vec<OutboxEntry>, Vec<OutboxEntry>) = std::mem::take(&mut record.outbox)
        .into_iter()
        .partition(|e| seqs.contains(&e.seq));
    record.outbox = others;
    let merged = merge_entries(mine);
    record.outbox.extend(merged.iter().cloned());
    let bytes = apart::encode(&mut record)?;
    record.entry_bytes = bytes.len();
    steps.commit = Some(Commit {
        revision,
        bytes,
        ends_run: last.ends_run,
        unstarted: last.unstarted,
    });
    // Carried out by this replica: its copy needs the group's entry no more.
    record.outbox.retain(|e| !seqs.contains(&e.seq));
    steps.callers = record.callers();
    steps.keep = (!record.state.status.is_terminal()).then_some(record);
    Ok(Some(Plan::Perform(Box::new(steps))))
}

/// The outbox entries of a group's events, in order, as one entry under the first's
/// sequence.
fn merge_entries(entries: Vec<OutboxEntry>) -> Option<OutboxEntry> {
    let mut entries = entries.into_iter();
    let mut first = entries.next()?;
    for e in entries {
        first.group.push(e.seq);
        first.commands.extend(e.commands);
        first.results.extend(e.results);
        first
            .more_history
            .extend(e.history.into_iter().chain(e.more_history));
        first.spans.extend(e.spans);
        first.wake = merge_wakes(first.wake.take(), e.wake);
    }
    Some(first)
}

/// The steps of a group so far, followed by those of its next event.
fn merge(group: Option<Steps>, next: Steps) -> Steps {
    let Some(mut group) = group else {
        return next;
    };
    group.before.extend(next.before);
    group.after.extend(next.after);
    group.commands.extend(next.commands);
    group.history.extend(next.history);
    group.wake = merge_wakes(group.wake, next.wake);
    group.apart_for = next.apart_for;
    group.ending = next.ending;
    group.spans.extend(next.spans);
    let o = &mut group.observed;
    o.run_started |= next.observed.run_started;
    o.run_ended = next.observed.run_ended.or(o.run_ended.take());
    o.nodes.extend(next.observed.nodes);
    o.attempts.extend(next.observed.attempts);
    group
}

/// The wake writes of two commits in a row as one: a wake armed by the first and dropped
/// by the second is never written.
fn merge_wakes(first: Option<WakeWrite>, next: Option<WakeWrite>) -> Option<WakeWrite> {
    let (first, next) = match (first, next) {
        (None, w) | (w, None) => return w,
        (Some(f), Some(n)) => (f, n),
    };
    let armed_first = first.arm.as_ref().map(|(w, _)| *w);
    let drop = match next.drop {
        Some(d) if Some(d) == armed_first => first.drop,
        // The first's drop is of the wake before the group; the next one's of the wake
        // the first armed (which is then written and dropped) or none.
        Some(d) => Some(d),
        None => first.drop,
    };
    let arm = match next.arm {
        Some(a) => Some(a),
        None if next.drop.is_some() && next.drop == armed_first => None,
        None => first.arm,
    };
    Some(WakeWrite { arm, drop })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::run::wake::Wake;

    fn wake(n: u64) -> Wake {
        Wake {
            at: Millis(n * 100),
            n,
        }
    }

    fn write(arm: Option<u64>, drop: Option<u64>) -> Option<WakeWrite> {
        Some(WakeWrite {
            arm: arm.map(|n| (wake(n), core::TimerId::Deadline)),
            drop: drop.map(wake),
        })
    }

    #[test]
    fn a_wake_armed_and_superseded_in_one_group_is_never_written() {
        // The group's first event arms 1 over the wake before the group (0); the next
        // arms 2 over 1: write 2, drop 0.
        assert_eq!(
            merge_wakes(write(Some(1), Some(0)), write(Some(2), Some(1))),
            write(Some(2), Some(0))
        );
        // The run ends in the group: drop only the wake from before it.
        assert_eq!(
            merge_wakes(write(Some(1), Some(0)), write(None, Some(1))),
            write(None, Some(0))
        );
        assert_eq!(
            merge_wakes(None, write(Some(3), None)),
            write(Some(3), None)
        );
        assert_eq!(
            merge_wakes(write(Some(3), None), None),
            write(Some(3), None)
        );
    }
}
