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
//! A commit also numbers its event in the run's history and holds the history entry in the
//! record; a commit that takes the held entries out (16 of them, or the run's end) keeps
//! them in its outbox entry (`more_history`): the driver publishes them with the commands,
//! in one message, and again on a replay (see `history`).
//!
//! `observed` is what the commit does to the run for the metrics, recorded once it holds.
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

use crate::core::{self, Command, Detail, Event, Execution, ExecutionId, Millis, NodeStatus};
use crate::definition::Workflow;
use crate::shell::run::apart::{self, Write};
use crate::shell::run::check::{self, Liveness};
use crate::shell::run::envelope::Caller;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::gate;
use crate::shell::run::history::{self, HistoryEntry};
use crate::shell::run::identity;
use crate::shell::run::observed::{observe, Observed};
use crate::shell::run::outbox;
use crate::shell::run::record::{ApprovalAsk, OutboxEntry, RunRecord};
use crate::shell::run::spans::{self, EndedSpan};
use crate::shell::run::wake::{self, Wake, WakeWrite};

/// A run as the driver found it for one event.
#[derive(Debug)]
pub(in crate::shell) struct Loaded {
    /// The KV revision read, `None` when the run has no entry yet.
    pub(in crate::shell) revision: Option<u64>,
    /// The run's record, `None` when it has no entry yet.
    pub(in crate::shell) record: Option<RunRecord>,
    /// The record came from this worker's cache, so it may be behind KV.
    pub(in crate::shell) from_cache: bool,
    /// Outbox entries (by event sequence) whose events can no longer come back: their
    /// messages are gone from the work-queue stream, acked. The next commit drops them.
    pub(in crate::shell) settled: BTreeSet<u64>,
}

/// Where the event sits in its stream.
#[derive(Debug, Clone, Copy)]
pub(in crate::shell) struct Delivery {
    /// Its stream sequence: the key of its outbox entry.
    pub(in crate::shell) seq: u64,
    /// How many times it was delivered (1 the first time); 0 for an event the driver gave
    /// up on, applied as its run's abandonment (see [`abandoned`]).
    pub(in crate::shell) delivered: i64,
}

/// When, and by which replica, an event is planned.
#[derive(Debug, Clone, Copy)]
pub(in crate::shell) struct Stamp<'a> {
    /// The wall clock.
    pub(in crate::shell) now: Millis,
    /// The replica planning it, named in the history.
    pub(in crate::shell) replica: &'a str,
    /// How the run's calls in flight are checked for signs of life (see `check`).
    pub(in crate::shell) liveness: Liveness<'a>,
    /// Outputs larger than this reach callers as artifacts (`Config::inline_limit`): a
    /// run's output over it is stored as its artifact with the commit ending the run.
    pub(in crate::shell) inline_limit: usize,
}

/// One compare-and-swap write of the run's entry.
#[derive(Debug, PartialEq)]
pub(in crate::shell) struct Commit {
    /// The revision it must replace; `None` creates the entry.
    pub(in crate::shell) revision: Option<u64>,
    /// The entry as stored.
    pub(in crate::shell) bytes: Vec<u8>,
    /// Whether the run has ended with it: the entry then expires after the retention.
    pub(in crate::shell) ends_run: bool,
    /// Whether the entry holds only a cancel kept for a run not started yet: it then
    /// expires soon (`Config::early_cancel_expiry`), unless the start comes first.
    pub(in crate::shell) unstarted: bool,
}

/// The I/O to perform for an event, in the order of the module doc.
#[derive(Debug)]
pub(in crate::shell) struct Steps {
    /// Who hears of the commands (progress, the final reply): the run's caller first.
    pub(in crate::shell) callers: Vec<Caller>,
    /// Written and awaited before `commit`.
    pub(in crate::shell) before: Vec<Write>,
    /// The new entry; `None` on a replay, which only carries out.
    pub(in crate::shell) commit: Option<Commit>,
    /// Written alongside `commands`, awaited after them.
    pub(in crate::shell) after: Vec<Write>,
    /// Carried out after the commit.
    pub(in crate::shell) commands: Vec<Command>,
    /// The history entries the commit took out of the record (none while they are held
    /// there), published with `commands` as one message (see `history`).
    pub(in crate::shell) history: Vec<HistoryEntry>,
    /// The run's wake entry to write or remove with `commands` (see `wake`).
    pub(in crate::shell) wake: Option<WakeWrite>,
    /// Whether `commands` arm and disarm one entry per timer: a replayed outbox entry
    /// committed before wakes existed.
    pub(in crate::shell) legacy_timers: bool,
    /// Written last, if nothing moved the entry meanwhile.
    pub(in crate::shell) tidy: Option<Commit>,
    /// To cache with the revision of the last write that succeeded; `None` caches nothing.
    pub(in crate::shell) keep: Option<RunRecord>,
    /// How long `before` and `after` are needed at least: until the run's deadline. They
    /// expire that long after the retention.
    pub(in crate::shell) apart_for: Millis,
    /// When the run ends: what it keeps apart, written again to expire after the
    /// retention like its record, and the key patterns of what it no longer needs (its
    /// maps' items and results), removed. Done last; a replica that dies first leaves
    /// them to expire a deadline later.
    pub(in crate::shell) ending: Option<Ending>,
    /// What `commit` does to the run (started, ended, nodes and attempts ended), to
    /// record once it holds; nothing for a replay or a caller joining.
    pub(in crate::shell) observed: Observed,
    /// Spans the event ended, to emit once everything above is done (see `spans`).
    pub(in crate::shell) spans: Vec<EndedSpan>,
}

/// What an ended run's keys beside its entry become.
#[derive(Debug, PartialEq)]
pub(in crate::shell) struct Ending {
    /// Values kept apart, to expire after the retention.
    pub(in crate::shell) expire: Vec<Write>,
    /// Key patterns (`{run}.items.>`) to remove.
    pub(in crate::shell) remove: Vec<String>,
}

/// What to do with an event.
#[derive(Debug)]
pub(in crate::shell) enum Plan {
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

/// Decides what `envelope` does to the run `loaded` holds, at wall-clock `stamp.now`;
/// with `traced`, which spans it ends too.
///
/// The record must be complete for the event: item chunks of large maps in place, and the
/// results of a map the event may end (see [`apart::results_wanted`]).
#[allow(clippy::too_many_arguments)]
pub(in crate::shell) fn plan(
    workflow: &Workflow,
    run_key: &str,
    execution: &ExecutionId,
    loaded: Loaded,
    envelope: &Envelope,
    delivery: Delivery,
    stamp: Stamp<'_>,
    traced: bool,
) -> Result<Plan, serde_json::Error> {
    let now = stamp.now;
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
    // A start for a run that has started is a request sent again: the replica that took
    // it published the start before looking the run up, then checked who sent it and
    // attached its caller if it may (an `attach` event). The start itself changes nothing.
    // (A record that has not started holds a cancel that overtook the start.)
    if matches!(envelope.event, Event::Started { .. }) && !envelope.attach && record.state.started {
        return Ok(Plan::Ack {
            keep: revision.map(|r| (r, Box::new(record))),
        });
    }
    if envelope.attach {
        return attach(run_key, revision, record, envelope, delivery, stamp);
    }
    if let (Event::CancelRequested { .. }, Some(by)) = (&envelope.event, &envelope.caller) {
        // Sent for a run its sender did not find (kept for the start): it holds only if
        // the run's caller sent it (see `identity`).
        if record.state.started && !identity::kept_cancel_holds(by, &record.caller) {
            tracing::warn!(
                "run {execution}: a cancel sent before its start was stored, by another \
                 identity than the start's: ignored"
            );
            return Ok(Plan::Ack {
                keep: revision.map(|r| (r, Box::new(record))),
            });
        }
    }
    let mut record = record;
    if let (Event::Started { .. }, Some(caller)) = (&envelope.event, &envelope.caller) {
        // A cancel kept for this start ends the run only if its caller sent it.
        if record.state.cancel_requested && !identity::kept_cancel_holds(&record.caller, caller) {
            tracing::warn!(
                "run {execution}: the cancel kept for its start was sent by another identity \
                 than the start: ignored"
            );
            record.state.cancel_requested = false;
        }
        record.caller = caller.clone();
    }
    let applying = Applying {
        revision,
        from_cache,
        settled: &settled,
        delivery,
        stamp,
        traced,
        keep_entry: false,
    };
    apply(workflow, run_key, record, envelope, applying)
}

/// What the driver plans instead of an event it gives up on: the run's abandonment, with
/// the event's caller (for a start that could not be stored), applied as new (delivered
/// 0: an outbox entry of the event is not carried out again).
pub(in crate::shell) fn abandoned(
    envelope: Envelope,
    delivery: Delivery,
    reason: String,
) -> (Envelope, Delivery) {
    let envelope = Envelope {
        event: Event::Abandoned { reason },
        caller: envelope.caller,
        attach: false,
        definition: envelope.definition,
        wake: None,
    };
    (
        envelope,
        Delivery {
            delivered: 0,
            ..delivery
        },
    )
}

/// The record of a run that a `Started` event (or the abandonment of one) creates, or a
/// cancel that overtook its run's start (kept until the start, which it then ends); `None`
/// for any other event.
fn new_run(workflow: &Workflow, execution: &ExecutionId, envelope: &Envelope) -> Option<RunRecord> {
    let state = Execution::new(execution.clone(), &workflow.name);
    let mut record = match (&envelope.event, &envelope.caller) {
        (Event::Started { .. } | Event::Abandoned { .. }, Some(caller)) => {
            RunRecord::new(state, caller.clone())
        }
        // The kept cancel's caller holds the key that signed it (see `identity`).
        (Event::CancelRequested { .. }, caller) => {
            RunRecord::new(state, caller.clone().unwrap_or_default())
        }
        _ => return None,
    };
    record.definition = Some(workflow.hash.clone());
    Some(record)
}

/// A caller that sent its request again (an `attach` event, published by the replica that
/// took the request once it checked the caller may see the run) joins the run: it hears of the run from now on,
/// and gets the final reply when the run ends (at once if it has ended). A caller the run
/// already answers (the same reply address) changes nothing.
fn attach(
    run_key: &str,
    revision: Option<u64>,
    mut record: RunRecord,
    envelope: &Envelope,
    delivery: Delivery,
    stamp: Stamp<'_>,
) -> Result<Plan, serde_json::Error> {
    let now = stamp.now;
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
    // The entry is kept even without commands: it carries the history entries to publish
    // again if this replica dies before the event is acked.
    let entry = history_entry(&mut record, envelope, stamp);
    let published = history::hold(
        &mut record.history_held,
        record.state.status.is_terminal(),
        entry,
    );
    record.outbox.push(OutboxEntry {
        seq: delivery.seq,
        at: now,
        commands: outbox::thin(&commands),
        results: Vec::new(),
        history: None,
        spans: Vec::new(),
        wake: None,
        group: Vec::new(),
        more_history: published.clone(),
        timers_in_wake: true,
    });
    let bytes = apart::encode(&mut record)?;
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
            unstarted: !record.state.started,
        }),
        after: Vec::new(),
        commands,
        history: published,
        wake: None,
        legacy_timers: false,
        tidy: None,
        apart_for: apart_for(&record.state, now),
        ending: None,
        keep: (!ended).then_some(record),
        observed: Observed::default(),
        spans: Vec::new(),
    })))
}

/// Numbers the event that changes the run and makes its history entry.
fn history_entry(record: &mut RunRecord, envelope: &Envelope, stamp: Stamp<'_>) -> HistoryEntry {
    record.applied += 1;
    history::entry(
        envelope,
        record.applied,
        stamp.now,
        stamp.replica,
        record.state.status,
    )
}

/// What the run's record keeps for inspection beside the core's state, after an event
/// produced `commands` at `now`: attempts by node, what waiting approvals asked, when the
/// run ended.
fn note(record: &mut RunRecord, commands: &[Command], now: Millis) {
    for command in commands {
        match command {
            Command::Dispatch(d) => *record.attempts.entry(d.task.node.clone()).or_default() += 1,
            Command::RequestApproval {
                node,
                approvers,
                message,
                deadline,
            } => {
                let ask = ApprovalAsk {
                    approvers: approvers.clone(),
                    message: message.clone(),
                    deadline: *deadline,
                };
                record.asks.insert(node.clone(), ask);
            }
            _ => {}
        }
    }
    let state = &record.state;
    record
        .asks
        .retain(|node, _| state.node_status(node) == NodeStatus::Waiting);
    // A resumed run moves suspended approval timeouts (see `core::pause`).
    for (node, ask) in record.asks.iter_mut() {
        if let Some(Detail::Approval { deadline }) =
            state.nodes.get(node).and_then(|n| n.detail.as_ref())
        {
            ask.deadline = *deadline;
        }
    }
    if state.status.is_terminal() && record.ended_at.is_none() {
        record.ended_at = Some(now);
    }
}

/// How an event is applied: to which revision, from where, at what time.
struct Applying<'a> {
    revision: Option<u64>,
    from_cache: bool,
    settled: &'a BTreeSet<u64>,
    delivery: Delivery,
    stamp: Stamp<'a>,
    traced: bool,
    /// Leave the event's outbox entry in the record kept (a group commit: the next event's
    /// commit must hold it too); the commit's bytes are then left empty, for the group to
    /// encode the record once, after its last event.
    keep_entry: bool,
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
        stamp,
        traced,
        keep_entry,
    } = applying;
    let now = stamp.now;
    // Some events change the state without any command (a fork branch that is not the
    // last to end): those must be committed too, or the next replica to load the run never
    // learns of them. The copy is of the control state only (see `core::control`): it
    // costs nothing per byte of input, output or map item.
    let before = record.state.control();
    let Applied {
        mut commands,
        fired,
        copies,
        checked,
        checks_moved,
    } = apply_events(workflow, &mut record, envelope, now, stamp.liveness);
    // What the metrics and spans see: for a wake, every timer it fired.
    let fired_events: Vec<Event> = match envelope.wake {
        Some(_) => fired
            .iter()
            .map(|timer| Event::TimerFired {
                timer: timer.clone(),
            })
            .collect(),
        None => Vec::new(),
    };
    let event = match envelope.wake {
        Some(_) => fired_events.as_slice(),
        None => std::slice::from_ref(&envelope.event),
    };
    if matches!(envelope.event, Event::Abandoned { .. }) {
        // The failure must be stored whatever made the run's events fail: keep its
        // control state, drop its outputs (the callers' answer carries the error only).
        apart::drop_outputs(&mut record);
    }
    let spans = if traced {
        let times = &mut record.call_times;
        spans::ended(workflow, &before, &record.state, event, times, now)
    } else {
        // A replica that exports nothing keeps no times: the record stays as it was.
        record.call_times.clear();
        Vec::new()
    };
    // Numbered as the commit that would arm it (`history_entry` counts it below).
    let next = record.applied + 1;
    let wake = wake::rewake(
        &mut record.timers,
        check::earliest(&record.checks),
        &mut record.wake,
        record.state.status.is_terminal(),
        envelope.wake,
        next,
    );
    if commands.is_empty()
        && copies.is_empty()
        && wake.is_none()
        && record.state.control() == before
        && !checks_moved
    {
        if from_cache {
            return Ok(Plan::Reload);
        }
        return Ok(Plan::Ack {
            keep: revision.map(|r| (r, Box::new(record))),
        });
    }
    let observed = observe(workflow, &before, &record.state, event, now);
    // An entry stays until its event is acked, whoever committed it; the history entries
    // of one dropped now are published again with this commit (see [`drop_settled`]).
    let (left, rearm) = drop_settled(&mut record.outbox, settled, record.wake);
    // The run's wake, armed by an entry dropped unheard of, is armed again (the same
    // entry: at worst written twice) unless this commit writes one of its own.
    let wake = wake.or_else(|| {
        rearm.map(|arm| WakeWrite {
            arm: Some(arm),
            drop: None,
        })
    });
    let results = apart::item_results(workflow, &record, &envelope.event);
    let after = apart::result_writes(run_key, &results)?;
    note(&mut record, &commands, now);
    // Copies of silent calls go out with the commands, but count as no new attempt.
    commands.extend(copies);
    let mut entry = history_entry(&mut record, envelope, stamp);
    if envelope.wake.is_some() {
        let keys: Vec<String> = fired
            .iter()
            .map(core::TimerId::key)
            .chain(checked.iter().map(|id| format!("check-{id}")))
            .collect();
        entry.detail = Some(match keys.is_empty() {
            true => "wake: no timer due".into(),
            false => format!("wake: {}", keys.join(", ")),
        });
    }
    let mut published = left;
    published.extend(history::hold(
        &mut record.history_held,
        record.state.status.is_terminal(),
        entry,
    ));
    record.outbox.push(OutboxEntry {
        seq: delivery.seq,
        at: now,
        commands: outbox::thin(&commands),
        results,
        history: None,
        spans: spans::for_outbox(&spans),
        wake: wake.clone(),
        group: Vec::new(),
        more_history: published.clone(),
        timers_in_wake: true,
    });
    // What the commit refers to goes first: items of a map that just started, outputs
    // kept apart.
    let before = apart::set_apart(&mut record, run_key, stamp.inline_limit)?;
    // In a group, only the record after the last event is stored: `plan_group` encodes it.
    let bytes = if keep_entry {
        Vec::new()
    } else {
        let bytes = apart::encode(&mut record)?;
        record.entry_bytes = bytes.len();
        bytes
    };
    record.held_bytes += before
        .iter()
        .chain(&after)
        .map(|w| w.bytes.len())
        .sum::<usize>();
    // Once carried out, this replica's copy needs the entry no more; KV keeps it until
    // the next commit, for a redelivery.
    if !keep_entry {
        record.outbox.pop();
    }
    let ended = record.state.status.is_terminal();
    Ok(Plan::Perform(Box::new(Steps {
        callers: record.callers(),
        before,
        commit: Some(Commit {
            revision,
            bytes,
            ends_run: ended,
            // A cancel kept for a run that never starts goes soon.
            unstarted: !record.state.started,
        }),
        after,
        commands,
        history: published,
        wake,
        legacy_timers: false,
        tidy: None,
        apart_for: apart_for(&record.state, now),
        ending: ended.then(|| ending(&record, run_key)).transpose()?,
        // A group commit goes on with the record, ended or not (see `group`).
        keep: (!ended || keep_entry).then_some(record),
        observed,
        spans,
    })))
}

/// What [`apply_events`] did.
struct Applied {
    /// The core's commands.
    commands: Vec<Command>,
    /// The timers a wake fired.
    fired: Vec<core::TimerId>,
    /// Copies of silent calls to send again.
    copies: Vec<Command>,
    /// The sub-task ids of the calls a wake checked.
    checked: Vec<String>,
    /// Whether the run's checks changed (armed, re-armed or dropped): the record must be
    /// committed even without a command.
    checks_moved: bool,
}

/// Applies the envelope's event to the run's state, keeping its pending timers and its
/// calls' checks in step; for a wake, `TimerFired` for every pending timer due by it
/// instead, earliest first (see `wake`), then the checks due by it (see `check`).
fn apply_events(
    workflow: &Workflow,
    record: &mut RunRecord,
    envelope: &Envelope,
    now: Millis,
    liveness: Liveness<'_>,
) -> Applied {
    // The calls to limited agents running before: those the event ends give their slot
    // back (see `gate`).
    let gated = gate::gated_calls(workflow, &record.state, liveness.limited);
    let Some(fired_wake) = envelope.wake else {
        let applied = core::apply(workflow, &mut record.state, envelope.event.clone(), now);
        // Slots given back first: a call the same event dispatches may take one.
        let mut commands = gate::releases(gated, &record.state);
        commands.extend(applied);
        if let Event::TimerFired { timer } = &envelope.event {
            // A timer of its own entry (armed before wakes existed) fired.
            record.timers.remove(&timer.key());
        }
        wake::track(&mut record.timers, &commands);
        let window = liveness.window;
        let checks_moved = check::track(&mut record.checks, &record.state, &commands, now, window);
        return Applied {
            commands,
            fired: Vec::new(),
            copies: Vec::new(),
            checked: Vec::new(),
            checks_moved,
        };
    };
    // The replica that fired the wake found it due by its clock; the core tolerates that
    // much skew (and ignores a timer fired earlier than that).
    let tolerated = now.0.saturating_add(core::TIMER_EARLY_TOLERANCE_MS);
    let cutoff = Millis(fired_wake.at.0.min(tolerated).max(now.0));
    let due = wake::take_due(&mut record.timers, cutoff);
    let mut commands = Vec::new();
    for timer in &due {
        let event = Event::TimerFired {
            timer: timer.clone(),
        };
        let out = core::apply(workflow, &mut record.state, event, now);
        wake::track(&mut record.timers, &out);
        commands.extend(out);
    }
    commands.splice(0..0, gate::releases(gated, &record.state));
    let window = liveness.window;
    let tracked = check::track(&mut record.checks, &record.state, &commands, now, window);
    let checks = &mut record.checks;
    let (copies, checked) = check::fire(workflow, &mut record.state, checks, cutoff, now, liveness);
    Applied {
        commands,
        fired: due,
        copies,
        checks_moved: tracked || !checked.is_empty(),
        checked,
    }
}

/// What happens to the keys beside an entry when its run ends.
fn ending(record: &RunRecord, run_key: &str) -> Result<Ending, serde_json::Error> {
    Ok(Ending {
        expire: apart::kept_apart(record, run_key)?,
        remove: if record.maps_apart {
            apart::map_key_patterns(run_key)
        } else {
            Vec::new()
        },
    })
}

/// How long what is written beside a run's entry is needed at least: until its deadline,
/// or, once it has ended, no longer than its entry (what the commit ending it writes, such
/// as its output's key, is not written again when it ends).
fn apart_for(state: &Execution, now: Millis) -> Millis {
    if state.status.is_terminal() {
        return Millis(0);
    }
    Millis(state.deadline.0.saturating_sub(now.0))
}

mod entries;
pub(in crate::shell) mod group;
pub(in crate::shell) use entries::replays;
use entries::{drop_settled, replay};
pub(in crate::shell) use group::plan_group;

#[cfg(test)]
mod tests;
