//! The one artifact store of the mesh: the JetStream object store bucket of a namespace
//! (`{ns}_artifacts`), as agents, callers and the workflow node read and write it.
//!
//! Two kinds of use share it. Values travelling in parts: [`ArtifactStore::encode`] stores
//! a large JSON value and gives the FilePart that refers to it, [`ArtifactStore::get_uri`]
//! and [`ArtifactStore::get_json`] read one back (the wrapping conventions and the URI's
//! shape are in [`messages::payload`]). Versioned artifacts: [`ArtifactStore::put`] stores
//! bytes under a name and returns an [`ArtifactRef`] `{name, version}`,
//! [`ArtifactStore::get`] reads one back, [`ArtifactStore::list`] lists those of a run.
//!
//! Reads are protected, because a reference arrives from the network: only the store's
//! own bucket is read (a reference to another bucket would make the reader, a workflow
//! node say, read its private buckets for whoever sent it), and never more than
//! [`ArtifactStore::max_bytes`] (the size is checked before reading, and the read itself
//! stops one byte past the cap). A store of a namespace reads through the namespace's
//! workflow nodes when one answers (`docs/protocol.md`, "Reading an artifact"): readers
//! have no JetStream API on the bucket under the shipped permissions, since its subjects
//! take wildcards. The names it makes for large inputs and outputs carry 128 random bits
//! or more ([`unguessable`]): a name is the key to its object.
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
use std::time::Duration;

use async_nats::jetstream::{self, object_store};
use futures::StreamExt;
use messages::payload::{
    artifact_part, object_ref, object_uri, parse_object_uri, split_version_key, version_key, wrap,
    JSON_MIME,
};
use messages::workflow::ArtifactRef;
use messages::Part;
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::error::ArtifactError;

/// The default size (bytes of serialised JSON) above which inputs and outputs travel
/// through the object store: 256 KiB.
pub const DEFAULT_ARTIFACT_THRESHOLD: usize = 256 * 1024;

/// The largest artifact read into memory unless told otherwise: 64 MiB.
pub const MAX_ARTIFACT_BYTES: usize = 64 * 1024 * 1024;

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

/// The artifacts of one namespace (see the module doc), optionally attributed to a run.
pub struct ArtifactStore {
    js: jetstream::Context,
    bucket: String,
    store: OnceCell<object_store::ObjectStore>,
    max_bytes: usize,
    run: Option<String>,
    replicas: usize,
    max_age: Duration,
    /// The namespace whose workflow nodes serve reads of this bucket, when asked first.
    served_by: Option<String>,
    capacity: u64,
}

/// An object read back: the version it is (when it is one of a versioned artifact), its
/// media type and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRead {
    /// The version read: a link followed to the version it points at.
    pub version: Option<u64>,
    /// The media type stored with it (`application/octet-stream` when none).
    pub mime: String,
    /// The content.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for ArtifactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactStore")
            .field("bucket", &self.bucket)
            .field("max_bytes", &self.max_bytes)
            .field("run", &self.run)
            .field("replicas", &self.replicas)
            .field("max_age", &self.max_age)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl ArtifactStore {
    /// The artifacts of namespace `ns`, through `client`; reads and versioned puts are
    /// capped at [`MAX_ARTIFACT_BYTES`], puts belong to no run, and a bucket created here
    /// has one replica and keeps its objects.
    pub fn new(client: async_nats::Client, ns: &str) -> Self {
        let mut store = ArtifactStore::in_bucket(client, messages::subjects::artifact_bucket(ns));
        store.served_by = Some(ns.to_owned());
        store
    }

    /// [`ArtifactStore::new`] on bucket `bucket` (a workflow node keeps the contents of
    /// its large cards in a bucket of their own); reads refuse every other bucket.
    pub fn in_bucket(client: async_nats::Client, bucket: impl Into<String>) -> Self {
        ArtifactStore {
            js: jetstream::new(client),
            bucket: bucket.into(),
            store: OnceCell::new(),
            max_bytes: MAX_ARTIFACT_BYTES,
            run: None,
            replicas: 1,
            max_age: Duration::ZERO,
            served_by: None,
            capacity: 0,
        }
    }

    /// Reads from JetStream itself, never asking a workflow node (see
    /// [`read_object`](Self::read_object)): what a workflow node's own store does.
    pub fn read_directly(mut self) -> Self {
        self.served_by = None;
        self
    }

    /// Caps the size of what [`put`](Self::put) stores and every read loads.
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// The bucket, when this store creates it, has `replicas` replicas (default 1).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Objects expire `max_age` after they are stored (default zero: never). A bucket
    /// found without an age limit (made by an agent, or an older version) is given this
    /// one, so a deployment that sets a retention bounds what is kept.
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// The bucket holds at most `bytes` in all (default zero: no limit); once full, new
    /// objects are refused until old ones expire. A bucket found with another limit (or
    /// none) is given this one.
    pub fn capacity(mut self, bytes: u64) -> Self {
        self.capacity = bytes;
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
            .get_or_try_init(|| {
                open_or_create(
                    &self.js,
                    &self.bucket,
                    self.replicas,
                    self.max_age,
                    self.capacity,
                )
            })
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
        let run = self.run.as_deref().unwrap_or("");
        let version_text = version.to_string();
        put_linked(store, (name, &key), [&version_text, mime, run], bytes)
            .await
            .map_err(write_err)?;
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
        let read = self.read_object(&key).await?;
        Ok(Artifact {
            reference: ArtifactRef {
                name: reference.name.clone(),
                version: read.version,
            },
            mime: read.mime,
            bytes: read.bytes,
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

    /// Stores `value` as JSON under `name` (a plain object, unversioned); returns its
    /// `nats-object://` URI.
    pub async fn put_json(&self, name: &str, value: &Value) -> Result<String, ArtifactError> {
        let bytes = serde_json::to_vec(value).map_err(|e| ArtifactError::Write {
            bucket: self.bucket.clone(),
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        self.put_bytes(name, &bytes).await
    }

    /// Stores `bytes` under `name` (a plain object, unversioned, not capped); returns its
    /// `nats-object://` URI.
    pub async fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<String, ArtifactError> {
        let store = self.open().await?;
        let mut reader = bytes;
        store
            .put(name, &mut reader)
            .await
            .map_err(|e| ArtifactError::Write {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(object_uri(&self.bucket, name))
    }

    /// Stores JSON `bytes` as version 1 of artifact `name` of run `run`, with the link
    /// `name` pointing at it, as [`put`](Self::put) lays versions out (not capped). For
    /// names fixed by their run, whose writer may store them again after a crash: a
    /// second put writes the same objects. Returns the versioned object's URI.
    pub async fn put_first_version(
        &self,
        name: &str,
        run: &str,
        bytes: &[u8],
    ) -> Result<String, ArtifactError> {
        let key = version_key(name, 1);
        let write_err = |reason: String| ArtifactError::Write {
            bucket: self.bucket.clone(),
            name: key.clone(),
            reason,
        };
        let store = self.open().await?;
        put_linked(store, (name, &key), ["1", JSON_MIME, run], bytes)
            .await
            .map_err(write_err)?;
        Ok(object_uri(&self.bucket, &key))
    }

    /// Reads the bytes of object `name` of `bucket`: refused for any bucket but this
    /// store's, and for objects over the cap (see the module doc).
    pub async fn get_bytes(&self, bucket: &str, name: &str) -> Result<Vec<u8>, ArtifactError> {
        if bucket != self.bucket {
            return Err(ArtifactError::ForeignBucket {
                bucket: bucket.to_owned(),
                name: name.to_owned(),
                own: self.bucket.clone(),
            });
        }
        Ok(self.read_object(name).await?.bytes)
    }

    /// Reads object `name` of this store's bucket (a link followed to what it points at),
    /// refused when it is over the cap. A store of a namespace asks the namespace's
    /// workflow nodes first ([`messages::subjects::artifact_get`]): the only read the
    /// shipped permissions give callers and agents. Where no node answers (a mesh without
    /// one, or one that allows JetStream reads), it reads from JetStream itself.
    async fn read_object(&self, name: &str) -> Result<ObjectRead, ArtifactError> {
        if let Some(ns) = &self.served_by {
            let client = self.js.client();
            let served = crate::artifact_get::read(&client, ns, &self.bucket, name, self.max_bytes);
            if let Some(read) = served.await {
                return read;
            }
        }
        self.read_direct(name).await
    }

    /// Reads object `name` of this store's bucket from JetStream (a link followed to what
    /// it points at), refused when its stated size, or what it turns out to hold, is over
    /// the cap: the one bounded read of the store, and what a workflow node serves. It
    /// asks the server for the object's latest metadata by its name, and for its chunks
    /// through a consumer whose create request names it and filters on that object's
    /// chunk subject.
    pub async fn read_direct(&self, name: &str) -> Result<ObjectRead, ArtifactError> {
        let store = self.open().await?;
        let info = self.info_followed(store, name).await?;
        if info.size > self.max_bytes {
            return Err(ArtifactError::TooLarge {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                size: info.size,
                limit: self.max_bytes,
            });
        }
        let bytes = self
            .read_chunks(&info)
            .await
            .map_err(|e| self.capped_err(name, e))?;
        let version = info
            .metadata
            .get(META_VERSION)
            .and_then(|v| v.parse().ok())
            .or_else(|| split_version_key(&info.name).map(|(_, v)| v));
        Ok(ObjectRead {
            version,
            mime: mime_of(&info.metadata),
            bytes,
        })
    }

    /// The info of object `name`, a link followed (once, within this bucket) to its target.
    async fn info_followed(
        &self,
        store: &object_store::ObjectStore,
        name: &str,
    ) -> Result<object_store::ObjectInfo, ArtifactError> {
        let info = self.info_of(store, name).await?;
        let Some(link) = info.options.as_ref().and_then(|o| o.link.clone()) else {
            return Ok(info);
        };
        let target = match link.name {
            Some(target) if link.bucket == self.bucket => target,
            _ => {
                return Err(ArtifactError::ForeignBucket {
                    bucket: link.bucket,
                    name: name.to_owned(),
                    own: self.bucket.clone(),
                })
            }
        };
        let info = self.info_of(store, &target).await?;
        if info.options.as_ref().is_some_and(|o| o.link.is_some()) {
            return Err(ArtifactError::Read {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                reason: format!("'{target}' is a link to a link"),
            });
        }
        Ok(info)
    }

    /// The info of object `name` itself; a deleted object is not found.
    async fn info_of(
        &self,
        store: &object_store::ObjectStore,
        name: &str,
    ) -> Result<object_store::ObjectInfo, ArtifactError> {
        let not_found = || ArtifactError::NotFound {
            bucket: self.bucket.clone(),
            name: name.to_owned(),
        };
        match store.info(name).await {
            Ok(info) if info.deleted => Err(not_found()),
            Ok(info) => Ok(info),
            Err(e) if e.kind() == object_store::InfoErrorKind::NotFound => Err(not_found()),
            Err(e) => Err(ArtifactError::Read {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                reason: e.to_string(),
            }),
        }
    }

    /// The chunks of the object `info` describes, through an ordered consumer named here
    /// and filtered on the object's chunk subject (`$O.{bucket}.C.{nuid}`): the request
    /// names both in its subject, the only consumer the shipped permissions let a reader
    /// make. Never more than the cap; the content is checked against the stated digest.
    async fn read_chunks(&self, info: &object_store::ObjectInfo) -> Result<Vec<u8>, Capped> {
        let cap = self.max_bytes;
        let mut bytes = Vec::with_capacity(info.size.min(cap));
        if info.chunks == 0 {
            return Ok(bytes);
        }
        let other = |e: &dyn std::fmt::Display| Capped::Io(std::io::Error::other(e.to_string()));
        let stream = self
            .js
            .get_stream(format!("OBJ_{}", self.bucket))
            .await
            .map_err(|e| other(&e))?;
        let consumer = stream
            .create_consumer(jetstream::consumer::push::OrderedConfig {
                name: Some(format!("read-{}", uuid::Uuid::new_v4().simple())),
                deliver_subject: self.js.client().new_inbox(),
                filter_subject: format!("$O.{}.C.{}", self.bucket, info.nuid),
                ..Default::default()
            })
            .await
            .map_err(|e| other(&e))?;
        let mut chunks = consumer.messages().await.map_err(|e| other(&e))?;
        for _ in 0..info.chunks {
            let chunk = match chunks.next().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => return Err(other(&e)),
                None => return Err(other(&"the object's chunks ended early")),
            };
            if bytes.len() + chunk.payload.len() > cap {
                return Err(Capped::Over);
            }
            bytes.extend_from_slice(&chunk.payload);
        }
        check_digest(info, &bytes).map_err(|e| other(&e))?;
        Ok(bytes)
    }

    /// Reads the JSON object `name` of `bucket` (see [`get_bytes`](Self::get_bytes)).
    pub async fn get_json(&self, bucket: &str, name: &str) -> Result<Value, ArtifactError> {
        let bytes = self.get_bytes(bucket, name).await?;
        serde_json::from_slice(&bytes).map_err(|e| ArtifactError::NotJson {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Reads the JSON object a `nats-object://` URI names.
    pub async fn get_uri(&self, uri: &str) -> Result<Value, ArtifactError> {
        let (bucket, name) =
            parse_object_uri(uri).ok_or_else(|| ArtifactError::BadUri(uri.to_owned()))?;
        self.get_json(bucket, name).await
    }

    /// Reads the bytes of the object `reference` names: a `nats-object://` URI, or an
    /// object name in this store's bucket. A versioned name (`{name}@v{v}`) that is not
    /// found is read as the plain `name`: an agent may report `{name, version}` of an
    /// object it stored unversioned.
    pub async fn read_reference(&self, reference: &str) -> Result<Vec<u8>, ArtifactError> {
        let (bucket, name) = object_ref(reference, &self.bucket)
            .ok_or_else(|| ArtifactError::BadUri(reference.to_owned()))?;
        match self.get_bytes(bucket, name).await {
            Err(missing @ ArtifactError::NotFound { .. }) => match split_version_key(name) {
                Some((plain, _)) => self.get_bytes(bucket, plain).await.map_err(|_| missing),
                None => Err(missing),
            },
            other => other,
        }
    }

    /// The part carrying `value`: inline (see [`messages::payload::wrap`]) when its JSON is
    /// at most `threshold` bytes, else stored under `name` and referred to by a FilePart.
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

    /// The error of a capped read of `name` that failed.
    fn capped_err(&self, name: &str, e: Capped) -> ArtifactError {
        match e {
            Capped::Over => ArtifactError::TooLarge {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                size: self.max_bytes + 1,
                limit: self.max_bytes,
            },
            Capped::Io(e) => ArtifactError::Read {
                bucket: self.bucket.clone(),
                name: name.to_owned(),
                reason: e.to_string(),
            },
        }
    }
}

/// Why a capped read stopped.
enum Capped {
    /// More than the cap arrived (the object grew past its stated size).
    Over,
    /// Reading failed.
    Io(std::io::Error),
}

/// Whether `bytes` are what `info`'s digest (`SHA-256=` and URL-safe base64) says.
fn check_digest(info: &object_store::ObjectInfo, bytes: &[u8]) -> Result<(), String> {
    use sha2::Digest as _;
    let Some(stated) = info.digest.as_deref() else {
        return Ok(());
    };
    let Some(stated) = stated.strip_prefix("SHA-256=") else {
        return Err(format!("an unknown digest '{stated}'"));
    };
    let actual = data_encoding::BASE64URL.encode(&sha2::Sha256::digest(bytes));
    if stated.trim_end_matches('=') != actual.trim_end_matches('=') {
        return Err("the content does not match its digest".into());
    }
    Ok(())
}

/// A random part for the names of objects made for inputs and outputs: 244 random bits
/// (two version-4 UUIDs), so that nobody finds such an object without being handed its
/// name.
pub fn unguessable() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The object store `bucket`, created when it does not exist yet with `replicas`,
/// `max_age` and `capacity` bytes at most (another process may create it in between: then
/// it is opened). A bucket found without an age limit is given `max_age` when that is not
/// zero, and one with another byte limit `capacity` when that is not zero.
async fn open_or_create(
    js: &jetstream::Context,
    bucket: &str,
    replicas: usize,
    max_age: Duration,
    capacity: u64,
) -> Result<object_store::ObjectStore, ArtifactError> {
    let bucket_err = |reason: String| ArtifactError::Bucket {
        bucket: bucket.to_owned(),
        reason,
    };
    let max_bytes = match capacity {
        0 => -1,
        n => i64::try_from(n).unwrap_or(i64::MAX),
    };
    if let Ok(store) = js.get_object_store(bucket).await {
        give_limits(js, bucket, max_age, max_bytes)
            .await
            .map_err(|e| bucket_err(e.to_string()))?;
        return Ok(store);
    }
    let created = js
        .create_object_store(object_store::Config {
            bucket: bucket.to_owned(),
            description: Some("mesh artifacts (large inputs and outputs)".into()),
            num_replicas: replicas,
            max_age,
            max_bytes,
            ..Default::default()
        })
        .await;
    match created {
        Ok(store) => Ok(store),
        Err(e) => js
            .get_object_store(bucket)
            .await
            .map_err(|_| bucket_err(e.to_string())),
    }
}

/// Gives the stream of object store `bucket` the age limit `max_age` when it has none
/// (and `max_age` is not zero), and the byte limit `max_bytes` when it has another (and
/// `max_bytes` sets one).
async fn give_limits(
    js: &jetstream::Context,
    bucket: &str,
    max_age: Duration,
    max_bytes: i64,
) -> Result<(), async_nats::Error> {
    if max_age.is_zero() && max_bytes < 0 {
        return Ok(());
    }
    let mut stream = js.get_stream(format!("OBJ_{bucket}")).await?;
    let info = stream.info().await?;
    let mut config = info.config.clone();
    if config.max_age.is_zero() && !max_age.is_zero() {
        config.max_age = max_age;
        // The server wants the duplicate window within the age limit.
        config.duplicate_window = config.duplicate_window.min(max_age);
    }
    if max_bytes >= 0 {
        config.max_bytes = max_bytes;
    }
    if config != info.config {
        js.update_stream(config).await?;
    }
    Ok(())
}

fn mime_of(metadata: &HashMap<String, String>) -> String {
    metadata
        .get(META_MIME)
        .filter(|m| !m.is_empty())
        .cloned()
        .unwrap_or_else(|| "application/octet-stream".into())
}

/// Stores `bytes` as object `key` of version `[version, mime, run]` of artifact `name`,
/// and points the link `name` at it: how every version is laid out. The error is the
/// reason, for the caller to name the object.
async fn put_linked(
    store: &object_store::ObjectStore,
    (name, key): (&str, &str),
    [version, mime, run]: [&str; 3],
    bytes: &[u8],
) -> Result<object_store::ObjectInfo, String> {
    let metadata: HashMap<String, String> = [
        (META_ARTIFACT, name),
        (META_VERSION, version),
        (META_MIME, mime),
        (META_RUN, run),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let meta = object_store::ObjectMetadata {
        name: key.to_owned(),
        metadata,
        ..Default::default()
    };
    let mut reader = bytes;
    let info = store
        .put(meta, &mut reader)
        .await
        .map_err(|e| e.to_string())?;
    store
        .add_link(name, &info)
        .await
        .map_err(|e| format!("pointing '{name}' at {key}: {e}"))?;
    Ok(info)
}
