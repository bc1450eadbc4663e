//! Versioned artifacts in the JetStream object store: [`ArtifactStore::put`] stores bytes
//! under a name and returns an [`ArtifactRef`] `{name, version}`, [`ArtifactStore::get`]
//! reads one back, [`ArtifactStore::list`] lists those of a run.
//!
//! Layout (see `docs/protocol.md`, "Artifacts"): version `v` of artifact `name` is the
//! object `{name}@v{v}` of the namespace's bucket (`{ns}_artifacts`), with metadata
//! `artifact`, `version`, `mime` and `run`; the object `name` is a link to the latest
//! version. So `nats-object://{bucket}/{name}@v{v}` pins a version, and
//! `nats-object://{bucket}/{name}` follows the latest: either is what a workflow or agent
//! takes as input (a FilePart with that URI, [`ArtifactStore::input_part`]), and what the
//! workflow node names in its results (`output_artifact_ref`).
//!
//! Versions are numbered from 1 by the writer: a put reads the latest version and writes
//! the next. Two processes putting the same name at the same moment may both write the
//! same version (the last write wins); give concurrent writers distinct names.

use std::collections::HashMap;

use async_nats::jetstream::{self, object_store};
use futures::StreamExt;
use messages::payload::{object_uri, split_version_key, version_key};
use messages::workflow::ArtifactRef;
use messages::Part;
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use crate::error::ArtifactError;
use crate::payload::MAX_ARTIFACT_BYTES;

/// Metadata key: the artifact's name (without its version suffix).
const META_ARTIFACT: &str = "artifact";
/// Metadata key: the version, in decimal.
const META_VERSION: &str = "version";
/// Metadata key: the media type given at put.
const META_MIME: &str = "mime";
/// Metadata key: the run the artifact belongs to (empty when none).
const META_RUN: &str = "run";

/// An artifact read back: its reference, media type and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Name and version of what was read (the version resolved, when the latest was asked).
    pub reference: ArtifactRef,
    /// The media type given when it was stored (`application/octet-stream` when none).
    pub mime: String,
    /// The content.
    pub bytes: Vec<u8>,
}

/// What [`ArtifactStore::list`] says of one stored version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactInfo {
    /// Name and version.
    pub reference: ArtifactRef,
    /// The media type given when it was stored.
    pub mime: String,
    /// Its size in bytes.
    pub size: usize,
    /// The run it belongs to, if any.
    pub run: Option<String>,
}

/// Versioned artifacts of one namespace, optionally attributed to a run.
pub struct ArtifactStore {
    js: jetstream::Context,
    bucket: String,
    store: OnceCell<object_store::ObjectStore>,
    max_bytes: usize,
    run: Option<String>,
}

impl std::fmt::Debug for ArtifactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactStore")
            .field("bucket", &self.bucket)
            .field("max_bytes", &self.max_bytes)
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl ArtifactStore {
    /// The artifacts of namespace `ns`, through `client`; puts are capped at
    /// [`MAX_ARTIFACT_BYTES`] and belong to no run.
    pub fn new(client: async_nats::Client, ns: &str) -> Self {
        ArtifactStore {
            js: jetstream::new(client),
            bucket: messages::subjects::artifact_bucket(ns),
            store: OnceCell::new(),
            max_bytes: MAX_ARTIFACT_BYTES,
            run: None,
        }
    }

    /// Caps the size of what [`put`](Self::put) stores and [`get`](Self::get) loads.
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Attributes what [`put`](Self::put) stores to run `run` (see [`list`](Self::list)).
    pub fn for_run(mut self, run: impl Into<String>) -> Self {
        self.run = Some(run.into());
        self
    }

    /// The bucket's name (`{ns}_artifacts`).
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The `nats-object://` URI of a reference: pinned to its version when it has one.
    pub fn uri(&self, reference: &ArtifactRef) -> String {
        object_uri(&self.bucket, &reference.object_key())
    }

    /// The FilePart that passes the artifact to a workflow or agent as its input.
    pub fn input_part(&self, reference: &ArtifactRef, mime: Option<&str>) -> Part {
        Part::file_uri(
            self.uri(reference),
            Some(reference.name.clone()),
            mime.map(str::to_owned),
        )
    }

    async fn open(&self) -> Result<&object_store::ObjectStore, ArtifactError> {
        self.store
            .get_or_try_init(|| crate::payload::open_or_create(&self.js, &self.bucket))
            .await
    }

    /// Stores `bytes` as the next version of artifact `name` and returns its reference.
    /// Refused, with nothing stored: an empty name, one containing `://` or ending like a
    /// version (`@v3`), and content larger than the cap ([`ArtifactError::TooLarge`]).
    pub async fn put(
        &self,
        name: &str,
        bytes: impl AsRef<[u8]>,
        mime: &str,
    ) -> Result<ArtifactRef, ArtifactError> {
        let bytes = bytes.as_ref();
        let write_err = |reason: String| ArtifactError::Write {
            bucket: self.bucket.clone(),
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() || name.contains("://") || split_version_key(name).is_some() {
            return Err(write_err(
                "not a valid artifact name (it must be non-empty, not a URI, and not end \
                 in a version suffix like '@v3')"
                    .into(),
            ));
        }
        if bytes.len() > self.max_bytes {
            return Err(ArtifactError::TooLarge {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                size: bytes.len(),
                limit: self.max_bytes,
            });
        }
        let store = self.open().await?;
        let version = self.latest(store, name).await?.map_or(1, |v| v + 1);
        let key = version_key(name, version);
        let metadata: HashMap<String, String> = [
            (META_ARTIFACT, name),
            (META_VERSION, &version.to_string()),
            (META_MIME, mime),
            (META_RUN, self.run.as_deref().unwrap_or("")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let meta = object_store::ObjectMetadata {
            name: key.clone(),
            metadata,
            ..Default::default()
        };
        let mut reader = bytes;
        let info = store
            .put(meta, &mut reader)
            .await
            .map_err(|e| write_err(e.to_string()))?;
        store
            .add_link(name, &info)
            .await
            .map_err(|e| write_err(format!("pointing '{name}' at {key}: {e}")))?;
        Ok(ArtifactRef {
            name: name.to_owned(),
            version: Some(version),
        })
    }

    /// The latest version of `name`: the version its link points at; `None` when there
    /// is none. An unversioned object of that name (stored by other means) is an error.
    async fn latest(
        &self,
        store: &object_store::ObjectStore,
        name: &str,
    ) -> Result<Option<u64>, ArtifactError> {
        match store.info(name).await {
            Ok(info) => {
                let target = info
                    .options
                    .as_ref()
                    .and_then(|o| o.link.as_ref())
                    .and_then(|l| l.name.as_deref());
                match target.and_then(split_version_key) {
                    Some((_, v)) => Ok(Some(v)),
                    None => Err(ArtifactError::Write {
                        bucket: self.bucket.clone(),
                        name: name.to_owned(),
                        reason: "an unversioned object already has this name".into(),
                    }),
                }
            }
            Err(e) if e.kind() == object_store::InfoErrorKind::NotFound => Ok(None),
            Err(e) => Err(ArtifactError::Read {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                reason: e.to_string(),
            }),
        }
    }

    /// Reads an artifact: the version the reference names, else the latest.
    pub async fn get(&self, reference: &ArtifactRef) -> Result<Artifact, ArtifactError> {
        let key = reference.object_key();
        let read_err = |reason: String| ArtifactError::Read {
            bucket: self.bucket.clone(),
            name: key.clone(),
            reason,
        };
        let store = self.open().await?;
        let mut object = store.get(&key).await.map_err(|e| read_err(e.to_string()))?;
        let info = object.info().clone();
        if info.size > self.max_bytes {
            return Err(ArtifactError::TooLarge {
                bucket: self.bucket.clone(),
                name: key,
                size: info.size,
                limit: self.max_bytes,
            });
        }
        let mut bytes = Vec::with_capacity(info.size);
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| read_err(e.to_string()))?;
        // A link is followed to the version it points at: `info` is that version's.
        let version = info
            .metadata
            .get(META_VERSION)
            .and_then(|v| v.parse().ok())
            .or_else(|| split_version_key(&info.name).map(|(_, v)| v));
        Ok(Artifact {
            reference: ArtifactRef {
                name: reference.name.clone(),
                version,
            },
            mime: mime_of(&info.metadata),
            bytes,
        })
    }

    /// Every stored version whose run is `run` (a workflow run's execution id, for the
    /// outputs the workflow node stores), by name then version. Reads the bucket's whole
    /// listing.
    pub async fn list(&self, run: &str) -> Result<Vec<ArtifactInfo>, ArtifactError> {
        let list_err = |reason: String| ArtifactError::Bucket {
            bucket: self.bucket.clone(),
            reason,
        };
        let store = self.open().await?;
        let mut objects = store.list().await.map_err(|e| list_err(e.to_string()))?;
        let mut found = Vec::new();
        while let Some(info) = objects.next().await {
            let info = info.map_err(|e| list_err(e.to_string()))?;
            let is_link = info.options.as_ref().is_some_and(|o| o.link.is_some());
            if info.deleted || is_link {
                continue;
            }
            if info.metadata.get(META_RUN).map(String::as_str) != Some(run) {
                continue;
            }
            let Some((name, version)) = split_version_key(&info.name) else {
                continue;
            };
            found.push(ArtifactInfo {
                reference: ArtifactRef {
                    name: name.to_owned(),
                    version: Some(version),
                },
                mime: mime_of(&info.metadata),
                size: info.size,
                run: Some(run.to_owned()),
            });
        }
        found.sort_by(|a, b| {
            (&a.reference.name, a.reference.version).cmp(&(&b.reference.name, b.reference.version))
        });
        Ok(found)
    }
}

fn mime_of(metadata: &HashMap<String, String>) -> String {
    metadata
        .get(META_MIME)
        .filter(|m| !m.is_empty())
        .cloned()
        .unwrap_or_else(|| "application/octet-stream".into())
}
