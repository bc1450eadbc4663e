//! Event processing: one durable pull consumer per workflow, shared by every replica.
//!
//! Each event: load the run (from this worker's cache, or KV), apply it, commit the new
//! state and the resulting commands (the outbox) with compare-and-swap, carry the commands
//! out, then ack. A conflict means another replica moved first: reload and apply again. A
//! redelivered event whose commands are still in the outbox (its replica died between the
//! commit and the ack) has them carried out again instead of being re-applied.
//!
//! Events of one run go to one worker task (by hash), so a replica never races itself.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy};
use async_nats::jetstream::kv::{CreateErrorKind, UpdateErrorKind};
use async_nats::jetstream::{self, stream, AckKind};
use futures::StreamExt;
use messages::subjects;
use tokio::sync::mpsc;

use super::effects::RunContext;
use super::record::{OutboxEntry, RunRecord};
use super::wire::{interpret_reply, reply_event, ReplyMeaning};
use super::{maps, names, now, Envelope, Shared};
use crate::core::{self, Event, Execution, ExecutionId, TaskKey};
use crate::definition::Workflow;

/// Outbox entries older than this are dropped: their events cannot be redelivered any more.
const OUTBOX_HORIZON_MS: u64 = 10 * 60 * 1000;

/// Creates (or finds) the workflow's event stream and the shared consumer.
pub(super) async fn consumer(
    shared: &Shared,
    workflow: &str,
) -> Result<async_nats::jetstream::consumer::Consumer<pull::Config>, async_nats::Error> {
    let ns = &shared.ns;
    let stream = shared
        .js
        .get_or_create_stream(stream::Config {
            name: names::event_stream(ns, workflow),
            subjects: vec![
                subjects::run_events_all(ns, workflow),
                subjects::agent_response_all(ns, workflow),
            ],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            num_replicas: shared.config.replicas,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await?;
    let consumer = stream
        .get_or_create_consumer(
            names::CONSUMER,
            pull::Config {
                durable_name: Some(names::CONSUMER.into()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: shared.config.ack_wait,
                max_ack_pending: 20_000,
                num_replicas: shared.config.replicas,
                ..Default::default()
            },
        )
        .await?;
    Ok(consumer)
}

/// Pulls the workflow's events and hands each to the worker that owns its run, until
/// `stop` fires; events in hand are finished first.
pub(super) async fn run(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), async_nats::Error> {
    let consumer = consumer(&shared, &workflow.name).await?;
    let mut messages = consumer.messages().await?;
    let n = shared.config.workers.max(1);
    let mut senders = Vec::with_capacity(n);
    let mut workers = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = mpsc::channel::<jetstream::Message>(256);
        senders.push(tx);
        workers.push(tokio::spawn(worker(shared.clone(), workflow.clone(), rx)));
    }
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            msg = messages.next() => {
                let Some(msg) = msg else { break };
                let msg = match msg {
                    Ok(m) => m,
                    Err(e) => { tracing::debug!("event stream: {e}"); continue }
                };
                let Some(execution) = execution_of(&shared.ns, &workflow.name, &msg.subject) else {
                    tracing::warn!("dropping an event on unexpected subject {}", msg.subject);
                    let _ = msg.ack_with(AckKind::Term).await;
                    continue;
                };
                let mut h = DefaultHasher::new();
                execution.hash(&mut h);
                let idx = (h.finish() % n as u64) as usize;
                if senders[idx].send(msg).await.is_err() {
                    break;
                }
            }
        }
    }
    // Drain: stop taking events, let the workers finish what they hold.
    drop(messages);
    drop(senders);
    for w in workers {
        let _ = w.await;
    }
    Ok(())
}

/// The run an event belongs to, from its subject.
fn execution_of(ns: &str, workflow: &str, subject: &str) -> Option<ExecutionId> {
    let events = subjects::run_events_all(ns, workflow);
    let responses = subjects::agent_response_all(ns, workflow);
    let token = subjects::last_token(subject);
    if subject.starts_with(events.trim_end_matches('>')) {
        ExecutionId::parse(token).ok()
    } else if subject.starts_with(responses.trim_end_matches('>')) {
        TaskKey::parse_sub_task_id(token).map(|(e, _, _)| e)
    } else {
        None
    }
}

/// A cached run: its KV revision and record.
type Cache = HashMap<ExecutionId, (u64, RunRecord)>;

async fn worker(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    mut rx: mpsc::Receiver<jetstream::Message>,
) {
    let mut cache = Cache::new();
    while let Some(msg) = rx.recv().await {
        if cache.len() > 10_000 {
            cache.clear();
        }
        // A slow event (a card wait, a slow server) tells the stream it is still in hand,
        // so it is not redelivered to another replica while this one works on it.
        let work = process(&shared, &workflow, &mut cache, &msg);
        tokio::pin!(work);
        let mut heartbeat = tokio::time::interval(shared.config.ack_wait / 2);
        heartbeat.tick().await;
        let outcome = loop {
            tokio::select! {
                outcome = &mut work => break outcome,
                _ = heartbeat.tick() => {
                    let _ = msg.ack_with(AckKind::Progress).await;
                }
            }
        };
        match outcome {
            Ok(()) => {
                if let Err(e) = msg.ack().await {
                    tracing::warn!("ack failed (the event will be redelivered): {e}");
                }
            }
            Err(e) => {
                tracing::warn!("event on {} failed, retrying later: {e}", msg.subject);
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                    .await;
            }
        }
    }
}

/// Decodes an event message into (run, event, caller).
async fn decode(
    shared: &Shared,
    workflow: &Workflow,
    msg: &jetstream::Message,
) -> Option<(ExecutionId, Envelope)> {
    let token = subjects::last_token(&msg.subject);
    if msg
        .subject
        .starts_with(subjects::run_events_all(&shared.ns, &workflow.name).trim_end_matches('>'))
    {
        let execution = ExecutionId::parse(token).ok()?;
        match serde_json::from_slice::<Envelope>(&msg.payload) {
            Ok(env) => Some((execution, env)),
            Err(e) => {
                tracing::warn!("dropping a malformed event for run {execution}: {e}");
                None
            }
        }
    } else {
        let (execution, key, attempt) = TaskKey::parse_sub_task_id(token)?;
        let meaning = interpret_reply(&msg.payload)?;
        let meaning = match meaning {
            ReplyMeaning::Artifact(name) => match shared.get_artifact(&name).await {
                Ok(v) => ReplyMeaning::Output(v),
                Err(e) => {
                    let message =
                        format!("the agent's output artifact '{name}' could not be read: {e}");
                    ReplyMeaning::Failed(core::Failure {
                        class: core::FailureClass::Failed,
                        message,
                        kind: None,
                    })
                }
            },
            other => other,
        };
        Some((
            execution,
            Envelope {
                event: reply_event(key, attempt, meaning),
                caller: None,
            },
        ))
    }
}

async fn process(
    shared: &Arc<Shared>,
    workflow: &Workflow,
    cache: &mut Cache,
    msg: &jetstream::Message,
) -> Result<(), async_nats::Error> {
    let Some((execution, envelope)) = decode(shared, workflow, msg).await else {
        return Ok(()); // nothing to do (status update) or undecodable (logged)
    };
    let info = msg.info()?;
    let (seq, delivered) = (info.stream_sequence, info.delivered);
    let key = names::run_key(&workflow.name, &execution);
    for _ in 0..64 {
        let cached = cache.remove(&execution);
        let from_cache = cached.is_some();
        let loaded = match cached {
            Some(hit) => Some(hit),
            None => match shared.runs.entry(key.clone()).await? {
                Some(e) if !e.value.is_empty() => {
                    let mut record = serde_json::from_slice::<RunRecord>(&e.value)?;
                    maps::load_items(shared, &key, &mut record).await?;
                    Some((e.revision, record))
                }
                _ => None,
            },
        };
        let (revision, mut record) = match loaded {
            Some((rev, rec)) => (Some(rev), rec),
            None => match (&envelope.event, &envelope.caller) {
                (Event::Started { .. }, Some(caller)) => {
                    let state = Execution::new(execution.clone(), &workflow.name);
                    (
                        None,
                        RunRecord {
                            state,
                            caller: caller.clone(),
                            outbox: Vec::new(),
                            maps: Default::default(),
                            input_apart: false,
                        },
                    )
                }
                _ => {
                    tracing::debug!("event for unknown run {execution} dropped");
                    return Ok(());
                }
            },
        };
        let ctx = RunContext {
            shared,
            workflow,
            execution: &execution,
            caller: &record.caller.clone(),
        };
        if delivered > 1 {
            if let Some(pos) = record.outbox.iter().position(|e| e.seq == seq) {
                // Committed before, maybe not carried out: do it again (at-least-once).
                let entry = record.outbox.remove(pos);
                let acks =
                    maps::start_puts(shared, maps::result_writes(&key, &entry.results)?).await?;
                ctx.carry_out(&entry.commands).await?;
                maps::wait_acks(acks).await?;
                if let Some(rev) = revision {
                    if let Ok(new_rev) = shared
                        .runs
                        .update(&key, maps::encode(&mut record)?.into(), rev)
                        .await
                    {
                        cache.insert(execution.clone(), (new_rev, record));
                    }
                }
                return Ok(());
            }
        }
        let now = now();
        maps::load_results(shared, workflow, &key, &mut record, &envelope.event).await?;
        // Some events change the state without any command (a fork branch that is not
        // the last to end): those must be committed too, or the next replica to load the
        // run never learns of them.
        // Items and results are left out of the copy (an event that changes a result
        // always has commands), so it costs nothing per item of a large map.
        let before = maps::without_bulk(&mut record.state, Execution::clone);
        let commands = core::apply(workflow, &mut record.state, envelope.event.clone(), now);
        if commands.is_empty() && maps::without_bulk(&mut record.state, |s| *s == before) {
            if from_cache {
                // Another replica may have moved the run on since this worker cached it,
                // and the event may matter to the newer state (a result of a call that
                // replica dispatched): acking it now would lose it. Only a fresh read can
                // tell; a commit does not need this, its compare-and-swap tells.
                continue;
            }
            if let Some(rev) = revision {
                cache.insert(execution.clone(), (rev, record));
            }
            return Ok(());
        }
        record
            .outbox
            .retain(|e| now.0.saturating_sub(e.at.0) < OUTBOX_HORIZON_MS);
        let results = maps::item_results(workflow, &record, &envelope.event);
        record.outbox.push(OutboxEntry {
            seq,
            at: now,
            commands: commands.clone(),
            results,
        });
        // Items of a map that just started go first: the commit refers to them.
        let items = maps::externalize(&mut record, &key)?;
        maps::wait_acks(maps::start_puts(shared, items).await?).await?;
        let bytes = maps::encode(&mut record)?;
        let written = match revision {
            None => match shared.runs.create(&key, bytes.into()).await {
                Ok(rev) => Some(rev),
                Err(e) if e.kind() == CreateErrorKind::AlreadyExists => None,
                Err(e) => return Err(e.into()),
            },
            Some(rev) => match shared.runs.update(&key, bytes.into(), rev).await {
                Ok(rev) => Some(rev),
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => None,
                Err(e) => return Err(e.into()),
            },
        };
        let Some(new_rev) = written else {
            continue; // another replica moved first: reload and apply again
        };
        let ctx = RunContext {
            shared,
            workflow,
            execution: &execution,
            caller: &record.caller,
        };
        let written = record
            .outbox
            .last()
            .map(|e| maps::result_writes(&key, &e.results))
            .transpose()?;
        let acks = maps::start_puts(shared, written.unwrap_or_default()).await?;
        ctx.carry_out(&commands).await?;
        maps::wait_acks(acks).await?;
        record.outbox.pop();
        if !record.state.status.is_terminal() {
            cache.insert(execution.clone(), (new_rev, record));
        }
        return Ok(());
    }
    Err(format!("run {execution}: too many conflicting writes").into())
}
