//! Unit tests of `plan`: every rule of an event's handling, without I/O.

use super::*;
use crate::core::{Dispatch, TaskKey};
use crate::shell::run::wake::PendingTimer;
use serde_json::json;

mod callers;

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

/// [`super::plan`] without traces, for the run keyed `k` whose id is [`execution`].
fn plan(
    workflow: &Workflow,
    loaded: Loaded,
    envelope: &Envelope,
    delivery: Delivery,
    stamp: Stamp<'_>,
) -> Result<Plan, serde_json::Error> {
    super::plan(
        workflow,
        "k",
        &execution(),
        loaded,
        envelope,
        delivery,
        stamp,
        false,
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
        definition: None,
        wake: None,
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

fn stamp(ms: u64) -> Stamp<'static> {
    Stamp {
        now: Millis(ms),
        replica: "r1",
        liveness: Liveness::off(),
        inline_limit: 256 * 1024,
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
    let s = steps(plan(wf, none(), &start(), first(1), stamp(0)).unwrap());
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
    let s = steps(plan(&wf, none(), &start(), first(7), stamp(5)).unwrap());
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
    let p = plan(&wf, none(), &succeeded(d.task), first(2), stamp(1));
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
    let p = plan(&wf, fresh(3, record.clone()), &stale, first(2), stamp(1));
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
    let p = plan(&wf, cached, &stale, first(2), stamp(1));
    assert!(matches!(p.unwrap(), Plan::Reload));
}

#[test]
fn a_result_is_committed_on_the_revision_read() {
    let wf = workflow();
    let (record, d) = started(&wf);
    let s = steps(
        plan(
            &wf,
            fresh(4, record),
            &succeeded(d.task),
            first(2),
            stamp(1),
        )
        .unwrap(),
    );
    let commit = s.commit.expect("a commit");
    assert_eq!(commit.revision, Some(4));
    let stored = decode(&commit.bytes);
    assert_eq!(stored.applied, 2, "the second event to change the run");
    let held: Vec<u64> = stored.history_held.iter().map(|h| h.n).collect();
    assert_eq!(held, [1, 2], "history entries are held in the record");
    assert!(
        s.history.is_empty(),
        "nothing published before 16 or the end"
    );
    assert!(stored.outbox.iter().all(|e| e.more_history.is_empty()));
    assert_eq!(stored.attempts.get("b"), Some(&1));
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
    let original = steps(plan(&wf, none(), &start(), first(1), stamp(0)).unwrap());
    let record = decode(&original.commit.expect("a commit").bytes);
    let again = Delivery {
        seq: 1,
        delivered: 2,
    };
    let s = steps(plan(&wf, fresh(1, record), &start(), again, stamp(9)).unwrap());
    assert!(s.commit.is_none(), "a replay commits nothing new");
    let tidy = s.tidy.as_ref().expect("the entry is removed afterwards");
    let held = decode(&tidy.bytes).history_held;
    assert_eq!(
        held.len(),
        1,
        "the start's history entry stays held in the record"
    );
    assert_eq!((held[0].n, held[0].event.as_str()), (1, "started"));
    assert_eq!(
        s.history, original.history,
        "what the entry published is published again, with the same numbers"
    );
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
fn a_stale_first_delivery_whose_entry_another_replica_committed_carries_it_out_again() {
    let wf = workflow();
    // The start, taken over from a replica cut off past the ack wait (a redelivery) and
    // committed by another, which then failed to carry its entry out.
    let original = steps(plan(&wf, none(), &start(), first(1), stamp(0)).unwrap());
    let record = decode(&original.commit.expect("a commit").bytes);
    // The cut-off replica's own (first) delivery comes through after the heal: applied
    // again it would change nothing and be acked, settling the entry unperformed.
    let s = steps(plan(&wf, fresh(1, record), &start(), first(1), stamp(9)).unwrap());
    assert!(s.commit.is_none(), "a replay commits nothing new");
    assert_eq!(s.commands, original.commands, "the entry is carried out");
    let tidy = s.tidy.expect("the entry is removed afterwards");
    assert!(decode(&tidy.bytes).outbox.is_empty());
}

#[test]
fn an_abandonment_is_applied_even_if_its_event_is_in_the_outbox() {
    let wf = workflow();
    let (record, _) = started(&wf);
    let (envelope, delivery) = abandoned(start(), first(1), "given up".into());
    let s = steps(plan(&wf, fresh(1, record), &envelope, delivery, stamp(1)).unwrap());
    let stored = decode(&s.commit.expect("the abandonment is committed").bytes);
    assert!(stored.state.status.is_terminal());
}

#[test]
fn a_settled_entry_that_armed_the_runs_wake_has_it_armed_again() {
    let wf = workflow();
    let (mut record, d) = started(&wf);
    // The start's entry armed the run's wake; its event was acked without the entry being
    // carried out (a stale delivery's ack), so the wake may never have been written.
    let armed = Wake {
        at: Millis(60_000),
        n: 1,
    };
    let deadline = PendingTimer {
        timer: core::TimerId::Deadline,
        at: Millis(60_000),
    };
    record
        .timers
        .insert(core::TimerId::Deadline.key(), deadline);
    record.wake = Some(armed);
    record.outbox[0].wake = Some(WakeWrite {
        arm: Some((armed, core::TimerId::Deadline)),
        drop: None,
    });
    let loaded = Loaded {
        settled: BTreeSet::from([1]),
        ..fresh(1, record)
    };
    let s = steps(plan(&wf, loaded, &succeeded(d.task), first(9), stamp(10)).unwrap());
    let write = s.wake.expect("the wake is written again");
    assert_eq!(write.arm, Some((armed, core::TimerId::Deadline)));
    assert_eq!(write.drop, None);
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
        history: None,
        spans: Vec::new(),
        wake: None,
        group: Vec::new(),
        more_history: Vec::new(),
        timers_in_wake: true,
    });
    let loaded = Loaded {
        settled: BTreeSet::from([1]),
        ..fresh(1, record)
    };
    let s = steps(plan(&wf, loaded, &succeeded(d.task), first(9), stamp(10)).unwrap());
    let stored = decode(&s.commit.expect("a commit").bytes);
    let seqs: Vec<u64> = stored.outbox.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        vec![5, 9],
        "the acked start's entry went, the others stay"
    );
}

#[test]
fn a_settled_entry_leaves_its_history_entries_to_the_commit_that_drops_it() {
    let wf = workflow();
    let (mut record, d) = started(&wf);
    // The entry of an event acked without being carried out (a frozen replica's late ack
    // while its history publish failed): its entries are in neither the record nor the
    // stream.
    let batch: Vec<HistoryEntry> = record.history_held.drain(..).collect();
    assert_eq!(batch.len(), 1, "the start's entry");
    record.outbox[0].more_history = batch.clone();
    let loaded = Loaded {
        settled: BTreeSet::from([1]),
        ..fresh(1, record)
    };
    let s = steps(plan(&wf, loaded, &succeeded(d.task), first(9), stamp(10)).unwrap());
    assert_eq!(s.history, batch, "published again with this commit");
    let stored = decode(&s.commit.expect("a commit").bytes);
    assert_eq!(stored.outbox.len(), 1);
    assert_eq!(stored.outbox[0].seq, 9);
    assert_eq!(
        stored.outbox[0].more_history, batch,
        "kept in this commit's entry until it is carried out"
    );
    let held: Vec<u64> = stored.history_held.iter().map(|h| h.n).collect();
    assert_eq!(held, [2], "this event's own entry is held as before");
}

#[test]
fn a_run_that_ends_is_not_cached() {
    let wf = workflow();
    let (record, a) = started(&wf);
    let s = steps(
        plan(
            &wf,
            fresh(1, record),
            &succeeded(a.task),
            first(2),
            stamp(1),
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
    let s = steps(plan(&wf, fresh(2, record), &succeeded(b), first(3), stamp(2)).unwrap());
    let stored = decode(&s.commit.expect("a commit").bytes);
    assert!(stored.state.status.is_terminal());
    assert!(s
        .commands
        .iter()
        .any(|c| matches!(c, Command::Finish { .. })));
    assert!(s.keep.is_none());
}

#[test]
fn traced_the_attempts_start_is_stored_and_its_end_planned_kept_and_replayed() {
    let wf = workflow();
    let traced = |loaded, env: &Envelope, d, t| {
        steps(super::plan(&wf, "k", &execution(), loaded, env, d, stamp(t), true).unwrap())
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
            fresh(1, record),
            &succeeded(a.task),
            first(2),
            stamp(1),
        )
        .unwrap(),
    );
    assert!(s.spans.is_empty());
    let stored = decode(&s.commit.expect("a commit").bytes);
    assert!(stored.call_times.is_empty());
    assert!(stored.outbox.iter().all(|e| e.spans.is_empty()));
}

#[test]
fn events_waiting_together_are_committed_once_with_one_outbox_entry_for_all() {
    let wf = workflow();
    let (record, a) = started(&wf);
    let b = TaskKey {
        node: "b".into(),
        ..a.task.clone()
    };
    let (ea, eb) = (succeeded(a.task.clone()), succeeded(b));
    let events = [(&ea, first(2)), (&eb, first(3))];
    let planned = plan_group(&wf, "k", fresh(1, record), &events, stamp(9), false);
    let s = steps(planned.unwrap().expect("a group"));
    let commit = s.commit.expect("one commit");
    assert_eq!(commit.revision, Some(1));
    assert!(commit.ends_run, "b's result ended the run");
    let stored = decode(&commit.bytes);
    let seqs: Vec<u64> = stored.outbox.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        [1, 2],
        "the start's entry (not settled) and one for the group"
    );
    let entry = &stored.outbox[1];
    assert_eq!(entry.group, [3]);
    let numbers: Vec<u64> = s.history.iter().map(|h| h.n).collect();
    assert_eq!(
        numbers,
        [1, 2, 3],
        "the run ended: every entry held so far is published, in order"
    );
    assert_eq!(entry.more_history, s.history, "kept for a replay");
    assert!(s
        .commands
        .iter()
        .any(|c| matches!(c, Command::Dispatch(d) if d.node_id == "b")));
    assert!(s
        .commands
        .iter()
        .any(|c| matches!(c, Command::Finish { .. })));

    // The second event, delivered again before the group was acked, replays the entry.
    let again = Delivery {
        seq: 3,
        delivered: 2,
    };
    let r = steps(plan(&wf, fresh(2, stored), &eb, again, stamp(10)).unwrap());
    assert!(r.commit.is_none(), "a replay commits nothing new");
    assert_eq!(r.history, s.history, "the group's history entries again");
    // All but b's dispatch: b's call ended in the group, so it is not sent again.
    assert_eq!(r.commands.len(), s.commands.len() - 1);
    assert!(r
        .commands
        .iter()
        .any(|c| matches!(c, Command::Finish { .. })));
}
