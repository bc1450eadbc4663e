//! Reads of one artifact by its name, served to callers and agents on
//! `{ns}.a2a.v1.artifact.get` (`docs/protocol.md`, "Reading an artifact"). The shipped
//! permissions give readers no JetStream API on the artifact bucket: the subjects that
//! name one object there also take wildcards, which would let a reader list and read
//! every object. Here the name is only ever a name: the node reads exactly that object of
//! its artifact bucket, no more than `Config::max_artifact_bytes`, and answers in parts
//! that fit a message. Whoever holds an object's name (128 random bits or more for inputs
//! and outputs) may read it; nobody can list names.
//!
//! One replica of the queue group answers each request; a few reads run at once, and
//! further requests wait for one to end.

use std::sync::Arc;

use agent_sdk::ArtifactError;
use async_nats::{HeaderMap, Subscriber};
use futures::StreamExt;
use messages::{headers, subjects};
use tokio::sync::Semaphore;

use crate::shell::context::Shared;
use crate::shell::error::Result;

/// The queue group of the readers' answerers: any replica serves any read.
const QUEUE: &str = "workflow-node-artifacts";
/// Reads served at once by one replica (each holds up to the artifact cap in memory).
const AT_ONCE: usize = 4;
/// Room left in each part for its headers.
const HEADER_ROOM: usize = 4 * 1024;

/// Subscribes to artifact reads of the namespace.
pub(in crate::shell) async fn subscribe(shared: &Shared) -> Result<Subscriber> {
    shared
        .queue_subscribe(subjects::artifact_get(&shared.ns), QUEUE)
        .await
}

/// Answers each read on `reads` until the subscription ends.
pub(in crate::shell) async fn serve(shared: Arc<Shared>, mut reads: Subscriber) {
    let at_once = Arc::new(Semaphore::new(AT_ONCE));
    while let Some(msg) = reads.next().await {
        let Some(reply) = msg.reply.clone() else {
            continue;
        };
        // Only an inbox: never a subject the node would be made to write to for someone
        // else (a workflow's response subject would put the bytes in its stream).
        if !reply.starts_with("_INBOX") || subjects::check_reply(&shared.ns, &reply).is_err() {
            continue;
        }
        let Ok(permit) = at_once.clone().acquire_owned().await else {
            return;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            answer(&shared, reply.as_str(), &msg.payload).await;
            drop(permit);
        });
    }
}

/// Reads the object `payload` names and sends it to `reply`, or says why not.
async fn answer(shared: &Shared, reply: &str, payload: &[u8]) {
    let sent = match std::str::from_utf8(payload) {
        Ok(name) if !name.is_empty() => match shared.artifacts.read(name).await {
            Ok(read) => send_parts(shared, reply, read).await,
            Err(e) => refuse(shared, reply, kind_of(&e), &e.to_string()).await,
        },
        _ => refuse(shared, reply, "invalid", "the request names no object").await,
    };
    if let Err(e) = sent {
        tracing::debug!(%reply, "an artifact read could not be answered: {e}");
    }
}

/// The refusal kind of a read's error (`Mesh-Artifact-Error`).
fn kind_of(e: &ArtifactError) -> &'static str {
    match e {
        ArtifactError::NotFound { .. } => "not-found",
        ArtifactError::TooLarge { .. } => "too-large",
        ArtifactError::BadUri(_) | ArtifactError::ForeignBucket { .. } => "invalid",
        _ => "unavailable",
    }
}

async fn refuse(
    shared: &Shared,
    reply: &str,
    kind: &str,
    why: &str,
) -> std::result::Result<(), async_nats::Error> {
    let mut h = HeaderMap::new();
    h.insert(headers::ARTIFACT_ERROR, kind);
    let subject = reply.to_owned();
    shared
        .client
        .publish_with_headers(subject, h, why.to_owned().into())
        .await?;
    Ok(())
}

/// Sends `read`'s bytes in parts that fit a message, in order, the first with the
/// version and media type.
async fn send_parts(
    shared: &Shared,
    reply: &str,
    read: agent_sdk::ObjectRead,
) -> std::result::Result<(), async_nats::Error> {
    let room = shared
        .client
        .server_info()
        .max_payload
        .saturating_sub(HEADER_ROOM)
        .max(1024);
    let chunks: Vec<&[u8]> = if read.bytes.is_empty() {
        vec![&[]]
    } else {
        read.bytes.chunks(room).collect()
    };
    let count = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let mut h = HeaderMap::new();
        h.insert(
            headers::ARTIFACT_PART,
            format!("{}/{count}", i + 1).as_str(),
        );
        if i == 0 {
            h.insert(headers::ARTIFACT_MIME, read.mime.as_str());
            if let Some(v) = read.version {
                h.insert(headers::ARTIFACT_VERSION, v.to_string().as_str());
            }
        }
        shared
            .client
            .publish_with_headers(reply.to_owned(), h, chunk.to_vec().into())
            .await?;
    }
    shared.client.flush().await?;
    Ok(())
}
