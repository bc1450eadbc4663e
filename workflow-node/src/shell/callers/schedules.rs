//! A workflow's schedules, changed by operators and carried out by any replica.
//!
//! `workflow_schedule_control` (a `message/send` on the workflow's request subject) adds,
//! pauses, resumes, deletes or triggers one schedule. When the node has operator keys
//! (`serve --operator-key`), only a request signed by one of them is taken; a node without
//! any (a local mesh with no identities) takes any. Each change is one compare-and-swap
//! of the schedule's entry (`store::schedules`), tried again when another write came first.
//!
//! [`carry_out`] does what a committed look decided (`run::schedule::look`): it starts a
//! slot's run through the one start path (`start::publish_start`, the input checked by
//! `start::check_input`), with an execution id derived from the workflow, the caller
//! name `schedule:{name}` and the slot, so that replicas carrying out one slot make one run;
//! and it cancels a run for `cancel_other`. Then it clears the work from the entry.

use messages::control::{ScheduleControl, WorkflowScheduleControl};
use messages::msg_id;
use serde_json::Value;

use crate::core::{Event, ExecutionId};
use crate::definition::{parse_schedule, Schedule, Workflow};
use crate::shell::callers::identity;
use crate::shell::callers::start::{check_input, publish_start};
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::envelope::{Caller, Envelope};
use crate::shell::run::names;
use crate::shell::run::schedule::{caller_name, slot_task, Action, Added, ScheduleState};
use crate::shell::store::events::publish_event;
use crate::shell::store::schedules::{self as entries, Entry};

/// How many times a change is tried against other writes before it gives up.
const CAS_TRIES: usize = 16;

/// The schedule `name` of `workflow`: declared in its file, else added (read from its
/// entry); `None` when neither.
pub(in crate::shell) fn schedule_of(
    workflow: &Workflow,
    name: &str,
    state: Option<&ScheduleState>,
) -> Option<Schedule> {
    if let Some(s) = workflow.schedules.iter().find(|s| s.name == name) {
        return Some(s.clone());
    }
    let added = state?.added.as_ref()?;
    parse_schedule(&added.spec).ok()
}

/// The execution id of the run a schedule's slot starts.
pub(in crate::shell) fn slot_execution(
    workflow: &str,
    schedule: &str,
    slot: u64,
    manual: bool,
) -> ExecutionId {
    let caller = caller_name(schedule);
    names::caller_execution_id(workflow, Some(&caller), &slot_task(slot, manual))
}

/// Applies one `workflow_schedule_control` at `now` (Unix milliseconds); the answer's
/// text, or why not.
pub(in crate::shell) async fn control(
    shared: &Shared,
    workflow: &Workflow,
    msg: &async_nats::Message,
    c: WorkflowScheduleControl,
    now: u64,
) -> std::result::Result<String, String> {
    let what = format!("schedules of {} are changed", workflow.name);
    let signer = identity::operator_only(shared, msg, &what).await?;
    let key = names::schedule_key(&workflow.name, &c.schedule);
    for _ in 0..CAS_TRIES {
        let entry = entries::read(&shared.schedules, &key)
            .await
            .map_err(|e| e.to_string())?;
        match change(workflow, &c, &entry, signer.as_deref(), now)? {
            Change::Write(state, answer) => {
                let written =
                    entries::write(&shared.js, &shared.schedules, &key, &state, entry.revision)
                        .await
                        .map_err(|e| e.to_string())?;
                if let Some(revision) = written {
                    if c.action == ScheduleControl::Trigger {
                        let schedule = schedule_of(workflow, &c.schedule, Some(&state));
                        if let Some(schedule) = schedule {
                            let entry = Entry {
                                revision,
                                state: Some(*state),
                            };
                            carry_out(shared, workflow, &schedule, &key, entry).await;
                        }
                    }
                    return Ok(answer);
                }
            }
            Change::Remove(answer) => {
                let removed = entries::remove(&shared.schedules, &key, entry.revision)
                    .await
                    .map_err(|e| e.to_string())?;
                if removed {
                    return Ok(answer);
                }
            }
        }
    }
    Err(format!(
        "schedule '{}' changed under this request {CAS_TRIES} times: try again",
        c.schedule
    ))
}

/// What a control does to an entry.
enum Change {
    /// Write this state; answer this.
    Write(Box<ScheduleState>, String),
    /// Remove the entry; answer this.
    Remove(String),
}

/// The change `c` makes to `entry` (pure), or why it cannot.
fn change(
    workflow: &Workflow,
    c: &WorkflowScheduleControl,
    entry: &Entry,
    signer: Option<&str>,
    now: u64,
) -> std::result::Result<Change, String> {
    let name = &c.schedule;
    let wf = &workflow.name;
    let declared = workflow.schedules.iter().find(|s| &s.name == name);
    let added = entry.state.as_ref().and_then(|s| s.added.as_ref());
    let fresh = |paused| ScheduleState {
        last_slot: now,
        paused,
        ..ScheduleState::default()
    };
    if c.action == ScheduleControl::Add {
        if declared.is_some() || added.is_some() {
            return Err(format!("{wf} already has a schedule '{name}'"));
        }
        let mut spec = c.spec.clone().ok_or("an add needs the schedule's fields")?;
        if let Some(obj) = spec.as_object_mut() {
            obj.insert("name".into(), Value::String(name.clone()));
        }
        let schedule = parse_schedule(&spec).map_err(|problems| {
            let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            format!("the schedule is refused: {}", text.join("; "))
        })?;
        let state = ScheduleState {
            added: Some(Added {
                spec,
                by: signer.map(str::to_string),
            }),
            ..fresh(schedule.paused)
        };
        return Ok(Change::Write(
            Box::new(state),
            format!("schedule '{name}' of {wf} added"),
        ));
    }
    if declared.is_none() && added.is_none() {
        return Err(format!("{wf} has no schedule '{name}'"));
    }
    let paused = declared.is_some_and(|d| d.paused);
    let mut state = entry.state.clone().unwrap_or_else(|| fresh(paused));
    let answer = match c.action {
        ScheduleControl::Add => unreachable!("handled above"),
        ScheduleControl::Delete if declared.is_some() => {
            return Err(format!(
                "schedule '{name}' is declared in the file of {wf}: remove it there, or pause it"
            ))
        }
        ScheduleControl::Delete => {
            return Ok(Change::Remove(format!("schedule '{name}' of {wf} deleted")))
        }
        ScheduleControl::Pause | ScheduleControl::Resume => {
            let pause = c.action == ScheduleControl::Pause;
            if state.paused == pause {
                let is = if pause {
                    "already paused"
                } else {
                    "not paused"
                };
                return Err(format!("schedule '{name}' of {wf} is {is}"));
            }
            state.paused = pause;
            state.note = c.note.clone();
            if !pause {
                // Resumed slots start from now: the ones passed while paused are not due.
                state.last_slot = state.last_slot.max(now);
            }
            format!("schedule '{name}' of {wf} {}d", c.action.as_str())
        }
        ScheduleControl::Trigger => {
            state.pending.push(Action::Start {
                slot: now,
                manual: true,
            });
            let execution = slot_execution(wf, name, now, true);
            format!("schedule '{name}' of {wf} triggered: run {execution}")
        }
    };
    Ok(Change::Write(Box::new(state), answer))
}

/// Carries out the work `entry` holds for `schedule`, then clears it from the entry (if
/// no other write came first: the work is then someone else's, and done twice is done
/// once). A start that cannot be made (its input is refused) is recorded as the
/// schedule's last error and dropped; one that fails for the store stays for the next look.
pub(in crate::shell) async fn carry_out(
    shared: &Shared,
    workflow: &Workflow,
    schedule: &Schedule,
    key: &str,
    entry: Entry,
) {
    let Some(mut state) = entry.state else {
        return;
    };
    let mut kept = Vec::new();
    for action in std::mem::take(&mut state.pending) {
        match act(shared, workflow, schedule, &state, &action).await {
            Ok(Acted::Started(execution)) => {
                state.running = Some(execution.0);
                state.counts.started += 1;
                state.last_error = None;
            }
            Ok(Acted::Cancelled) => {}
            Err(Failed::Refused(why)) => {
                tracing::warn!(schedule = %key, "a slot starts no run: {why}");
                state.last_error = Some(why);
            }
            Err(Failed::Store(e)) => {
                tracing::warn!(schedule = %key, "carrying out a slot failed (tried again): {e}");
                kept.push(action);
            }
        }
    }
    state.pending = kept;
    let written = entries::write(&shared.js, &shared.schedules, key, &state, entry.revision).await;
    if let Err(e) = written {
        tracing::warn!(schedule = %key, "clearing a schedule's done work failed: {e}");
    }
}

/// What one action did.
enum Acted {
    Started(ExecutionId),
    Cancelled,
}

/// Why one action did not happen.
enum Failed {
    /// For good (the input is refused).
    Refused(String),
    /// For now (the store).
    Store(crate::shell::Error),
}

async fn act(
    shared: &Shared,
    workflow: &Workflow,
    schedule: &Schedule,
    state: &ScheduleState,
    action: &Action,
) -> std::result::Result<Acted, Failed> {
    match action {
        Action::Start { slot, manual } => {
            let input = schedule
                .input_for(*slot, *manual)
                .map_err(Failed::Refused)?;
            check_input(workflow, &input).map_err(Failed::Refused)?;
            let execution = slot_execution(&workflow.name, &schedule.name, *slot, *manual);
            let caller = Caller {
                request_id: Value::String(slot_task(*slot, *manual)),
                name: Some(caller_name(&schedule.name)),
                signer: state.added.as_ref().and_then(|a| a.by.clone()),
                ..Caller::default()
            };
            publish_start(shared, workflow, &execution, &caller, input)
                .await
                .map_err(Failed::Store)?;
            Ok(Acted::Started(execution))
        }
        Action::Cancel { execution } => {
            let Ok(execution) = ExecutionId::parse(execution) else {
                return Ok(Acted::Cancelled);
            };
            cancel(shared, workflow, &schedule.name, &execution)
                .await
                .map_err(Failed::Store)?;
            Ok(Acted::Cancelled)
        }
    }
}

/// Asks run `execution` to stop, for `cancel_other`.
async fn cancel(
    shared: &Shared,
    workflow: &Workflow,
    schedule: &str,
    execution: &ExecutionId,
) -> Result<()> {
    let reason = format!("schedule '{schedule}' started the next run (overlap: cancel_other)");
    let envelope = Envelope::event(Event::CancelRequested {
        reason: Some(reason),
    });
    let msg_id = msg_id::run_cancel(&execution.0, None);
    publish_event(shared, &workflow.name, execution, &msg_id, &envelope).await?;
    Ok(())
}
