//! The mesh's object store as the node uses it: the artifact bucket (inputs and outputs
//! too large for a message, a run's artifacts) and the bucket of card contents too large
//! for a card. A reference may name only the mesh's artifact bucket, and a read is
//! bounded by `Config::max_artifact_bytes`: a reference comes from whoever sent it.

use std::time::Duration;

use async_nats::jetstream::{self, object_store};
use messages::subjects;
use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::shell::error::{Context, Error, Result};
use crate::shell::run::names;

/// The node's handle on the object store: both buckets, made on first use.
pub(in crate::shell) struct Artifacts {
    js: jetstream::Context,
    ns: String,
    replicas: usize,
    /// How long artifacts are kept (the runs' retention).
    retention: Duration,
    /// The largest artifact read, in bytes.
    max_bytes: u64,
    artifacts: tokio::sync::OnceCell<object_store::ObjectStore>,
    card_objects: tokio::sync::OnceCell<object_store::ObjectStore>,
}

impl Artifacts {
    /// A handle on namespace `ns`'s buckets; nothing is made or read until first used.
    pub(in crate::shell) fn new(
        js: jetstream::Context,
        ns: &str,
        replicas: usize,
        retention: Duration,
        max_bytes: u64,
    ) -> Artifacts {
        Artifacts {
            js,
            ns: ns.to_string(),
            replicas,
            retention,
            max_bytes,
            artifacts: tokio::sync::OnceCell::new(),
            card_objects: tokio::sync::OnceCell::new(),
        }
    }

    /// The artifact bucket: objects expire after the retention (a run's artifacts are
    /// written while it runs, and a run never outlives it).
    async fn artifact_store(&self) -> Result<&object_store::ObjectStore> {
        self.artifacts
            .get_or_try_init(|| {
                let bucket = subjects::artifact_bucket(&self.ns);
                object_bucket(&self.js, bucket, self.replicas, self.retention)
            })
            .await
    }

    /// The bucket of card contents too large for a card: they live as long as the card.
    async fn card_store(&self) -> Result<&object_store::ObjectStore> {
        self.card_objects
            .get_or_try_init(|| {
                let bucket = names::cards_bucket(&self.ns);
                object_bucket(&self.js, bucket, self.replicas, Duration::ZERO)
            })
            .await
    }

    /// Stores an artifact; returns its `nats-object://` URI.
    pub(in crate::shell) async fn put(&self, name: &str, bytes: Vec<u8>) -> Result<String> {
        let store = self.artifact_store().await?;
        put_object(store, &subjects::artifact_bucket(&self.ns), name, bytes).await
    }

    /// Stores version 1 of a run's artifact (see [`put_versioned`]); returns its
    /// `nats-object://` URI.
    pub(in crate::shell) async fn put_run(
        &self,
        name: &str,
        run: &str,
        bytes: Vec<u8>,
    ) -> Result<String> {
        let store = self.artifact_store().await?;
        put_versioned(
            store,
            &subjects::artifact_bucket(&self.ns),
            name,
            run,
            bytes,
        )
        .await
    }

    /// Stores a card's content; returns its `nats-object://` URI.
    pub(in crate::shell) async fn put_card(&self, name: &str, bytes: Vec<u8>) -> Result<String> {
        let store = self.card_store().await?;
        put_object(store, &names::cards_bucket(&self.ns), name, bytes).await
    }

    /// Reads a JSON artifact from our bucket.
    pub(in crate::shell) async fn get(&self, name: &str) -> Result<Value> {
        let bucket = subjects::artifact_bucket(&self.ns);
        match messages::payload::object_ref(name, &bucket) {
            Some((bucket, name)) => match self.get_in(bucket, name).await {
                // An agent's `output_artifact_ref {name, version}` whose object was stored
                // plainly under `name` (not as `{name}@v{version}`): read that.
                Err(Error::Missing(why)) => match messages::payload::split_version_key(name) {
                    Some((plain, _)) => self
                        .get_in(bucket, plain)
                        .await
                        .map_err(|_| Error::Missing(why)),
                    None => Err(Error::Missing(why)),
                },
                other => other,
            },
            None => Err(Error::Missing(format!(
                "artifact '{name}' (not an artifact name)"
            ))),
        }
    }

    /// Reads a JSON artifact from a bucket.
    /// Only the mesh's artifact bucket is read: the node may read other buckets (its own
    /// among them), so a reference to one would make it read them for whoever sent it.
    pub(in crate::shell) async fn get_in(&self, bucket: &str, name: &str) -> Result<Value> {
        let artifacts = subjects::artifact_bucket(&self.ns);
        if bucket != artifacts {
            return Err(Error::Refused(format!(
                "artifact '{name}' is in bucket '{bucket}': references may name only the mesh's artifact bucket '{artifacts}'"
            )));
        }
        let store = self.artifact_store().await?.clone();
        let what = || format!("reading artifact {name} of {bucket}");
        let mut object = match store.get(name).await {
            Ok(object) => object,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => {
                return Err(Error::Missing(format!(
                    "artifact '{name}' in bucket '{bucket}'"
                )))
            }
            Err(e) => return Err(e).context(what),
        };
        let size = object.info().size as u64;
        let limit = self.max_bytes;
        if size > limit {
            return Err(Error::Refused(format!(
                "artifact '{name}' of {bucket} is {size} bytes, over the limit of {limit} bytes"
            )));
        }
        let mut bytes = Vec::with_capacity(size as usize);
        (&mut object)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .await
            .context(what)?;
        if bytes.len() as u64 > limit {
            return Err(Error::Refused(format!(
                "artifact '{name}' of {bucket} is over the limit of {limit} bytes"
            )));
        }
        serde_json::from_slice(&bytes).map_err(|source| Error::Encoding {
            context: what(),
            source,
        })
    }
}

/// Finds or creates an object store bucket; `max_age` zero keeps objects forever. A
/// bucket made without an age limit (by an agent, or an older version) is given `max_age`.
async fn object_bucket(
    js: &jetstream::Context,
    bucket: String,
    replicas: usize,
    max_age: Duration,
) -> Result<object_store::ObjectStore> {
    if let Ok(store) = js.get_object_store(&bucket).await {
        if !max_age.is_zero() {
            let setup = |e: async_nats::Error| Error::Setup {
                resource: format!("object store {bucket}"),
                source: e,
            };
            let mut stream = js
                .get_stream(format!("OBJ_{bucket}"))
                .await
                .map_err(|e| setup(e.into()))?;
            let info = stream.info().await.map_err(|e| setup(e.into()))?;
            if info.config.max_age.is_zero() {
                let mut config = info.config.clone();
                config.max_age = max_age;
                // The server wants the duplicate window within the age limit.
                config.duplicate_window = config.duplicate_window.min(max_age);
                js.update_stream(config)
                    .await
                    .map_err(|e| setup(e.into()))?;
            }
        }
        return Ok(store);
    }
    js.create_object_store(object_store::Config {
        bucket: bucket.clone(),
        num_replicas: replicas,
        max_age,
        ..Default::default()
    })
    .await
    .map_err(|e| Error::Setup {
        resource: format!("object store {bucket}"),
        source: e.into(),
    })
}

async fn put_object(
    store: &object_store::ObjectStore,
    bucket: &str,
    name: &str,
    bytes: Vec<u8>,
) -> Result<String> {
    store
        .put(name, &mut bytes.as_slice())
        .await
        .context(|| format!("storing object {name} in {bucket}"))?;
    Ok(messages::payload::object_uri(bucket, name))
}

/// Stores `bytes` as version 1 of artifact `name` of run `run`: the object `{name}@v1`
/// (see `messages::payload::version_key`), with the link `name` pointing at it, as the
/// SDK's artifact API stores versions. The node's artifact names are fixed by their run,
/// so storing one again writes the same objects. Returns the versioned object's URI.
async fn put_versioned(
    store: &object_store::ObjectStore,
    bucket: &str,
    name: &str,
    run: &str,
    bytes: Vec<u8>,
) -> Result<String> {
    let key = messages::payload::version_key(name, 1);
    let meta = object_store::ObjectMetadata {
        name: key.clone(),
        metadata: [
            ("artifact".to_string(), name.to_string()),
            ("version".to_string(), "1".to_string()),
            ("run".to_string(), run.to_string()),
            ("mime".to_string(), messages::payload::JSON_MIME.to_string()),
        ]
        .into(),
        ..Default::default()
    };
    let info = store
        .put(meta, &mut bytes.as_slice())
        .await
        .context(|| format!("storing object {key} in {bucket}"))?;
    store
        .add_link(name, &info)
        .await
        .context(|| format!("linking {name} to {key} in {bucket}"))?;
    Ok(messages::payload::object_uri(bucket, &key))
}
