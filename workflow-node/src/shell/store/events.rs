//! A workflow's event stream: making it and its shared durable consumer, and publishing
//! an event into it, sealed with the deployment's MAC so that only the mesh's nodes can
//! put events in a run.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy};
use async_nats::jetstream::stream;
use async_nats::HeaderMap;
use messages::{headers, subjects};

use crate::core::ExecutionId;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Error, Result};
use crate::shell::mesh::seal;
use crate::shell::mesh::setup as mesh_setup;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::names;

/// How long [`publish_event`] waits before each new try of a publish that failed in a way
/// that passes (about 6 s in all: a stream's leader election after a server restart).
const TRANSIENT_WAITS: [Duration; 6] = [
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
    Duration::from_millis(1600),
    Duration::from_millis(3000),
];

/// Publishes an event into a run's stream and waits for the stream to store it; `true`
/// when it was stored, `false` when the stream already had an event with this `fact`'s
/// de-duplication id (which makes a second publish of the same event a no-op). `fact` is
/// the readable id (`messages::msg_id`); the id published is the seal's
/// ([`seal::Seal::msg_id`]), so that only a replica can have written the one it meets. A
/// stream that was deleted is made again first.
pub(crate) async fn publish_event(
    shared: &Shared,
    workflow: &str,
    execution: &ExecutionId,
    fact: &str,
    envelope: &Envelope,
) -> Result<bool> {
    use async_nats::jetstream::context::PublishErrorKind;
    let msg_id = shared.seal.msg_id(fact);
    let msg_id = msg_id.as_str();
    let bytes: bytes::Bytes = serde_json::to_vec(envelope)?.into();
    let subject = subjects::run_events(&shared.ns, workflow, &execution.0);
    let mac = shared.seal.event_mac(&subject, msg_id, &bytes);
    let publish = || async {
        let mut h = HeaderMap::new();
        h.insert(headers::MSG_ID, msg_id);
        h.insert(seal::EVENT_MAC, mac.as_str());
        let ack = shared
            .js
            .publish_with_headers(subject.clone(), h, bytes.clone())
            .await?;
        ack.await
    };
    // "No stream" is also what a clustered stream answers while it elects a leader (a
    // server restarting), and a timeout what it answers without quorum: both pass, so the
    // publish is tried again for a few seconds (the message id keeps one copy) before the
    // error reaches the caller or the worker's retry.
    let mut remade = false;
    let mut waits = TRANSIENT_WAITS.iter();
    let ack = loop {
        let error = match publish().await {
            Err(e) => e,
            ok => break ok,
        };
        let kind = error.kind();
        if kind == PublishErrorKind::StreamNotFound && !remade {
            remade = true;
            tracing::warn!("the event stream of {workflow} is gone: making it again");
            if consumer(shared, workflow).await.is_ok() {
                shared.health.stream_remade(workflow);
                continue;
            }
        }
        let transient = passes(&error);
        match waits.next() {
            Some(wait) if transient => tokio::time::sleep(*wait).await,
            _ => break Err(error),
        }
    };
    let ack = ack.context(|| format!("storing an event of run {execution}"))?;
    Ok(!ack.duplicate)
}

/// Whether `error` is an event's publish that failed in a way that passes ([`passes`]),
/// still failing after the retries: the store could not be reached or had no quorum (a
/// server cut off from the others, an election that outlasts the retries), which says
/// nothing of the event; not a refusal of it (a full store, a limit).
pub(crate) fn store_unreachable(error: &Error) -> bool {
    match error {
        Error::Connection { source, .. } => source
            .downcast_ref::<async_nats::jetstream::context::PublishError>()
            .is_some_and(passes),
        _ => false,
    }
}

/// Whether a failed publish may be tried again: the stream was electing a leader, the
/// ack did not come, the connection broke, or another publish of the same message id is
/// being stored right now (10158, "duplicate message id is in process": a copy of this
/// event, say a request resent while a frozen replica's publish of it woke up). The
/// message id keeps one copy, and the next try learns whether it was stored.
fn passes(error: &async_nats::jetstream::context::PublishError) -> bool {
    use async_nats::jetstream::context::PublishErrorKind;
    use async_nats::jetstream::ErrorCode;
    match error.kind() {
        PublishErrorKind::StreamNotFound
        | PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe => true,
        PublishErrorKind::Other => std::error::Error::source(error)
            .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>())
            .is_some_and(|e| e.error_code() == ErrorCode::STREAM_DUPLICATE_MESSAGE_CONFLICT),
        _ => false,
    }
}

/// Creates (or finds) the workflow's event stream and the shared consumer.
pub(in crate::shell) async fn consumer(
    shared: &Shared,
    workflow: &str,
) -> Result<async_nats::jetstream::consumer::Consumer<pull::Config>> {
    let ns = &shared.ns;
    let name = names::event_stream(ns, workflow);
    let setup = |resource: String| move |source| Error::Setup { resource, source };
    let stream = shared
        .js
        .get_or_create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![
                subjects::run_events_all(ns, workflow),
                subjects::agent_response_all(ns, workflow),
            ],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            num_replicas: shared.config.replicas,
            // At most the stream's max age, which the server requires.
            duplicate_window: Duration::from_secs(120).min(shared.config.retention),
            // An event is acked within moments; one left this long belongs to nothing.
            max_age: shared.config.retention,
            // Full, a new event is refused, and its sender told: none stored is dropped.
            max_bytes: mesh_setup::bytes_limit(shared.config.store_limits.events),
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await
        .map_err(|e| setup(format!("stream {name}"))(e.into()))?;
    let mut stream = stream;
    mesh_setup::limit_stream(&shared.js, &mut stream, shared.config.store_limits.events)
        .await
        .map_err(|e| setup(format!("stream {name}"))(e))?;
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
        .await
        .map_err(|e| setup(format!("consumer {} of stream {name}", names::CONSUMER))(e.into()))?;
    Ok(consumer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};

    fn api_error(code: u64, description: &str) -> PublishError {
        let error: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": 409, "err_code": code, "description": description
        }))
        .expect("an API error");
        PublishError::with_source(PublishErrorKind::Other, error)
    }

    #[test]
    fn a_copy_being_stored_elsewhere_passes_and_other_refusals_do_not() {
        assert!(passes(&api_error(
            10158,
            "duplicate message id is in process"
        )));
        assert!(!passes(&api_error(10077, "maximum messages exceeded")));
        assert!(passes(&PublishError::new(PublishErrorKind::TimedOut)));
        assert!(!passes(&PublishError::new(
            PublishErrorKind::MaxPayloadExceeded
        )));
    }
}
