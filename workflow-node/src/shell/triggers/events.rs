//! Event triggers: each replica pulls a trigger's messages through one durable consumer
//! shared by the workflow's replicas (on the trigger's `stream`, or on a stream the node
//! makes to capture its `subject`), so a message published while no replica runs waits in
//! the stream. For each message: the condition, then the input and the de-duplication
//! key; the run starts through the one start path (`callers::trigger_start`) with the
//! caller name `trigger:{name}` and the key as its task id, so a redelivered or
//! re-published event starts no second run; the message is acked after the start is
//! stored.
//!
//! A message that cannot start a run (a template or condition that fails on it, an input
//! the schema refuses, a key too long) is parked at once as a dead letter on
//! `{ns}.dead.wf.{workflow}.{trigger}` (stream `{ns}_wf_dead_letters`), with its original
//! subject, headers and the reason, then acked; one that keeps failing for the store is
//! taken again, and parked after `max_deliveries`. Nothing is retried for ever.
//!
//! A trigger with `signal` routes its event instead to the run whose wait node waits under
//! the event's key (`callers::signals`), with the de-duplication key as the signal's id;
//! a key no run waits under yet is tried again, as a failing store is.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, AckKind};
use futures::StreamExt;

use crate::definition::{Trigger, Workflow};
use crate::shell::callers::trigger_start::{headers_of, take_event, Outcome};
use crate::shell::context::Shared;
use crate::shell::error::{Context, Result};
use crate::shell::mesh::setup as mesh_setup;
use crate::shell::run::names::{self, dead};

/// How long a message may be in hand before the server gives it to another replica.
const ACK_WAIT: Duration = Duration::from_secs(30);

/// Makes (or finds) the dead-letter stream.
pub(in crate::shell) async fn dead_letters(shared: &Shared) -> Result<()> {
    let name = names::dead_letter_stream(&shared.ns);
    let config = stream::Config {
        name: name.clone(),
        subjects: vec![format!("{}.dead.wf.>", shared.ns)],
        storage: stream::StorageType::File,
        num_replicas: shared.config.replicas,
        max_age: shared.config.retention,
        max_bytes: mesh_setup::bytes_limit(shared.config.store_limits.history / 4),
        ..Default::default()
    };
    shared
        .js
        .get_or_create_stream(config)
        .await
        .context(|| format!("making stream {name}"))?;
    Ok(())
}

/// The durable consumer of `trigger`, made (with its stream, when the node makes it) if
/// it is missing.
pub(in crate::shell) async fn consumer(
    shared: &Shared,
    workflow: &Workflow,
    trigger: &Trigger,
) -> Result<jetstream::consumer::Consumer<pull::Config>> {
    let stream_name = match &trigger.stream {
        Some(s) => s.clone(),
        None => names::trigger_stream(&shared.ns, &workflow.name, &trigger.name),
    };
    let stream = match &trigger.stream {
        Some(_) => shared.js.get_stream(&stream_name).await.context(|| {
            format!(
                "trigger {}: stream {stream_name} (it must exist)",
                trigger.name
            )
        })?,
        None => {
            let config = stream::Config {
                name: stream_name.clone(),
                subjects: trigger.subject.iter().cloned().collect(),
                storage: stream::StorageType::File,
                num_replicas: shared.config.replicas,
                max_age: shared.config.retention,
                max_bytes: mesh_setup::bytes_limit(shared.config.store_limits.events),
                ..Default::default()
            };
            shared
                .js
                .get_or_create_stream(config)
                .await
                .context(|| format!("making stream {stream_name}"))?
        }
    };
    let durable = names::trigger_consumer(&workflow.name, &trigger.name);
    let config = pull::Config {
        durable_name: Some(durable.clone()),
        filter_subject: trigger.subject.clone().unwrap_or_default(),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: ACK_WAIT,
        ..Default::default()
    };
    stream
        .get_or_create_consumer(&durable, config)
        .await
        .context(|| format!("making consumer {durable} on {stream_name}"))
}

/// Takes `trigger`'s messages until the task is stopped.
pub(in crate::shell) async fn run(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    trigger: Trigger,
    consumer: jetstream::consumer::Consumer<pull::Config>,
) {
    loop {
        let messages = match consumer.messages().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(trigger = %trigger.name, "pulling messages: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut messages = messages;
        while let Some(message) = messages.next().await {
            match message {
                Ok(m) => take(&shared, &workflow, &trigger, m).await,
                Err(e) => {
                    tracing::warn!(trigger = %trigger.name, "pulling messages: {e}");
                    break;
                }
            }
        }
    }
}

/// Takes one message: start, ignore or park, then ack.
async fn take(shared: &Shared, workflow: &Arc<Workflow>, trigger: &Trigger, m: jetstream::Message) {
    let Ok(info) = m.info() else {
        let _ = m.ack().await;
        return;
    };
    let (stream, sequence, delivered) = (
        info.stream.to_string(),
        info.stream_sequence,
        info.delivered,
    );
    let scope = Trigger::scope(
        m.subject.as_str(),
        &m.payload,
        headers_of(&m.headers),
        sequence,
    );
    let outcome = match take_event(
        shared,
        workflow,
        trigger,
        &scope,
        &format!("{stream}-{sequence}"),
    )
    .await
    {
        Outcome::Ignored | Outcome::Started(..) | Outcome::Signalled => Ok(()),
        Outcome::Poison(why) => Err((why, true)),
        Outcome::Failed(why) => Err((why, false)),
    };
    match outcome {
        Ok(()) => {
            let _ = m.ack().await;
        }
        Err((why, poison)) if poison || delivered >= trigger.max_deliveries as i64 => {
            match park(shared, workflow, trigger, &m, &why).await {
                Ok(()) => {
                    let _ = m.ack_with(AckKind::Term).await;
                }
                Err(e) => {
                    tracing::warn!(trigger = %trigger.name, "parking a dead letter: {e}");
                    let _ = m.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await;
                }
            }
        }
        Err((why, _)) => {
            tracing::warn!(trigger = %trigger.name, "taking a message again: {why}");
            let _ = m.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await;
        }
    }
}

/// Parks `m` as a dead letter of `trigger`, with why.
async fn park(
    shared: &Shared,
    workflow: &Workflow,
    trigger: &Trigger,
    m: &jetstream::Message,
    why: &str,
) -> Result<()> {
    let mut h = m.headers.clone().unwrap_or_default();
    h.insert(dead::SUBJECT, m.subject.as_str());
    // A header value is one line.
    let why: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(1000)
        .collect();
    h.insert(dead::REASON, why.as_str());
    h.insert(
        dead::TRIGGER,
        format!("{}.{}", workflow.name, trigger.name).as_str(),
    );
    // Where it was taken from: a replay derives the same default key from it.
    if let Ok(info) = m.info() {
        h.insert(dead::STREAM, info.stream);
        h.insert(dead::SEQUENCE, info.stream_sequence.to_string().as_str());
    }
    let subject = names::dead_letter_subject(&shared.ns, &workflow.name, &trigger.name);
    let ack = shared
        .js
        .publish_with_headers(subject, h, m.payload.clone())
        .await
        .context(|| "parking a dead letter".into())?;
    ack.await.context(|| "parking a dead letter".into())?;
    tracing::warn!(trigger = %trigger.name, "a message was parked as a dead letter: {why}");
    Ok(())
}
