//! How JSON values travel in parts: non-objects wrapped as `{"value": ...}` with metadata
//! `mesh_wrapped`, large values stored in the JetStream object store and referred to by a
//! FilePart `nats-object://{bucket}/{name}` (see `docs/protocol.md`).
//!
//! The pure half ([`wrap`], [`unwrap_data`], [`object_uri`], [`parse_object_uri`]) is apart
//! from the I/O half ([`Artifacts`]).

use async_nats::jetstream::{self, object_store};
use messages::{JsonObject, Part};
use serde_json::{Map, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use crate::error::ArtifactError;

/// Part metadata key marking a DataPart whose `data` is `{"value": <non-object>}`.
pub const MESH_WRAPPED: &str = "mesh_wrapped";

/// The URI scheme of object-store references.
pub const OBJECT_SCHEME: &str = "nats-object://";

/// Media type of stored JSON artifacts.
pub const JSON_MIME: &str = "application/json";

/// The default size (bytes of serialised JSON) above which inputs and outputs travel
/// through the object store: 256 KiB.
pub const DEFAULT_ARTIFACT_THRESHOLD: usize = 256 * 1024;

/// The largest artifact read into memory: 64 MiB.
pub const MAX_ARTIFACT_BYTES: usize = 64 * 1024 * 1024;

/// The DataPart carrying `value`: the object itself, or `{"value": value}` with metadata
/// `mesh_wrapped: true` when `value` is not an object.
pub fn wrap(value: Value) -> Part {
    match value {
        Value::Object(data) => Part::data(data),
        other => {
            let mut data = Map::new();
            data.insert("value".into(), other);
            let mut metadata = Map::new();
            metadata.insert(MESH_WRAPPED.into(), Value::Bool(true));
            Part::Data {
                data,
                metadata: Some(metadata),
            }
        }
    }
}

/// Whether part metadata says the content is wrapped.
pub fn is_wrapped(metadata: Option<&JsonObject>) -> bool {
    metadata
        .and_then(|m| m.get(MESH_WRAPPED))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The value a DataPart carries: `data.value` when wrapped, else `data` as an object.
pub fn unwrap_data(data: &JsonObject, metadata: Option<&JsonObject>) -> Value {
    if is_wrapped(metadata) {
        data.get("value").cloned().unwrap_or(Value::Null)
    } else {
        Value::Object(data.clone())
    }
}

/// `nats-object://{bucket}/{name}`.
pub fn object_uri(bucket: &str, name: &str) -> String {
    format!("{OBJECT_SCHEME}{bucket}/{name}")
}

/// `(bucket, name)` of `nats-object://{bucket}/{name}`; the name may contain `/`.
pub fn parse_object_uri(uri: &str) -> Result<(&str, &str), ArtifactError> {
    let bad = || ArtifactError::BadUri(uri.to_owned());
    let rest = uri.strip_prefix(OBJECT_SCHEME).ok_or_else(bad)?;
    let (bucket, name) = rest.split_once('/').ok_or_else(bad)?;
    if bucket.is_empty() || name.is_empty() {
        return Err(bad());
    }
    Ok((bucket, name))
}

/// The FilePart referring to a stored JSON artifact.
pub fn artifact_part(bucket: &str, name: &str) -> Part {
    Part::file_uri(
        object_uri(bucket, name),
        Some(name.to_owned()),
        Some(JSON_MIME.to_owned()),
    )
}

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
            .get_or_try_init(|| async {
                if let Ok(store) = self.js.get_object_store(&self.bucket).await {
                    return Ok(store);
                }
                let created = self
                    .js
                    .create_object_store(object_store::Config {
                        bucket: self.bucket.clone(),
                        description: Some("mesh artifacts (large inputs and outputs)".into()),
                        ..Default::default()
                    })
                    .await;
                match created {
                    Ok(store) => Ok(store),
                    // Another process may have created it in between.
                    Err(e) => self.js.get_object_store(&self.bucket).await.map_err(|_| {
                        ArtifactError::Bucket {
                            bucket: self.bucket.clone(),
                            reason: e.to_string(),
                        }
                    }),
                }
            })
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
        let (bucket, name) = parse_object_uri(uri)?;
        self.get_json(bucket, name).await
    }

    /// The part carrying `value`: inline (see [`wrap`]) when its JSON is at most
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_objects_are_wrapped_and_unwrapped() {
        for v in [
            json!(3),
            json!("s"),
            json!([1, 2]),
            json!(null),
            json!({"a": 1}),
        ] {
            let Part::Data { data, metadata } = wrap(v.clone()) else {
                panic!("wrap gives a DataPart")
            };
            assert_eq!(is_wrapped(metadata.as_ref()), !v.is_object());
            assert_eq!(unwrap_data(&data, metadata.as_ref()), v);
        }
    }

    #[test]
    fn object_uris_round_trip() {
        let uri = object_uri("mesh_artifacts", "t1/out.json");
        assert_eq!(uri, "nats-object://mesh_artifacts/t1/out.json");
        assert_eq!(
            parse_object_uri(&uri).unwrap(),
            ("mesh_artifacts", "t1/out.json")
        );
        for bad in [
            "http://x/y",
            "nats-object://",
            "nats-object://b",
            "nats-object:///n",
        ] {
            assert!(parse_object_uri(bad).is_err(), "{bad}");
        }
    }
}
