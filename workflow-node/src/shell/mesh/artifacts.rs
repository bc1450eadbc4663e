//! The mesh's object store as the node uses it: the artifact bucket (inputs and outputs
//! too large for a message, a run's artifacts) and the bucket of card contents too large
//! for a card, both kept by `agent_sdk::ArtifactStore`. A reference may name only the
//! mesh's artifact bucket, and a read is bounded by `Config::max_artifact_bytes`: a
//! reference comes from whoever sent it.

use std::time::Duration;

use agent_sdk::{ArtifactError, ArtifactStore};
use async_nats::jetstream;
use messages::subjects;
use serde_json::Value;

use crate::shell::error::{Error, Result};

/// The node's handle on the object store: both buckets (`agent_sdk::ArtifactStore`, with
/// its protections), made on first use.
pub(in crate::shell) struct Artifacts {
    /// The artifact bucket: objects expire after the retention (a run's artifacts are
    /// written while it runs, and a run never outlives it).
    artifacts: ArtifactStore,
    /// Card contents too large for a card: they live as long as the card.
    card_objects: ArtifactStore,
}

impl Artifacts {
    /// A handle on namespace `ns`'s buckets; nothing is made or read until first used.
    pub(in crate::shell) fn new(
        js: jetstream::Context,
        ns: &str,
        replicas: usize,
        retention: Duration,
        max_bytes: u64,
        limits: &crate::limits::StoreLimits,
    ) -> Artifacts {
        let client = js.client();
        Artifacts {
            // The node reads JetStream itself: it is who serves other readers.
            artifacts: ArtifactStore::new(client.clone(), ns)
                .read_directly()
                .replicas(replicas)
                .max_age(retention)
                .max_bytes(usize::try_from(max_bytes).unwrap_or(usize::MAX))
                .capacity(limits.artifacts),
            card_objects: ArtifactStore::in_bucket(client, subjects::cards_bucket(ns))
                .replicas(replicas)
                .capacity(limits.cards),
        }
    }

    /// Stores an artifact; returns its `nats-object://` URI.
    pub(in crate::shell) async fn put(&self, name: &str, bytes: Vec<u8>) -> Result<String> {
        let stored = self.artifacts.put_bytes(name, &bytes).await;
        stored.map_err(artifact_error)
    }

    /// Stores version 1 of a run's artifact (see `ArtifactStore::put_first_version`);
    /// returns its `nats-object://` URI.
    pub(in crate::shell) async fn put_run(
        &self,
        name: &str,
        run: &str,
        bytes: Vec<u8>,
    ) -> Result<String> {
        let stored = self.artifacts.put_first_version(name, run, &bytes).await;
        stored.map_err(artifact_error)
    }

    /// Stores a card's content; returns its `nats-object://` URI.
    pub(in crate::shell) async fn put_card(&self, name: &str, bytes: Vec<u8>) -> Result<String> {
        let stored = self.card_objects.put_bytes(name, &bytes).await;
        stored.map_err(artifact_error)
    }

    /// Reads a JSON artifact from our bucket: a `nats-object://` URI or an object name.
    pub(in crate::shell) async fn get(&self, name: &str) -> Result<Value> {
        let bytes = self.artifacts.read_reference(name).await;
        let bucket = self.artifacts.bucket();
        let (bucket, name) = messages::payload::object_ref(name, bucket).unwrap_or((bucket, name));
        decode_artifact(&bytes.map_err(artifact_error)?, bucket, name)
    }

    /// Reads object `name` of the artifact bucket as it is stored (bytes, version, media
    /// type), no more than `Config::max_artifact_bytes`: what the node serves to readers.
    pub(in crate::shell) async fn read(
        &self,
        name: &str,
    ) -> std::result::Result<agent_sdk::ObjectRead, ArtifactError> {
        self.artifacts.read_direct(name).await
    }

    /// Reads a JSON artifact from a bucket: only the mesh's artifact bucket is read, and
    /// no more than `Config::max_artifact_bytes`.
    pub(in crate::shell) async fn get_in(&self, bucket: &str, name: &str) -> Result<Value> {
        let bytes = self.artifacts.get_bytes(bucket, name).await;
        decode_artifact(&bytes.map_err(artifact_error)?, bucket, name)
    }
}

/// The node's error for the artifact store's: a missing object is missing, a foreign
/// bucket or an object over the limit is refused, the rest is a connection error (worth
/// retrying) or a setup error.
pub(in crate::shell) fn artifact_error(e: ArtifactError) -> Error {
    use ArtifactError as A;
    match e {
        A::BadUri(name) => Error::Missing(format!("artifact '{name}' (not an artifact name)")),
        A::NotFound { bucket, name } => {
            Error::Missing(format!("artifact '{name}' in bucket '{bucket}'"))
        }
        e @ (A::ForeignBucket { .. } | A::NotJson { .. }) => Error::Refused(e.to_string()),
        A::TooLarge {
            bucket,
            name,
            size,
            limit,
        } => Error::Refused(format!(
            "artifact '{name}' of {bucket} is {size} bytes, over the limit of {limit} bytes"
        )),
        A::Bucket { bucket, reason } => Error::Setup {
            resource: format!("object store {bucket}"),
            source: reason.into(),
        },
        A::Read {
            bucket,
            name,
            reason,
        } => Error::Connection {
            context: format!("reading artifact {name} of {bucket}"),
            source: reason.into(),
        },
        A::Write {
            bucket,
            name,
            reason,
        } => Error::Connection {
            context: format!("storing object {name} in {bucket}"),
            source: reason.into(),
        },
    }
}

/// The JSON value of artifact `name` of `bucket`.
fn decode_artifact(bytes: &[u8], bucket: &str, name: &str) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|source| Error::Encoding {
        context: format!("reading artifact {name} of {bucket}"),
        source,
    })
}
