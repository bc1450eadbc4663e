//! One event, start to commit: decode it, load its run (from the worker's cache or KV),
//! plan, and perform the plan's steps until a commit holds. The group commit
//! (`worker::group`) uses the same load and perform for several events of one run.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;

use crate::core::{Event, ExecutionId};
use crate::definition::Workflow;
use crate::shell::context::now;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Error, Result};
use crate::shell::run::check::Liveness;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::names;
use crate::shell::run::plan::{self, Delivery, Loaded, Plan, Stamp, Steps};
use crate::shell::run::record::RunRecord;
use crate::shell::store::cache::RunCache;
use crate::shell::store::{self, runs};
use crate::shell::worker::decode::decode;
use crate::shell::worker::effects::RunContext;
use crate::shell::worker::tail::Tail;

/// Compare-and-swap attempts on one event before it is given back to the stream.
pub(in crate::shell) const MAX_CONFLICTS: usize = 64;

/// The whole path of one event: decode it, then load its run, plan, and perform the plan,
/// until a commit holds (or the plan needs none). Whether it emits spans, and its tail
/// when one is left to finish.
pub(in crate::shell) async fn process(
    shared: &Arc<Shared>,
    workflow: &Arc<Workflow>,
    cache: &mut RunCache,
    msg: &jetstream::Message,
    abandon: Option<String>,
) -> Result<(bool, Option<Tail>)> {
    let Some((execution, envelope)) = decode(shared, workflow, msg).await? else {
        return Ok((false, None));
    };
    let (envelope, delivery) = delivered(msg, envelope, abandon)?;
    let key = names::run_key(&workflow.name, &execution);
    let mut cached = known(cache, &execution, &envelope, delivery);
    let traced = agent_sdk::telemetry::active();
    for _ in 0..MAX_CONFLICTS {
        let guessed = matches!(cached, Some(Known::New));
        let (loaded, run_workflow) =
            load(shared, workflow, &key, cached.take(), &envelope, delivery).await?;
        let workflow = &*run_workflow;
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
        let planned = plan::plan(
            workflow, &key, &execution, loaded, &envelope, delivery, stamp, traced,
        );
        match planned? {
            // A guess that the run is new is only acted on as a plain creation: anything
            // else (dropping the event, or writing beside an entry that may exist, such as a
            // large input) is planned again from what KV holds.
            Plan::Ack { .. } if guessed => continue,
            Plan::Perform(steps) if guessed && !steps.before.is_empty() => continue,
            Plan::Ack { keep } => {
                if let Some((rev, kept)) = keep {
                    cache.keep(execution.clone(), rev, *kept);
                }
                return Ok((false, None));
            }
            Plan::Reload => continue,
            Plan::Perform(mut steps) => {
                let emits = !steps.spans.is_empty();
                let callers = std::mem::take(&mut steps.callers);
                let ctx = RunContext {
                    shared,
                    workflow,
                    execution: &execution,
                    callers: &callers,
                };
                if let Some(held) = perform(&ctx, &key, *steps).await? {
                    if let Some((rev, kept)) = held.keep {
                        cache.keep(execution.clone(), rev, kept);
                    }
                    return Ok((emits, held.tail));
                }
            }
        }
    }
    Err(Error::ConflictsExhausted {
        execution,
        tries: MAX_CONFLICTS,
    })
}

/// An event as it is to be applied, and its delivery: the run's abandonment instead, when
/// `abandon` gives a reason.
fn delivered(
    msg: &jetstream::Message,
    envelope: Envelope,
    abandon: Option<String>,
) -> Result<(Envelope, Delivery)> {
    let info = msg
        .info()
        .context(|| "reading an event's delivery info".into())?;
    let delivery = Delivery {
        seq: info.stream_sequence,
        delivered: info.delivered,
    };
    Ok(match abandon {
        Some(reason) => plan::abandoned(envelope, delivery, reason),
        None => (envelope, delivery),
    })
}

/// What the worker knows of an event's run before reading KV: its cached copy, or (for a
/// first start, see [`starts_a_run`]) that it is new: that start's commit creates the entry,
/// and fails if the run exists after all (a cancel that came first, say), and it is then
/// planned again from what KV holds.
fn known(
    cache: &mut RunCache,
    execution: &ExecutionId,
    envelope: &Envelope,
    delivery: Delivery,
) -> Option<Known> {
    let cached = cache.take(execution).map(Known::cached);
    if cached.is_none() && starts_a_run(envelope, delivery) {
        return Some(Known::New);
    }
    cached
}

/// What a worker knows of a run before reading KV.
pub(in crate::shell) enum Known {
    /// Its copy in the cache: the revision it was committed at, and the record.
    Cached(u64, Box<RunRecord>),
    /// It has no entry yet (a first start, see [`starts_a_run`]).
    New,
}

impl Known {
    /// A run's cached copy.
    pub(in crate::shell) fn cached((revision, record): (u64, RunRecord)) -> Known {
        Known::Cached(revision, Box::new(record))
    }
}

/// Whether an event is the first delivery of a run's start (not a caller joining): its run
/// has no entry yet, but for a cancel or a caller that came first.
fn starts_a_run(envelope: &Envelope, delivery: Delivery) -> bool {
    matches!(envelope.event, Event::Started { .. }) && !envelope.attach && delivery.delivered == 1
}

/// The run of an event, from this worker's cache or KV, with what the event needs in
/// place: the definition the run started with (the one this replica serves, or the one the
/// run names), the results of a map it may end, and which outbox entries are settled. An
/// event naming a node that definition does not have is an error that fails the run.
pub(in crate::shell) async fn load(
    shared: &Shared,
    current: &Arc<Workflow>,
    key: &str,
    known: Option<Known>,
    envelope: &Envelope,
    delivery: Delivery,
) -> Result<(Loaded, Arc<Workflow>)> {
    let mut loaded = match known {
        Some(Known::Cached(revision, record)) => Loaded {
            revision: Some(revision),
            record: Some(*record),
            from_cache: true,
            settled: Default::default(),
        },
        Some(Known::New) => Loaded {
            revision: None,
            record: None,
            from_cache: false,
            settled: Default::default(),
        },
        None => runs::load(shared, key).await?,
    };
    // A run names its definition; a start names the one its request resolved.
    let named = match loaded.record.as_ref() {
        Some(record) => record.definition.as_deref(),
        None => envelope.definition.as_deref(),
    };
    let workflow = match shared.versions.for_run(current, named).await {
        Ok(workflow) => workflow,
        // A run abandoned for want of its definition still ends, with the one served here.
        Err(e) if matches!(envelope.event, Event::Abandoned { .. }) => {
            tracing::warn!("{key}: {e}; failing the run with the definition served here");
            current.clone()
        }
        Err(e) => return Err(e),
    };
    if let Some(node) = unknown_node(&workflow, &envelope.event) {
        return Err(Error::Definition(format!(
            "{key}: an event names node '{node}', which the run's definition ({} version {}, {}) does not have",
            workflow.name, workflow.version, workflow.hash
        )));
    }
    if let Some(record) = loaded.record.as_mut() {
        if !plan::replays(record, delivery) {
            runs::load_results(shared, &workflow, key, record, &envelope.event, 1).await?;
            loaded.settled = runs::settled(shared, &workflow.name, record, delivery.seq).await?;
        }
    }
    Ok((loaded, workflow))
}

/// The node an agent's answer or a decision names, when `workflow` has no such node.
pub(in crate::shell) fn unknown_node<'e>(workflow: &Workflow, event: &'e Event) -> Option<&'e str> {
    let node = match event {
        Event::CallSucceeded { task, .. } | Event::CallFailed { task, .. } => &task.node,
        Event::ApprovalDecided { node, .. } => node,
        _ => return None,
    };
    workflow.node(node).is_none().then_some(node.as_str())
}

/// What [`perform`] did when its commit held: what to cache, and the event's tail, when it
/// was left for the caller to finish (see `tail`).
pub(in crate::shell) struct Held {
    pub(in crate::shell) keep: Option<(u64, RunRecord)>,
    pub(in crate::shell) tail: Option<Tail>,
}

/// Performs `steps` in order (see `plan`) up to the commands; the tail is left to the
/// caller, unless a tidy commit (whose revision is what to cache) makes it part of this.
/// `None`: the commit lost to another replica's, nothing was carried out.
pub(in crate::shell) async fn perform(
    ctx: &RunContext<'_>,
    key: &str,
    steps: Steps,
) -> Result<Option<Held>> {
    let (shared, execution) = (ctx.shared, ctx.execution);
    let ttl = Duration::from_millis(steps.apart_for.0) + shared.config.retention;
    runs::start_puts(shared, steps.before, ttl)
        .await?
        .stored()
        .await?;
    let mut revision = None;
    if let Some(commit) = steps.commit {
        let Some(rev) = runs::cas(shared, execution, key, commit).await? else {
            shared.metrics.cas_conflict(&ctx.workflow.name);
            return Ok(None);
        };
        revision = Some(rev);
        // Counted once: only the commit that holds records what it did.
        shared.metrics.observed(&ctx.workflow.name, &steps.observed);
    }
    let after = runs::start_puts(shared, steps.after, ttl).await?;
    let wake = match &steps.wake {
        Some(write) => ctx.write_wake(write).await?,
        None => None,
    };
    let history =
        store::history::publish(shared, &ctx.workflow.name, execution, &steps.history).await?;
    ctx.carry_out(&steps.commands, steps.legacy_timers)
        .await
        .context(|| format!("carrying out the commands of run {execution}"))?;
    let tidied = steps.tidy.is_some();
    let tail = Tail {
        shared: shared.clone(),
        execution: execution.clone(),
        key: key.to_string(),
        after,
        wake,
        history,
        tidy: steps.tidy,
        ending: steps.ending,
        spans: steps.spans,
        traceparent: ctx.callers.first().and_then(|c| c.traceparent.clone()),
    };
    if tidied {
        revision = tail.finish().await?;
        return Ok(Some(Held {
            keep: revision.zip(steps.keep),
            tail: None,
        }));
    }
    Ok(Some(Held {
        keep: revision.zip(steps.keep),
        tail: Some(tail),
    }))
}
