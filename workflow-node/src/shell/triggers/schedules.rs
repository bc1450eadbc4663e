//! The schedule loop of a replica: every [`TICK`], for each schedule of each workflow it
//! serves (declared in the file, or added by an operator), read its entry, carry out work
//! a look left in it, else look (`run::schedule::look`) and commit what the look decided
//! by compare-and-swap, then carry it out (`callers::schedules::carry_out`). A replica
//! that loses the compare-and-swap does nothing: another one decided that slot.
//!
//! A declared schedule gets its entry on the first look, with its first slot after that
//! moment: a new schedule does not start the past. Entries of schedules a file no longer
//! declares are left alone (a `schedules list` shows them; nothing starts from them).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::definition::Workflow;
use crate::shell::callers::schedules::{carry_out, schedule_of};
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::names;
use crate::shell::run::schedule::{look, ScheduleState};
use crate::shell::store::runs;
use crate::shell::store::schedules::{self as entries, Entry};
use crate::shell::triggers::clock;

/// How often a replica looks at its schedules: a slot starts within about this of its
/// time (plus its jitter).
pub(in crate::shell) const TICK: Duration = Duration::from_millis(500);

/// How many ticks between two listings of the schedules operators added.
const LIST_EVERY: u32 = 10;

/// Looks at the schedules of `served` every [`TICK`], until the task is stopped.
pub(in crate::shell) async fn run(shared: Arc<Shared>, served: Vec<Arc<Workflow>>) {
    let mut added: Vec<BTreeSet<String>> = vec![BTreeSet::new(); served.len()];
    let mut ticks = 0u32;
    loop {
        for (workflow, added) in served.iter().zip(added.iter_mut()) {
            if ticks.is_multiple_of(LIST_EVERY) {
                match entries::names(&shared.schedules, &workflow.name).await {
                    Ok(names) => *added = names.into_iter().collect(),
                    Err(e) => tracing::debug!("listing schedules of {}: {e}", workflow.name),
                }
            }
            let declared = workflow.schedules.iter().map(|s| s.name.clone());
            let all: BTreeSet<String> = declared.chain(added.iter().cloned()).collect();
            for name in all {
                if let Err(e) = look_once(&shared, workflow, &name).await {
                    tracing::warn!("schedule {name} of {}: {e}", workflow.name);
                }
            }
        }
        ticks = ticks.wrapping_add(1);
        tokio::time::sleep(TICK).await;
    }
}

/// One look at schedule `name` of `workflow`.
async fn look_once(shared: &Shared, workflow: &Workflow, name: &str) -> Result<()> {
    let key = names::schedule_key(&workflow.name, name);
    let entry = entries::read(&shared.schedules, &key).await?;
    let now = clock::now_ms();
    let Some(schedule) = schedule_of(workflow, name, entry.state.as_ref()) else {
        return Ok(());
    };
    let Some(state) = &entry.state else {
        let first = ScheduleState {
            last_slot: now,
            paused: schedule.paused,
            declared: declared(workflow, name),
            ..ScheduleState::default()
        };
        entries::write(&shared.js, &shared.schedules, &key, &first, entry.revision).await?;
        return Ok(());
    };
    if state.added.is_none() && state.declared != declared(workflow, name) {
        let current = ScheduleState {
            declared: declared(workflow, name),
            ..state.clone()
        };
        entries::write(
            &shared.js,
            &shared.schedules,
            &key,
            &current,
            entry.revision,
        )
        .await?;
        return Ok(());
    }
    if !state.pending.is_empty() {
        carry_out(shared, workflow, &schedule, &key, entry).await;
        return Ok(());
    }
    let running = match &state.running {
        Some(execution) => still_running(shared, workflow, execution).await?,
        None => false,
    };
    let Some(next) = look(&schedule, state, now, running) else {
        return Ok(());
    };
    let written =
        entries::write(&shared.js, &shared.schedules, &key, &next, entry.revision).await?;
    if let Some(revision) = written.filter(|_| !next.pending.is_empty()) {
        let entry = Entry {
            revision,
            state: Some(next),
        };
        carry_out(shared, workflow, &schedule, &key, entry).await;
    }
    Ok(())
}

/// The schedule `name` as `workflow`'s file writes it, if it declares it.
fn declared(workflow: &Workflow, name: &str) -> Option<serde_json::Value> {
    let s = workflow.schedules.iter().find(|s| s.name == name)?;
    Some(s.source.clone())
}

/// Whether run `execution` has not ended. A run without a record has ended (its start
/// was refused, or it was removed after the retention) or is about to begin: counted as
/// ended, so that a lost run never holds a schedule back.
async fn still_running(shared: &Shared, workflow: &Workflow, execution: &str) -> Result<bool> {
    let Ok(execution) = crate::core::ExecutionId::parse(execution) else {
        return Ok(false);
    };
    let key = names::run_key(&workflow.name, &execution);
    Ok(runs::read_record(shared, &key)
        .await?
        .is_some_and(|(_, record)| !record.state.status.is_terminal()))
}
