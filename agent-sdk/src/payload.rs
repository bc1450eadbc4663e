//! The object-store half of how values travel in parts: large values stored in the
//! JetStream object store and referred to by a `nats-object://` FilePart. The conventions
//! themselves (wrapping, the URI's shape) are in [`messages::payload`].

use async_nats::jetstream::{self, object_store};
use messages::payload::{artifact_part, parse_object_uri, wrap};
use messages::Part;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use crate::error::ArtifactError;

/// The default size (bytes of serialised JSON) above which inputs and outputs travel
/// through the object store: 256 KiB.
pub const DEFAULT_ARTIFACT_THRESHOLD: usize = 256 * 1024;

/// The largest artifact read into memory: 64 MiB.
pub const MAX_ARTIFACT_BYTES: usize = 64 * 1024 * 1024;

/// Reads and writes JSON artifacts in the JetStream object store. The namespace's bucket
/// (`{ns}_artifacts`) is opened, or created, on first write; reads open the bucket a
/// reference names.
pub struct Artifacts {
    js: jetstream::Context,
    bucket: String,
    store: OnceCell<object_store::ObjectStore>,
}

impl std::fmt::Debug for Artifacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifacts")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

impl Artifacts {
    /// Artifacts of the namespace `ns`, through `client`.
    pub fn new(client: async_nats::Client, ns: &str) -> Self {
        Artifacts {
            js: jetstream::new(client),
            bucket: messages::subjects::artifact_bucket(ns),
            store: OnceCell::new(),
        }
    }

    /// The namespace's bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    async fn own_store(&self) -> Result<&object_store::ObjectStore, ArtifactError> {
        self.store
            .get_or_try_init(|| open_or_create(&self.js, &self.bucket))
            .await
    }

    /// Stores `value` as JSON under `name` in the namespace's bucket.
    pub async fn put_json(&self, name: &str, value: &Value) -> Result<(), ArtifactError> {
        let bytes = serde_json::to_vec(value).map_err(|e| ArtifactError::Write {
            bucket: self.bucket.clone(),
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        self.put_bytes(name, &bytes).await
    }

    /// Stores serialised JSON under `name` in the namespace's bucket.
    pub async fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<(), ArtifactError> {
        let store = self.own_store().await?;
        let mut reader = bytes;
        store
            .put(name, &mut reader)
            .await
            .map_err(|e| ArtifactError::Write {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(())
    }

    /// Reads the JSON artifact `name` of `bucket`.
    pub async fn get_json(&self, bucket: &str, name: &str) -> Result<Value, ArtifactError> {
        let read_err = |reason: String| ArtifactError::Read {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
            reason,
        };
        let store = if bucket == self.bucket {
            self.own_store().await?.clone()
        } else {
            self.js
                .get_object_store(bucket)
                .await
                .map_err(|e| read_err(e.to_string()))?
        };
        let mut object = store.get(name).await.map_err(|e| read_err(e.to_string()))?;
        let size = object.info().size;
        if size > MAX_ARTIFACT_BYTES {
            return Err(ArtifactError::TooLarge {
                bucket: bucket.to_owned(),
                name: name.to_owned(),
                size,
                limit: MAX_ARTIFACT_BYTES,
            });
        }
        let mut bytes = Vec::with_capacity(size);
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| read_err(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| ArtifactError::NotJson {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Reads the JSON artifact a `nats-object://` URI names.
    pub async fn get_uri(&self, uri: &str) -> Result<Value, ArtifactError> {
        let (bucket, name) =
            parse_object_uri(uri).ok_or_else(|| ArtifactError::BadUri(uri.to_owned()))?;
        self.get_json(bucket, name).await
    }

    /// The part carrying `value`: inline (see [`messages::payload::wrap`]) when its JSON is at most
    /// `threshold` bytes, else stored under `name` and referred to by a FilePart.
    pub async fn encode(
        &self,
        value: Value,
        name: &str,
        threshold: usize,
    ) -> Result<Part, ArtifactError> {
        let bytes = serde_json::to_vec(&value).map_err(|e| ArtifactError::Write {
            bucket: self.bucket.clone(),
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        if bytes.len() <= threshold {
            return Ok(wrap(value));
        }
        self.put_bytes(name, &bytes).await?;
        Ok(artifact_part(&self.bucket, name))
    }
}

/// The object store `bucket`, created when it does not exist yet (another process may
/// create it in between: then it is opened).
pub(crate) async fn open_or_create(
    js: &jetstream::Context,
    bucket: &str,
) -> Result<object_store::ObjectStore, ArtifactError> {
    if let Ok(store) = js.get_object_store(bucket).await {
        return Ok(store);
    }
    let created = js
        .create_object_store(object_store::Config {
            bucket: bucket.to_owned(),
            description: Some("mesh artifacts (large inputs and outputs)".into()),
            ..Default::default()
        })
        .await;
    match created {
        Ok(store) => Ok(store),
        Err(e) => js
            .get_object_store(bucket)
            .await
            .map_err(|_| ArtifactError::Bucket {
                bucket: bucket.to_owned(),
                reason: e.to_string(),
            }),
    }
}
