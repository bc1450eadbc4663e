//! Group commit, the driver's half (the plan's is `plan::group`): a worker takes every
//! event waiting in its queue, up to [`BATCH_MAX`], sorts them by run keeping their order
//! within a run, and commits the events of one run that may go together with one
//! compare-and-swap. The outbox and the acks follow, as for one event.

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::jetstream;

use crate::core::ExecutionId;
use crate::definition::Workflow;
use crate::shell::context::now;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Error, Result};
use crate::shell::run::check::Liveness;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::names;
use crate::shell::run::plan::{self, Delivery, Plan, Stamp};
use crate::shell::store::cache::RunCache;
use crate::shell::store::runs;
use crate::shell::worker::decode::decode;
use crate::shell::worker::effects::RunContext;
use crate::shell::worker::process::{load, perform, unknown_node, Known, MAX_CONFLICTS};

/// The most events a worker takes from its queue at once.
pub(in crate::shell) const BATCH_MAX: usize = 256;

/// `batch` (leases, runs, events) split by run: runs in the order of their first event,
/// events of a run in stream order.
pub(in crate::shell) fn by_run(
    batch: Vec<(u64, ExecutionId, jetstream::Message)>,
) -> Vec<(ExecutionId, Vec<(u64, jetstream::Message)>)> {
    let mut runs: Vec<(ExecutionId, Vec<(u64, jetstream::Message)>)> = Vec::new();
    let mut index: HashMap<ExecutionId, usize> = HashMap::new();
    for (lease, run, msg) in batch {
        match index.get(&run) {
            Some(&i) => runs[i].1.push((lease, msg)),
            None => {
                index.insert(run.clone(), runs.len());
                runs.push((run, vec![(lease, msg)]));
            }
        }
    }
    runs
}

/// Processes the events of one run in `run` with one commit. `None` when they cannot go
/// together (one is a start, a cancel, a redelivery, or cannot be read now; or the run has
/// no record): the worker then processes them one by one, as if never tried. Otherwise
/// whether spans were emitted, or why the group failed (its events are then given back).
pub(in crate::shell) async fn process(
    shared: &Arc<Shared>,
    workflow: &Arc<Workflow>,
    cache: &mut RunCache,
    run: &[(u64, jetstream::Message)],
) -> Option<Result<bool>> {
    let mut events: Vec<(Envelope, Delivery)> = Vec::with_capacity(run.len());
    let mut execution: Option<ExecutionId> = None;
    for (_, msg) in run {
        let (e, envelope) = match decode(shared, workflow, msg).await {
            Ok(Some(decoded)) => decoded,
            // Not an event (a status update, a refused message): acked with the group.
            Ok(None) => continue,
            Err(_) => return None,
        };
        let info = msg.info().ok()?;
        let delivery = Delivery {
            seq: info.stream_sequence,
            delivered: info.delivered,
        };
        if !plan::group::groupable(&envelope, delivery) || execution.get_or_insert(e.clone()) != &e
        {
            return None;
        }
        events.push((envelope, delivery));
    }
    let execution = execution?;
    if events.len() < 2 {
        return None;
    }
    let key = names::run_key(&workflow.name, &execution);
    let mut cached = cache.take(&execution).map(Known::cached);
    let traced = agent_sdk::telemetry::active();
    for _ in 0..MAX_CONFLICTS {
        let (first, first_delivery) = (&events[0].0, events[0].1);
        let loaded = load(shared, workflow, &key, cached.take(), first, first_delivery).await;
        let (mut loaded, run_workflow) = match loaded {
            Ok(l) => l,
            Err(e) => return Some(Err(e)),
        };
        let wf = &*run_workflow;
        if events
            .iter()
            .any(|(e, _)| unknown_node(wf, &e.event).is_some())
        {
            return None;
        }
        if let Some(record) = loaded.record.as_mut() {
            // Any of them may end a map kept apart: its results are read first.
            let ahead = u32::try_from(events.len()).unwrap_or(u32::MAX);
            for (envelope, _) in &events {
                let event = &envelope.event;
                let got = runs::load_results(shared, wf, &key, record, event, ahead).await;
                if let Err(e) = got {
                    return Some(Err(e));
                }
            }
        }
        let refs: Vec<(&Envelope, Delivery)> = events.iter().map(|(e, d)| (e, *d)).collect();
        let heard = |id: &str| shared.signs.heard(id);
        let limited = |agent: &str| shared.gates.limits(agent).is_some();
        let limited: Option<&dyn Fn(&str) -> bool> = shared.gates.any().then_some(&limited);
        let stamp = Stamp {
            now: now(),
            replica: &shared.replica,
            liveness: Liveness {
                window: shared.config.call_check,
                heard: &heard,
                limited,
            },
            inline_limit: shared.config.inline_limit,
        };
        let planned = plan::plan_group(wf, &key, loaded, &refs, stamp, traced)
            .context(|| format!("planning events of run {execution}"));
        match planned {
            Err(e) => return Some(Err(e)),
            Ok(None) => return None,
            Ok(Some(Plan::Reload)) => continue,
            Ok(Some(Plan::Ack { keep })) => {
                if let Some((rev, kept)) = keep {
                    cache.keep(execution.clone(), rev, *kept);
                }
                return Some(Ok(false));
            }
            Ok(Some(Plan::Perform(mut steps))) => {
                let emits = !steps.spans.is_empty();
                let callers = std::mem::take(&mut steps.callers);
                let ctx = RunContext {
                    shared,
                    workflow: wf,
                    execution: &execution,
                    callers: &callers,
                };
                match perform(&ctx, &key, *steps).await {
                    Err(e) => return Some(Err(e)),
                    Ok(None) => continue,
                    Ok(Some(held)) => {
                        // A group's tail is finished here: its events are acked together.
                        if let Some(tail) = held.tail {
                            if let Err(e) = tail.finish().await {
                                return Some(Err(e));
                            }
                        }
                        if let Some((rev, kept)) = held.keep {
                            cache.keep(execution.clone(), rev, kept);
                        }
                        return Some(Ok(emits));
                    }
                }
            }
        }
    }
    Some(Err(Error::ConflictsExhausted {
        execution,
        tries: MAX_CONFLICTS,
    }))
}
