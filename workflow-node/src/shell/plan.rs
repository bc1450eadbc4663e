//! What one event does to its run, decided without I/O: the protocol half of the worker,
//! as `quinn-proto` is to `quinn`. The driver (`worker::process`) loads the run, asks
//! [`plan`] what to do, and performs the answer in order:
//!
//! 1. `before`: writes the commit refers to (a large map's item chunks, a large input),
//!    awaited before the commit;
//! 2. `commit`: the run's new entry, written with compare-and-swap on the revision read
//!    (a conflict means another replica moved first: reload and plan again);
//! 3. `after` and `commands`: writes the commit promises (item results) are started, the
//!    commands carried out, and the writes awaited;
//! 4. `tidy`: for a redelivered event whose commands were carried out again, the entry
//!    without its outbox entry (a conflict is harmless: the next commit drops it);
//! 5. `keep`: what the worker caches.
//!
//! With traces exported (`traced`), a plan also says which spans the event ended
//! (`spans`, from the core's state before and after it): the driver emits them once the
//! commit holds and the commands are carried out, and they ride in the event's outbox
//! entry, so that a redelivery emits them again as it carries the commands out again.
//!
//! Every rule of that sequence (when an event is a no-op, when a cached record must be
//! read again, when an outbox entry is replayed instead of the event re-applied, which
//! outbox entries are old enough to drop) lives here and is unit-tested below.

use std::collections::BTreeSet;

use super::bulk::{self, Write};
use super::outbox;
use super::record::{Caller, OutboxEntry, RunRecord};
use super::spans::{self, EndedSpan};
use super::Envelope;
use crate::core::{self, Command, Event, Execution, ExecutionId, Millis};
use crate::definition::Workflow;

/// A run as the driver found it for one event.
#[derive(Debug)]
pub(super) struct Loaded {
    /// The KV revision read, `None` when the run has no entry yet.
    pub(super) revision: Option<u64>,
    /// The run's record, `None` when it has no entry yet.
    pub(super) record: Option<RunRecord>,
    /// The record came from this worker's cache, so it may be behind KV.
    pub(super) from_cache: bool,
    /// Outbox entries (by event sequence) whose events can no longer come back: their
    /// messages are gone from the work-queue stream, acked. The next commit drops them.
    pub(super) settled: BTreeSet<u64>,
}

/// Where the event sits in its stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct Delivery {
    /// Its stream sequence: the key of its outbox entry.
    pub(super) seq: u64,
    /// How many times it was delivered (1 the first time).
    pub(super) delivered: i64,
}

/// One compare-and-swap write of the run's entry.
#[derive(Debug, PartialEq)]
pub(super) struct Commit {
    /// The revision it must replace; `None` creates the entry.
    pub(super) revision: Option<u64>,
    /// The entry as stored.
    pub(super) bytes: Vec<u8>,
    /// Whether the run has ended with it: the entry then expires after the retention.
    pub(super) ends_run: bool,
}

/// The I/O to perform for an event, in the order of the module doc.
#[derive(Debug)]
pub(super) struct Steps {
    /// Who hears of the commands (progress, the final reply): the run's caller first.
    pub(super) callers: Vec<Caller>,
    /// Written and awaited before `commit`.
    pub(super) before: Vec<Write>,
    /// The new entry; `None` on a replay, which only carries out.
    pub(super) commit: Option<Commit>,
    /// Written alongside `commands`, awaited after them.
    pub(super) after: Vec<Write>,
    /// Carried out after the commit.
    pub(super) commands: Vec<Command>,
    /// Written last, if nothing moved the entry meanwhile.
    pub(super) tidy: Option<Commit>,
    /// To cache with the revision of the last write that succeeded; `None` caches nothing.
    pub(super) keep: Option<RunRecord>,
    /// How long `before` and `after` are needed at least: until the run's deadline. They
    /// expire that long after the retention.
    pub(super) apart_for: Millis,
    /// When the run ends: what it keeps apart, written again to expire after the
    /// retention like its record, and the key patterns of what it no longer needs (its
    /// maps' items and results), removed. Done last; a replica that dies first leaves
    /// them to expire a deadline later.
    pub(super) ending: Option<Ending>,
    /// Spans the event ended, to emit once everything above is done (see `spans`).
    pub(super) spans: Vec<EndedSpan>,
}

/// What an ended run's keys beside its entry become.
#[derive(Debug, PartialEq)]
pub(super) struct Ending {
    /// Values kept apart, to expire after the retention.
    pub(super) expire: Vec<Write>,
    /// Key patterns (`{run}.items.>`) to remove.
    pub(super) remove: Vec<String>,
}

/// What to do with an event.
#[derive(Debug)]
pub(super) enum Plan {
    /// Nothing to write: ack. The event is a no-op for a fresh record, or belongs to no
    /// run. `keep` is what to cache.
    Ack {
        /// The record to cache, with its revision.
        keep: Option<(u64, Box<RunRecord>)>,
    },
    /// A cached record did not change: another replica may have moved the run on, and
    /// the event may matter to the newer state. Read the record from KV and plan again
    /// (a commit needs no such check: its compare-and-swap tells).
    Reload,
    /// Perform these steps, then ack.
    Perform(Box<Steps>),
}

/// Whether `delivery` is a redelivery of an event whose commands are still in `record`'s
/// outbox: committed before, maybe not carried out. The driver then skips loading
/// anything the event itself would need.
pub(super) fn replays(record: &RunRecord, delivery: Delivery) -> bool {
    delivery.delivered > 1 && record.outbox.iter().any(|e| e.seq == delivery.seq)
}

/// Decides what `envelope` does to the run `loaded` holds, at wall-clock `now`; with
/// `traced`, which spans it ends too.
///
/// The record must be complete for the event: item chunks of large maps in place, and the
/// results of a map the event may end (see [`bulk::results_wanted`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn plan(
    workflow: &Workflow,
    run_key: &str,
    execution: &ExecutionId,
    loaded: Loaded,
    envelope: &Envelope,
    delivery: Delivery,
    now: Millis,
    traced: bool,
) -> Result<Plan, serde_json::Error> {
    let Loaded {
        revision,
        record,
        from_cache,
        settled,
    } = loaded;
    if envelope.attach && record.is_none() {
        tracing::debug!("a resent request for {run_key}, which has no record, dropped");
        return Ok(Plan::Ack { keep: None });
    }
    let Some(record) = record.or_else(|| new_run(workflow, execution, envelope)) else {
        tracing::debug!("event for unknown run {execution} dropped");
        return Ok(Plan::Ack { keep: None });
    };
    if replays(&record, delivery) {
        return Ok(Plan::Perform(Box::new(replay(
            workflow, run_key, revision, record, delivery, now,
        )?)));
    }
    // A start for a run that has started is a request sent again: its caller joins. (A
    // record that has not started holds a cancel that overtook the start.)
    let resent = matches!(envelope.event, Event::Started { .. }) && record.state.started;
    if envelope.attach || resent {
        return attach(run_key, revision, record, envelope, delivery, now);
    }
    let mut record = record;
    if let (Event::Started { .. }, Some(caller)) = (&envelope.event, &envelope.caller) {
        record.caller = caller.clone();
    }
    let applying = Applying {
        revision,
        from_cache,
        settled: &settled,
        delivery,
        now,
        traced,
    };
    apply(workflow, run_key, record, envelope, applying)
}

/// What the driver plans instead of an event it gives up on: the run's abandonment, with
/// the event's caller (for a start that could not be stored), applied as a first delivery
/// (an outbox entry of the event is not carried out again).
pub(super) fn abandoned(
    envelope: Envelope,
    delivery: Delivery,
    reason: String,
) -> (Envelope, Delivery) {
    let envelope = Envelope {
        event: Event::Abandoned { reason },
        caller: envelope.caller,
        attach: false,
    };
    (
        envelope,
        Delivery {
            delivered: 1,
            ..delivery
        },
    )
}

/// The record of a run that a `Started` event (or the abandonment of one) creates, or a
/// cancel that overtook its run's start (kept until the start, which it then ends); `None`
/// for any other event.
fn new_run(workflow: &Workflow, execution: &ExecutionId, envelope: &Envelope) -> Option<RunRecord> {
    let state = Execution::new(execution.clone(), &workflow.name);
    match (&envelope.event, &envelope.caller) {
        (Event::Started { .. } | Event::Abandoned { .. }, Some(caller)) => {
            Some(RunRecord::new(state, caller.clone()))
        }
        (Event::CancelRequested { .. }, None) => Some(RunRecord::new(state, Caller::default())),
        _ => None,
    }
}

/// A caller that sent its request again (an `attach` event, or a second `Started` that the
/// stream did not recognise as a duplicate) joins the run: it hears of the run from now on,
/// and gets the final reply when the run ends (at once if it has ended). A caller the run
/// already answers (the same reply address) changes nothing.
fn attach(
    run_key: &str,
    revision: Option<u64>,
    mut record: RunRecord,
    envelope: &Envelope,
    delivery: Delivery,
    now: Millis,
) -> Result<Plan, serde_json::Error> {
    let Some(caller) = envelope.caller.clone() else {
        tracing::debug!("a resent request for {run_key} without a caller dropped");
        return Ok(Plan::Ack { keep: None });
    };
    let known = |c: &Caller| c.reply_to == caller.reply_to;
    if caller.reply_to.is_none() || record.callers().iter().any(known) {
        return Ok(Plan::Ack {
            keep: revision.map(|r| (r, Box::new(record))),
        });
    }
    let caller = Caller {
        attached: true,
        ..caller
    };
    record.attached.push(caller.clone());
    let state = &record.state;
    let commands = if state.status.is_terminal() {
        vec![Command::Finish {
            status: state.status,
            output: state.output.clone(),
            error: state.error.clone(),
        }]
    } else {
        Vec::new()
    };
    if !commands.is_empty() {
        record.outbox.push(OutboxEntry {
            seq: delivery.seq,
            at: now,
            commands: outbox::thin(&commands),
            results: Vec::new(),
            spans: Vec::new(),
        });
    }
    let bytes = bulk::encode(&mut record)?;
    record.entry_bytes = bytes.len();
    record.outbox.retain(|e| e.seq != delivery.seq);
    let ended = record.state.status.is_terminal();
    Ok(Plan::Perform(Box::new(Steps {
        callers: vec![caller],
        before: Vec::new(),
        commit: Some(Commit {
            revision,
            bytes,
            ends_run: ended,
        }),
        after: Vec::new(),
        commands,
        tidy: None,
        apart_for: apart_for(&record.state, now),
        ending: None,
        keep: (!ended).then_some(record),
        spans: Vec::new(),
    })))
}

/// Carries out a committed outbox entry again (at-least-once), then removes it.
fn replay(
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
        .position(|e| e.seq == delivery.seq)
        .expect("replay is planned only when the entry is in the outbox");
    let entry = record.outbox.remove(pos);
    let tidy = match revision {
        Some(revision) => Some(Commit {
            revision: Some(revision),
            bytes: bulk::encode(&mut record)?,
            ends_run: record.state.status.is_terminal(),
        }),
        None => None,
    };
    Ok(Steps {
        callers: record.callers(),
        before: Vec::new(),
        commit: None,
        after: bulk::result_writes(run_key, &entry.results)?,
        commands: outbox::thicken(workflow, &mut record.state, entry.commands),
        apart_for: apart_for(&record.state, now),
        ending: None,
        keep: tidy.is_some().then_some(record),
        tidy,
        spans: entry.spans,
    })
}

/// How an event is applied: to which revision, from where, at what time.
struct Applying<'a> {
    revision: Option<u64>,
    from_cache: bool,
    settled: &'a BTreeSet<u64>,
    delivery: Delivery,
    now: Millis,
    traced: bool,
}

/// Applies the event to the core and plans its commit.
fn apply(
    workflow: &Workflow,
    run_key: &str,
    mut record: RunRecord,
    envelope: &Envelope,
    applying: Applying<'_>,
) -> Result<Plan, serde_json::Error> {
    let Applying {
        revision,
        from_cache,
        settled,
        delivery,
        now,
        traced,
    } = applying;
    // Some events change the state without any command (a fork branch that is not the
    // last to end): those must be committed too, or the next replica to load the run never
    // learns of them. Items and results are left out of the copy (an event that changes a
    // result always has commands), so it costs nothing per item of a large map.
    let before = bulk::without_bulk(&mut record, Execution::clone);
    let commands = core::apply(workflow, &mut record.state, envelope.event.clone(), now);
    if matches!(envelope.event, Event::Abandoned { .. }) {
        // The failure must be stored whatever made the run's events fail: keep its
        // control state, drop its outputs (the callers' answer carries the error only).
        bulk::drop_outputs(&mut record);
    }
    let spans = if traced {
        let event = &envelope.event;
        let times = &mut record.call_times;
        spans::ended(workflow, &before, &record.state, event, times, now)
    } else {
        // A replica that exports nothing keeps no times: the record stays as it was.
        record.call_times.clear();
        Vec::new()
    };
    if commands.is_empty() && bulk::without_bulk(&mut record, |s| *s == before) {
        if from_cache {
            return Ok(Plan::Reload);
        }
        return Ok(Plan::Ack {
            keep: revision.map(|r| (r, Box::new(record))),
        });
    }
    // An entry stays until its event is acked, whoever committed it.
    record.outbox.retain(|e| !settled.contains(&e.seq));
    let results = bulk::item_results(workflow, &record, &envelope.event);
    let after = bulk::result_writes(run_key, &results)?;
    record.outbox.push(OutboxEntry {
        seq: delivery.seq,
        at: now,
        commands: outbox::thin(&commands),
        results,
        spans: spans::for_outbox(&spans),
    });
    // What the commit refers to goes first: items of a map that just started, outputs
    // kept apart.
    let before = bulk::externalize(&mut record, run_key)?;
    let bytes = bulk::encode(&mut record)?;
    record.entry_bytes = bytes.len();
    record.held_bytes += before
        .iter()
        .chain(&after)
        .map(|w| w.bytes.len())
        .sum::<usize>();
    // Once carried out, this replica's copy needs the entry no more; KV keeps it until
    // the next commit, for a redelivery.
    record.outbox.pop();
    let ended = record.state.status.is_terminal();
    Ok(Plan::Perform(Box::new(Steps {
        callers: record.callers(),
        before,
        commit: Some(Commit {
            revision,
            bytes,
            // A cancel kept for a run that never starts goes with the retention too.
            ends_run: ended || !record.state.started,
        }),
        after,
        commands,
        tidy: None,
        apart_for: apart_for(&record.state, now),
        ending: ended.then(|| ending(&record, run_key)).transpose()?,
        keep: (!ended).then_some(record),
        spans,
    })))
}

/// What happens to the keys beside an entry when its run ends.
fn ending(record: &RunRecord, run_key: &str) -> Result<Ending, serde_json::Error> {
    Ok(Ending {
        expire: bulk::kept_apart(record, run_key)?,
        remove: if record.maps_apart {
            bulk::map_key_patterns(run_key)
        } else {
            Vec::new()
        },
    })
}

/// How long what is written beside a run's entry is needed at least: until its deadline.
fn apart_for(state: &Execution, now: Millis) -> Millis {
    Millis(state.deadline.0.saturating_sub(now.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Dispatch, TaskKey};
    use serde_json::json;

    const WORKFLOW: &str = r#"
name: Chain
workflow:
  description: two agents in a row
  nodes:
    - {id: a, type: agent, agent_name: A}
    - {id: b, type: agent, agent_name: B, depends_on: [a]}
  output_mapping: {b: "{{b.output}}"}
"#;

    fn workflow() -> Workflow {
        crate::definition::parse_str(WORKFLOW, "chain.yaml").expect("valid workflow")
    }

    /// [`super::plan`] without traces.
    fn plan(
        workflow: &Workflow,
        run_key: &str,
        execution: &ExecutionId,
        loaded: Loaded,
        envelope: &Envelope,
        delivery: Delivery,
        now: Millis,
    ) -> Result<Plan, serde_json::Error> {
        super::plan(
            workflow, run_key, execution, loaded, envelope, delivery, now, false,
        )
    }

    fn execution() -> ExecutionId {
        ExecutionId("0123456789abcdef0123456789abcdef".into())
    }

    fn start() -> Envelope {
        Envelope {
            event: Event::Started {
                input: json!({"x": 1}),
            },
            caller: Some(Caller {
                reply_to: Some("inbox.first".into()),
                ..Caller::default()
            }),
            attach: false,
        }
    }

    fn resent(reply_to: &str) -> Envelope {
        Envelope {
            attach: true,
            caller: Some(Caller {
                reply_to: Some(reply_to.into()),
                ..Caller::default()
            }),
            ..start()
        }
    }

    fn first(seq: u64) -> Delivery {
        Delivery { seq, delivered: 1 }
    }

    fn fresh(revision: u64, record: RunRecord) -> Loaded {
        Loaded {
            revision: Some(revision),
            record: Some(record),
            from_cache: false,
            settled: BTreeSet::new(),
        }
    }

    fn none() -> Loaded {
        Loaded {
            revision: None,
            record: None,
            from_cache: false,
            settled: BTreeSet::new(),
        }
    }

    fn steps(plan: Plan) -> Steps {
        match plan {
            Plan::Perform(steps) => *steps,
            other => panic!("expected steps, got {other:?}"),
        }
    }

    fn decode(bytes: &[u8]) -> RunRecord {
        serde_json::from_slice(bytes).expect("a stored record")
    }

    /// The run after `Started`, as stored (revision 1).
    fn started(wf: &Workflow) -> (RunRecord, Dispatch) {
        let s = steps(plan(wf, "k", &execution(), none(), &start(), first(1), Millis(0)).unwrap());
        let record = decode(&s.commit.expect("a commit").bytes);
        let dispatch = s
            .commands
            .iter()
            .find_map(|c| match c {
                Command::Dispatch(d) => Some(d.clone()),
                _ => None,
            })
            .expect("a dispatch of the first node");
        (record, dispatch)
    }

    fn succeeded(task: TaskKey) -> Envelope {
        Envelope::event(Event::CallSucceeded {
            task,
            attempt: 1,
            output: json!({"ok": true}),
        })
    }

    #[test]
    fn a_start_creates_the_entry_with_its_commands_in_the_outbox() {
        let wf = workflow();
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                none(),
                &start(),
                first(7),
                Millis(5),
            )
            .unwrap(),
        );
        let commit = s.commit.expect("a commit");
        assert_eq!(commit.revision, None, "a new run is created, not updated");
        let stored = decode(&commit.bytes);
        assert_eq!(stored.outbox.len(), 1);
        assert_eq!(stored.outbox[0].seq, 7);
        assert_eq!(stored.outbox[0].commands, outbox::thin(&s.commands));
        let kept = s.keep.expect("a running run is cached");
        assert!(
            kept.outbox.is_empty(),
            "the cached copy drops the carried-out entry"
        );
        assert!(s.tidy.is_none() && s.before.is_empty() && s.after.is_empty());
    }

    #[test]
    fn an_event_for_no_run_is_acked_and_nothing_is_written() {
        let wf = workflow();
        let (_, d) = started(&wf);
        let p = plan(
            &wf,
            "k",
            &execution(),
            none(),
            &succeeded(d.task),
            first(2),
            Millis(1),
        );
        assert!(matches!(p.unwrap(), Plan::Ack { keep: None }));
    }

    #[test]
    fn a_no_op_on_a_fresh_record_is_acked_and_cached_but_on_a_cached_one_reloads() {
        let wf = workflow();
        let (record, d) = started(&wf);
        // A result of an attempt that was never made changes nothing.
        let stale = Envelope::event(Event::CallSucceeded {
            task: d.task.clone(),
            attempt: 9,
            output: json!({}),
        });
        let p = plan(
            &wf,
            "k",
            &execution(),
            fresh(3, record.clone()),
            &stale,
            first(2),
            Millis(1),
        );
        match p.unwrap() {
            Plan::Ack {
                keep: Some((3, kept)),
            } => assert_eq!(*kept, record),
            other => panic!("expected an ack that caches revision 3, got {other:?}"),
        }
        let cached = Loaded {
            from_cache: true,
            ..fresh(3, record)
        };
        let p = plan(&wf, "k", &execution(), cached, &stale, first(2), Millis(1));
        assert!(matches!(p.unwrap(), Plan::Reload));
    }

    #[test]
    fn a_result_is_committed_on_the_revision_read() {
        let wf = workflow();
        let (record, d) = started(&wf);
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(4, record),
                &succeeded(d.task),
                first(2),
                Millis(1),
            )
            .unwrap(),
        );
        let commit = s.commit.expect("a commit");
        assert_eq!(commit.revision, Some(4));
        let stored = decode(&commit.bytes);
        let seqs: Vec<u64> = stored.outbox.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            vec![1, 2],
            "the start's entry stays until a later commit"
        );
        assert!(s
            .commands
            .iter()
            .any(|c| matches!(c, Command::Dispatch(n) if n.node_id == "b")));
    }

    #[test]
    fn a_redelivered_event_still_in_the_outbox_is_carried_out_again_not_reapplied() {
        let wf = workflow();
        let original = steps(
            plan(
                &wf,
                "k",
                &execution(),
                none(),
                &start(),
                first(1),
                Millis(0),
            )
            .unwrap(),
        );
        let record = decode(&original.commit.expect("a commit").bytes);
        let again = Delivery {
            seq: 1,
            delivered: 2,
        };
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(1, record),
                &start(),
                again,
                Millis(9),
            )
            .unwrap(),
        );
        assert!(s.commit.is_none(), "a replay commits nothing new");
        assert_eq!(
            s.commands, original.commands,
            "the same commands, payloads from the state"
        );
        let tidy = s.tidy.expect("the entry is removed afterwards");
        assert_eq!(tidy.revision, Some(1));
        assert!(decode(&tidy.bytes).outbox.is_empty());
        assert!(s.keep.is_some());
    }

    #[test]
    fn a_first_delivery_is_applied_even_if_its_sequence_is_in_the_outbox() {
        let wf = workflow();
        let (record, d) = started(&wf);
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(1, record),
                &succeeded(d.task),
                first(1),
                Millis(1),
            )
            .unwrap(),
        );
        assert!(s.commit.is_some());
    }

    #[test]
    fn settled_entries_are_dropped_at_the_next_commit_and_others_stay() {
        let wf = workflow();
        let (mut record, d) = started(&wf);
        // Another replica's entry, its event still in hand there.
        record.outbox.push(OutboxEntry {
            seq: 5,
            at: Millis(0),
            commands: Vec::new(),
            results: Vec::new(),
            spans: Vec::new(),
        });
        let loaded = Loaded {
            settled: BTreeSet::from([1]),
            ..fresh(1, record)
        };
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                loaded,
                &succeeded(d.task),
                first(9),
                Millis(10),
            )
            .unwrap(),
        );
        let stored = decode(&s.commit.expect("a commit").bytes);
        let seqs: Vec<u64> = stored.outbox.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            vec![5, 9],
            "the acked start's entry went, the others stay"
        );
    }

    #[test]
    fn a_run_that_ends_is_not_cached() {
        let wf = workflow();
        let (record, a) = started(&wf);
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(1, record),
                &succeeded(a.task),
                first(2),
                Millis(1),
            )
            .unwrap(),
        );
        let b = s
            .commands
            .iter()
            .find_map(|c| match c {
                Command::Dispatch(d) => Some(d.task.clone()),
                _ => None,
            })
            .expect("b is dispatched");
        let record = s.keep.expect("still running: cached");
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(2, record),
                &succeeded(b),
                first(3),
                Millis(2),
            )
            .unwrap(),
        );
        let stored = decode(&s.commit.expect("a commit").bytes);
        assert!(stored.state.status.is_terminal());
        assert!(s
            .commands
            .iter()
            .any(|c| matches!(c, Command::Finish { .. })));
        assert!(s.keep.is_none());
    }

    #[test]
    fn a_request_resent_from_the_same_address_changes_nothing() {
        let wf = workflow();
        let (record, _) = started(&wf);
        let p = plan(
            &wf,
            "k",
            &execution(),
            fresh(1, record),
            &resent("inbox.first"),
            first(2),
            Millis(1),
        );
        assert!(matches!(p.unwrap(), Plan::Ack { keep: Some(_) }));
    }

    #[test]
    fn a_caller_from_another_address_joins_a_running_run_and_hears_of_it() {
        let wf = workflow();
        let (record, a) = started(&wf);
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(1, record),
                &resent("inbox.second"),
                first(2),
                Millis(1),
            )
            .unwrap(),
        );
        assert!(s.commands.is_empty(), "nothing to tell it yet");
        let stored = decode(&s.commit.expect("a commit").bytes);
        assert_eq!(stored.attached.len(), 1);
        assert!(stored.attached[0].attached);
        // From now on every command goes to both callers.
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(2, stored),
                &succeeded(a.task),
                first(3),
                Millis(2),
            )
            .unwrap(),
        );
        let callers: Vec<_> = s
            .callers
            .iter()
            .map(|c| c.reply_to.clone().unwrap())
            .collect();
        assert_eq!(callers, vec!["inbox.first", "inbox.second"]);
    }

    #[test]
    fn a_caller_joining_an_ended_run_gets_its_final_reply_alone() {
        let wf = workflow();
        let (mut record, _) = started(&wf);
        record.state.status = crate::core::RunStatus::Success;
        record.state.output = Some(json!({"b": 1}));
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(5, record),
                &resent("inbox.late"),
                first(6),
                Millis(1),
            )
            .unwrap(),
        );
        assert_eq!(s.callers.len(), 1);
        assert_eq!(s.callers[0].reply_to.as_deref(), Some("inbox.late"));
        assert_eq!(
            s.commands,
            vec![Command::Finish {
                status: crate::core::RunStatus::Success,
                output: Some(json!({"b": 1})),
                error: None,
            }]
        );
        let stored = decode(&s.commit.expect("a commit").bytes);
        assert!(
            stored.outbox.iter().any(|e| e.seq == 6),
            "kept for a redelivery"
        );
    }

    #[test]
    fn a_second_start_from_another_address_joins_like_an_attach() {
        let wf = workflow();
        let (record, _) = started(&wf);
        let again = Envelope {
            caller: Some(Caller {
                reply_to: Some("inbox.other".into()),
                ..Caller::default()
            }),
            ..start()
        };
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(1, record.clone()),
                &again,
                first(2),
                Millis(1),
            )
            .unwrap(),
        );
        assert_eq!(decode(&s.commit.expect("a commit").bytes).attached.len(), 1);
        let p = plan(
            &wf,
            "k",
            &execution(),
            fresh(1, record),
            &start(),
            first(2),
            Millis(1),
        );
        assert!(
            matches!(p.unwrap(), Plan::Ack { .. }),
            "the same caller's start changes nothing"
        );
    }

    #[test]
    fn a_cancel_that_overtakes_the_start_is_kept_and_ends_the_run_for_its_caller() {
        let wf = workflow();
        let cancel = Envelope::event(Event::CancelRequested { reason: None });
        let s = steps(plan(&wf, "k", &execution(), none(), &cancel, first(1), Millis(0)).unwrap());
        let commit = s.commit.expect("the cancel is kept in a record");
        assert!(
            commit.ends_run,
            "a kept cancel expires if its run never starts"
        );
        let kept = decode(&commit.bytes);
        assert!(!kept.state.started && kept.state.cancel_requested);
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(1, kept),
                &start(),
                first(2),
                Millis(1),
            )
            .unwrap(),
        );
        assert_eq!(
            s.callers[0].reply_to.as_deref(),
            Some("inbox.first"),
            "the start's caller is answered"
        );
        assert!(s.commands.iter().any(|c| matches!(
            c,
            Command::Finish {
                status: crate::core::RunStatus::Cancelled,
                ..
            }
        )));
        assert!(!s.commands.iter().any(|c| matches!(c, Command::Dispatch(_))));
    }

    #[test]
    fn traced_the_attempts_start_is_stored_and_its_end_planned_kept_and_replayed() {
        let wf = workflow();
        let traced = |loaded, env: &Envelope, d, t| {
            steps(super::plan(&wf, "k", &execution(), loaded, env, d, Millis(t), true).unwrap())
        };
        let s = traced(none(), &start(), first(1), 5);
        assert!(s.spans.is_empty(), "nothing ended yet");
        let record = decode(&s.commit.expect("a commit").bytes);
        let a = TaskKey::single("a");
        assert_eq!(record.call_times[&a].started, Millis(5));
        let s = traced(fresh(1, record), &succeeded(a.clone()), first(2), 9);
        let keys: Vec<_> = s.spans.iter().map(|sp| sp.key.clone()).collect();
        assert_eq!(
            keys,
            vec![
                spans::SpanKey::Attempt {
                    task: a.clone(),
                    attempt: 1
                },
                spans::SpanKey::Node { node: "a".into() }
            ]
        );
        assert_eq!((s.spans[0].start, s.spans[0].end), (Millis(5), Millis(9)));
        let stored = decode(&s.commit.expect("a commit").bytes);
        let entry = stored
            .outbox
            .iter()
            .find(|e| e.seq == 2)
            .expect("its entry");
        assert_eq!(entry.spans, s.spans, "kept for a redelivery");
        assert!(!stored.call_times.contains_key(&a));
        assert!(stored.call_times.contains_key(&TaskKey::single("b")));
        // A redelivery before the ack emits them again, with the commands.
        let again = Delivery {
            seq: 2,
            delivered: 2,
        };
        let replayed = traced(fresh(2, stored), &succeeded(a), again, 20);
        assert!(replayed.commit.is_none());
        assert_eq!(replayed.spans, s.spans);
    }

    #[test]
    fn untraced_nothing_is_kept_for_spans() {
        let wf = workflow();
        let (record, a) = started(&wf);
        assert!(record.call_times.is_empty());
        let s = steps(
            plan(
                &wf,
                "k",
                &execution(),
                fresh(1, record),
                &succeeded(a.task),
                first(2),
                Millis(1),
            )
            .unwrap(),
        );
        assert!(s.spans.is_empty());
        let stored = decode(&s.commit.expect("a commit").bytes);
        assert!(stored.call_times.is_empty());
        assert!(stored.outbox.iter().all(|e| e.spans.is_empty()));
    }
}
