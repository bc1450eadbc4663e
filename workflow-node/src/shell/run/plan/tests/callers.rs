//! Unit tests of `plan` for callers: a request sent again (from the same address or
//! another, to a running or an ended run), a second start, and cancels that overtake the
//! start or come from another identity than the start's.

use super::*;

#[test]
fn a_request_resent_from_the_same_address_changes_nothing() {
    let wf = workflow();
    let (record, _) = started(&wf);
    let p = plan(
        &wf,
        fresh(1, record),
        &resent("inbox.first"),
        first(2),
        stamp(1),
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
            fresh(1, record),
            &resent("inbox.second"),
            first(2),
            stamp(1),
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
            fresh(2, stored),
            &succeeded(a.task),
            first(3),
            stamp(2),
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
            fresh(5, record),
            &resent("inbox.late"),
            first(6),
            stamp(1),
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
fn a_second_start_of_a_started_run_changes_nothing_its_caller_joins_by_an_attach() {
    let wf = workflow();
    let (record, _) = started(&wf);
    let other = Caller {
        reply_to: Some("inbox.other".into()),
        ..Caller::default()
    };
    let again = Envelope {
        caller: Some(other.clone()),
        ..start()
    };
    // The request handler published it before finding the run: it attaches the caller
    // itself, if the caller may see the run.
    let p = plan(&wf, fresh(1, record.clone()), &again, first(2), stamp(1));
    assert!(
        matches!(p.unwrap(), Plan::Ack { .. }),
        "a start sent again changes nothing"
    );
    let attach = Envelope {
        caller: Some(other),
        attach: true,
        ..start()
    };
    let s = steps(plan(&wf, fresh(1, record), &attach, first(3), stamp(1)).unwrap());
    assert_eq!(decode(&s.commit.expect("a commit").bytes).attached.len(), 1);
}

#[test]
fn a_cancel_that_overtakes_the_start_is_kept_and_ends_the_run_for_its_caller() {
    let wf = workflow();
    let cancel = Envelope::event(Event::CancelRequested { reason: None });
    let s = steps(plan(&wf, none(), &cancel, first(1), stamp(0)).unwrap());
    let commit = s.commit.expect("the cancel is kept in a record");
    assert!(
        commit.unstarted && !commit.ends_run,
        "a kept cancel expires soon if its run never starts"
    );
    let kept = decode(&commit.bytes);
    assert!(!kept.state.started && kept.state.cancel_requested);
    let s = steps(plan(&wf, fresh(1, kept), &start(), first(2), stamp(1)).unwrap());
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
fn a_kept_cancel_from_another_identity_than_the_start_is_dropped() {
    let wf = workflow();
    // Kept unsigned, for a start signed by a key: another identity (see `identity`).
    let cancel = Envelope::event(Event::CancelRequested { reason: None });
    let s = steps(plan(&wf, none(), &cancel, first(1), stamp(0)).unwrap());
    let kept = decode(&s.commit.expect("kept").bytes);
    let signed = Envelope {
        caller: Some(Caller {
            reply_to: Some("inbox.first".into()),
            signer: Some("UOWNER".into()),
            ..Caller::default()
        }),
        ..start()
    };
    let s = steps(plan(&wf, fresh(1, kept), &signed, first(2), stamp(1)).unwrap());
    assert!(
        s.commands.iter().any(|c| matches!(c, Command::Dispatch(_))),
        "the run goes on: {:?}",
        s.commands
    );
    let record = decode(&s.commit.expect("a commit").bytes);
    assert!(record.state.started && !record.state.cancel_requested);
    assert_eq!(record.caller.signer.as_deref(), Some("UOWNER"));
    // Kept with the start's own key: it holds.
    let by_owner = Envelope {
        caller: Some(Caller {
            signer: Some("UOWNER".into()),
            ..Caller::default()
        }),
        ..cancel
    };
    let s = steps(plan(&wf, none(), &by_owner, first(1), stamp(0)).unwrap());
    let kept = decode(&s.commit.expect("kept").bytes);
    let s = steps(plan(&wf, fresh(1, kept), &signed, first(2), stamp(1)).unwrap());
    assert!(!s.commands.iter().any(|c| matches!(c, Command::Dispatch(_))));
}

#[test]
fn an_unchecked_cancel_after_the_start_holds_only_for_the_starts_identity() {
    let wf = workflow();
    let signed = Envelope {
        caller: Some(Caller {
            reply_to: Some("inbox.first".into()),
            signer: Some("UOWNER".into()),
            ..Caller::default()
        }),
        ..start()
    };
    let s = steps(plan(&wf, none(), &signed, first(1), stamp(0)).unwrap());
    let record = decode(&s.commit.expect("a commit").bytes);
    let from = |signer: Option<&str>| Envelope {
        caller: Some(Caller {
            signer: signer.map(String::from),
            ..Caller::default()
        }),
        ..Envelope::event(Event::CancelRequested { reason: None })
    };
    let ends = |env: &Envelope| {
        let p = plan(&wf, fresh(1, record.clone()), env, first(2), stamp(1));
        match p.unwrap() {
            Plan::Perform(s) => s
                .commands
                .iter()
                .any(|c| matches!(c, Command::Finish { .. })),
            _ => false,
        }
    };
    assert!(!ends(&from(None)), "another identity's cancel is ignored");
    assert!(
        !ends(&from(Some("UOTHER"))),
        "another key's cancel is ignored"
    );
    assert!(
        ends(&from(Some("UOWNER"))),
        "the start's key's cancel ends the run"
    );
    // A cancel checked where it was taken (no sender in the event) is applied as it comes.
    assert!(ends(&Envelope::event(Event::CancelRequested {
        reason: None
    })));
}
