//! Event processing: one durable pull consumer per workflow, shared by every replica.
//!
//! Each event: load the run (from this worker's cache, or KV), ask [`plan`] what the event
//! does, perform that (writes, the compare-and-swap commit of state and outbox, the
//! commands), then ack. A conflict means another replica moved first: reload and plan
//! again. [`process`] is the whole path of one event; the decisions are in `plan`.
//!
//! Events of one run go to one worker task (by hash), so a replica never races itself. A
//! worker does not wait for an event's tail (writes confirmed, spans, ack; see `tail`)
//! before taking another run's event; the run's own next event waits for it.
//!
//! When the process exports traces, an event that ended spans is acked only once they
//! are exported (a flush shared by every event in hand meanwhile, see [`acker`]): a
//! replica killed before that leaves the event to be delivered again, and the next one
//! emits its spans again from the outbox, so a kill loses none.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::pull;
use async_nats::jetstream::{self, AckKind};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use messages::subjects;
use tokio::sync::mpsc;

use crate::core::{ExecutionId, TaskKey};
use crate::definition::Workflow;
use crate::shell::context::Shared;
use crate::shell::error::{Error, Result};
use crate::shell::run::backoff::{Failures, Next};
use crate::shell::store::cache::RunCache;
use crate::shell::store::events;
use crate::shell::worker::group;
use crate::shell::worker::lease::Leases;
use crate::shell::worker::process::process;
use crate::shell::worker::tail::Tail;

/// Pulls the workflow's events and hands each to the worker that owns its run, until
/// `stop` fires; events in hand are finished first. A pull that ends or loses its
/// consumer (deleted, or the stream with it) is set up again, with a backoff, and the
/// workflow reports itself unhealthy meanwhile; so is one whose stream a publish made again.
pub(in crate::shell) async fn run(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let leases = Arc::new(Leases::default());
    let renewer = tokio::spawn(
        leases
            .clone()
            .renew(shared.client.clone(), shared.config.ack_wait / 2),
    );
    let n = shared.config.workers.max(1);
    let mut senders = Vec::with_capacity(n);
    let mut workers = Vec::with_capacity(n);
    let (to_ack, acks) = mpsc::unbounded_channel();
    let acker = tokio::spawn(acker(leases.clone(), acks));
    for _ in 0..n {
        let (tx, rx) = mpsc::channel::<InHand>(256);
        senders.push(tx);
        workers.push(tokio::spawn(worker(
            shared.clone(),
            workflow.clone(),
            leases.clone(),
            rx,
            to_ack.clone(),
        )));
    }
    drop(to_ack);
    let mut backoff = Backoff::default();
    let remade = shared.health.remade_of(&workflow.name);
    while !*stop.borrow() {
        let pulled = pull(&shared, &workflow.name).await;
        let mut messages = match pulled {
            Ok(m) => m,
            Err(e) => {
                shared.health.set(&workflow.name, false);
                tracing::warn!("{e}; trying again in {:?}", backoff.current());
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = backoff.wait() => continue,
                }
            }
        };
        shared.health.set(&workflow.name, true);
        backoff = Backoff::default();
        tokio::select! {
            _ = stop.changed() => break,
            why = route(&shared, &workflow, &mut messages, &leases, &senders) => {
                shared.health.set(&workflow.name, false);
                tracing::warn!("the event pull of {} {why}: setting it up again", workflow.name);
            }
            // A publish made the stream again: this pull's request went with the old one.
            _ = remade.notified() => {
                tracing::warn!("the event stream of {} was made again: pulling anew", workflow.name);
            }
        }
    }
    // Drain: stop taking events, let the workers finish what they hold.
    drop(senders);
    for w in workers {
        let _ = w.await;
    }
    // The events whose spans wait for their export are acked last.
    let _ = acker.await;
    renewer.abort();
    Ok(())
}

/// The workflow's consumer and a pull on it.
async fn pull(shared: &Shared, workflow: &str) -> Result<pull::Stream> {
    let consumer = events::consumer(shared, workflow).await?;
    let crate::shell::config::Pull { batch, expires } = shared.config.pull;
    let expires = expires.max(Duration::from_secs(1));
    consumer
        .stream()
        .max_messages_per_batch(batch.max(1))
        .expires(expires)
        .heartbeat(expires / 2)
        .messages()
        .await
        .map_err(|e| Error::Setup {
            resource: format!("the pull of {workflow}'s events"),
            source: e.into(),
        })
}

/// Hands pulled events to their workers until the pull breaks; says why it did.
async fn route(
    shared: &Shared,
    workflow: &Workflow,
    messages: &mut pull::Stream,
    leases: &Leases,
    senders: &[mpsc::Sender<InHand>],
) -> String {
    while let Some(msg) = messages.next().await {
        let msg = match msg {
            Ok(m) => m,
            Err(e) if pull_is_lost(e.kind()) => return format!("broke ({e})"),
            Err(e) => {
                tracing::debug!("event stream: {e}");
                continue;
            }
        };
        // When the servers stored it: the node's clock follows theirs (`shell::clock`).
        if let Ok(info) = msg.info() {
            crate::shell::clock::observe(info.published.unix_timestamp_nanos());
        }
        let Some(execution) = execution_of(&shared.ns, &workflow.name, &msg.subject) else {
            tracing::warn!("dropping an event on unexpected subject {}", msg.subject);
            let _ = msg.ack_with(AckKind::Term).await;
            continue;
        };
        let mut h = DefaultHasher::new();
        execution.hash(&mut h);
        let idx = (h.finish() % senders.len() as u64) as usize;
        let lease = leases.hold(&msg);
        if senders[idx].send((lease, execution, msg)).await.is_err() {
            return "lost its workers".into();
        }
    }
    "ended".into()
}

/// Whether a pull error means the pull will deliver nothing more: its consumer is gone, or
/// the server refuses it.
fn pull_is_lost(kind: pull::MessagesErrorKind) -> bool {
    use pull::MessagesErrorKind as K;
    matches!(
        kind,
        K::ConsumerDeleted | K::NoResponders | K::PushBasedConsumer | K::RequestLimitExceeded
    )
}

/// Waits that double from 100 ms up to 5 s.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(100))
    }
}

impl Backoff {
    fn current(&self) -> Duration {
        self.0
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
    }
}

/// The run an event belongs to, from its subject.
pub(in crate::shell) fn execution_of(
    ns: &str,
    workflow: &str,
    subject: &str,
) -> Option<ExecutionId> {
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
type Cache = RunCache;

async fn worker(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    leases: Arc<Leases>,
    mut rx: mpsc::Receiver<InHand>,
    to_ack: mpsc::UnboundedSender<(u64, jetstream::Message)>,
) {
    let budget = shared.config.cache_bytes / shared.config.workers.max(1);
    let mut w = Worker {
        shared,
        workflow,
        leases,
        to_ack,
        cache: Cache::new(budget),
        failures: Failures::default(),
        tails: FuturesUnordered::new(),
        tailing: HashSet::new(),
    };
    loop {
        // Tails that end are settled while no event waits (see `tail`).
        let first = tokio::select! {
            Some(done) = w.tails.next(), if !w.tails.is_empty() => {
                w.tail_done(done).await;
                continue;
            }
            first = rx.recv() => match first {
                Some(first) => first,
                None => break,
            },
        };
        // Whatever else waits is taken too: events of one run in it are committed together.
        let mut batch = vec![first];
        while batch.len() < group::BATCH_MAX {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        for (execution, run) in group::by_run(batch) {
            w.run_events(&execution, run).await;
        }
    }
    while let Some(done) = w.tails.next().await {
        w.tail_done(done).await;
    }
}

/// An event in a worker's hands: its lease, its run (from its subject), the event.
type InHand = (u64, ExecutionId, jetstream::Message);

/// An event whose tail was finished: its lease, the event, its run, and how it went
/// (whether it emitted spans).
type TailDone = (u64, jetstream::Message, ExecutionId, Result<bool>);

/// How long the events of a group that failed wait before they come back, one by one.
const GROUP_RETRY: Duration = Duration::from_millis(200);

/// One worker task's state: what it processes events with.
struct Worker {
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    leases: Arc<Leases>,
    to_ack: mpsc::UnboundedSender<(u64, jetstream::Message)>,
    cache: Cache,
    failures: Failures,
    /// The tails being finished (see `tail`), each settling its event when it ends.
    tails: FuturesUnordered<BoxFuture<'static, TailDone>>,
    /// The runs whose last event's tail is among `tails`: their next event waits for it.
    tailing: HashSet<ExecutionId>,
}

impl Worker {
    /// Processes events of one run, in order: together with one commit when they can be
    /// (see `worker::group`), one by one otherwise.
    async fn run_events(&mut self, execution: &ExecutionId, run: Vec<(u64, jetstream::Message)>) {
        self.wait_for_tail(execution).await;
        if run.len() > 1 {
            match group::process(&self.shared, &self.workflow, &mut self.cache, &run).await {
                Some(Ok(emitted)) => {
                    for (lease, msg) in run {
                        self.settle(lease, msg, Ok(emitted)).await;
                    }
                    return;
                }
                Some(Err(e)) => {
                    // Each comes back alone (a redelivery is never grouped), and is then
                    // replayed from its outbox entry if the commit held, or applied and
                    // retried or abandoned by the rules for one event.
                    tracing::warn!(
                        "a group of {} events failed ({e}): giving them back",
                        run.len()
                    );
                    for (lease, msg) in run {
                        let _ = msg.ack_with(AckKind::Nak(Some(GROUP_RETRY))).await;
                        self.leases.release(lease);
                    }
                    return;
                }
                None => {}
            }
        }
        for (lease, msg) in run {
            self.one(execution, lease, msg).await;
        }
    }

    /// Processes one event, then acks it or gives it back; once its commands are out, its
    /// tail is left to finish while the worker goes on (see `tail`). The tail of its run's
    /// previous event is finished first: until then that event's outbox entry must stay in
    /// the run's entry, which this event's commit would drop.
    async fn one(&mut self, execution: &ExecutionId, lease: u64, msg: jetstream::Message) {
        self.wait_for_tail(execution).await;
        let processed = process(&self.shared, &self.workflow, &mut self.cache, &msg, None).await;
        match processed {
            Ok((emitted, Some(tail))) => {
                let execution = tail.execution.clone();
                self.tailing.insert(execution.clone());
                let finishing = tokio::spawn(tail.finish());
                self.tails.push(Box::pin(async move {
                    let finished = match finishing.await {
                        Ok(done) => done.map(|_| emitted),
                        Err(e) => Err(Error::Refused(format!(
                            "finishing the event of run {execution} failed: {e}"
                        ))),
                    };
                    (lease, msg, execution, finished)
                }));
            }
            Ok((emitted, None)) => self.settle(lease, msg, Ok(emitted)).await,
            Err(e) => self.settle(lease, msg, Err(e)).await,
        }
    }

    /// Settles the tails that end until none is left of `execution`'s.
    async fn wait_for_tail(&mut self, execution: &ExecutionId) {
        while self.tailing.contains(execution) {
            match self.tails.next().await {
                Some(done) => self.tail_done(done).await,
                None => self.tailing.clear(),
            }
        }
    }

    /// Settles an event whose tail ended. A tail that failed leaves its run's cached copy
    /// behind it (it lacks the event's outbox entry, which the event's return needs).
    async fn tail_done(&mut self, (lease, msg, execution, finished): TailDone) {
        self.tailing.remove(&execution);
        if finished.is_err() {
            let _ = self.cache.take(&execution);
        }
        self.settle(lease, msg, finished).await;
    }

    /// After an event was processed (alone or in a group): acks it (once its spans are
    /// exported, if it emitted any) or gives it back to come again, and releases its lease.
    async fn settle(&mut self, lease: u64, msg: jetstream::Message, processed: Result<bool>) {
        let (seq, delivered) = msg
            .info()
            .map(|i| (i.stream_sequence, i.delivered))
            .unwrap_or((0, 1));
        let (shared, workflow) = (&self.shared, &self.workflow);
        if delivered > 1 {
            shared.metrics.redelivered(&workflow.name);
        }
        shared
            .metrics
            .event_processed(&workflow.name, processed.is_ok());
        match processed {
            Ok(emitted) => {
                self.failures.done(seq);
                if emitted {
                    // Acked (and its lease released) once its spans are exported.
                    if let Err(mpsc::error::SendError((lease, msg))) =
                        self.to_ack.send((lease, msg))
                    {
                        ack(&msg).await;
                        self.leases.release(lease);
                    }
                    return;
                }
                ack(&msg).await;
            }
            Err(e) => {
                let next = self.failures.failed(seq, &e, shared.config.max_deliver);
                failed(shared, workflow, &mut self.cache, &msg, e, next).await;
            }
        }
        self.leases.release(lease);
    }
}

/// Acks events whose spans were emitted once the spans are exported: one flush for every
/// event that came in while the previous flush ran. The events keep their leases until
/// then, so a slow collector delays acks, never the events' processing.
async fn acker(leases: Arc<Leases>, mut rx: mpsc::UnboundedReceiver<(u64, jetstream::Message)>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        agent_sdk::telemetry::flush().await;
        for (lease, msg) in batch {
            ack(&msg).await;
            leases.release(lease);
        }
    }
}

async fn ack(msg: &jetstream::Message) {
    if let Err(e) = msg.ack().await {
        tracing::warn!("ack failed (the event will be redelivered): {e}");
    }
}

/// An event whose processing failed is given back to come again later, or its run is
/// abandoned: it ends failed with an error that names the cause, and its callers are
/// answered (see `run::backoff`). An event is never retried forever, and never dropped while its
/// run could still be failed.
async fn failed(
    shared: &Arc<Shared>,
    workflow: &Arc<Workflow>,
    cache: &mut Cache,
    msg: &jetstream::Message,
    e: Error,
    next: Next,
) {
    let reason = match next {
        Next::Retry(wait) => {
            tracing::warn!(
                "event on {} failed, trying again in {wait:?}: {e}",
                msg.subject
            );
            let _ = msg.ack_with(AckKind::Nak(Some(wait))).await;
            return;
        }
        Next::Abandon(reason) => reason,
    };
    tracing::error!(
        "abandoning the run of the event on {}: {reason}",
        msg.subject
    );
    match finished(
        process(shared, workflow, cache, msg, Some(reason)).await,
        cache,
    )
    .await
    {
        Ok(emitted) => {
            if emitted {
                agent_sdk::telemetry::flush().await;
            }
            ack(msg).await
        }
        Err(e) if e.is_permanent() => {
            tracing::error!(
                "the run of the event on {} cannot be failed either ({e}): dropping the event",
                msg.subject
            );
            let _ = msg.ack_with(AckKind::Term).await;
        }
        Err(e) => {
            tracing::warn!(
                "failing the run of the event on {} failed ({e}): trying again",
                msg.subject
            );
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(5))))
                .await;
        }
    }
}

/// `processed` with its tail, if any, finished here: whether it emitted spans.
async fn finished(processed: Result<(bool, Option<Tail>)>, cache: &mut Cache) -> Result<bool> {
    let (emitted, tail) = processed?;
    if let Some(tail) = tail {
        let execution = tail.execution.clone();
        if let Err(e) = tail.finish().await {
            let _ = cache.take(&execution);
            return Err(e);
        }
    }
    Ok(emitted)
}
