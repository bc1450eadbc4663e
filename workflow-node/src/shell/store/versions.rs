//! Workflow definitions by content hash, in a KV bucket (`{workflow}.{hash}` → a
//! [`StoredDefinition`]): every run names the definition it started with, and its events are
//! applied with that definition, whichever replica handles them and whatever version of
//! the file that replica serves.
//!
//! A replica stores the definitions it serves at start and marks them served again every
//! [`SERVED_REFRESH`]; it reads (then keeps) any other one a run names. A caller may pin a
//! stored version for a new run. A definition that no replica serves and no run names is
//! deleted once it has not been served for the retention ([`Versions::sweep`]), so it
//! outlives the records of the runs that used it, which expire after the same retention.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::Millis;
use crate::definition::{self, Workflow};
use crate::shell::context::now;
use crate::shell::error::{Context, Error, Result};
use crate::shell::store::inspect::{FoundRun, Inspector};
use crate::shell::store::runs;

/// How often a replica marks the definitions it serves as still served.
pub const SERVED_REFRESH: Duration = Duration::from_secs(3600);

/// One stored definition.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredDefinition {
    /// The workflow's name.
    pub workflow: String,
    /// The file's `version` ("1.0.0" when it gives none).
    pub version: String,
    /// The content hash of `document`: the key's last token, and what runs name.
    pub hash: String,
    /// When a replica last started serving it, or marked it served (ms since the epoch).
    pub served_at: Millis,
    /// The whole file, as JSON.
    pub document: Value,
}

impl StoredDefinition {
    /// What is stored for `workflow`, served now.
    pub fn of(workflow: &Workflow) -> StoredDefinition {
        StoredDefinition {
            workflow: workflow.name.clone(),
            version: workflow.version.clone(),
            hash: workflow.hash.clone(),
            served_at: now(),
            document: workflow.document.clone(),
        }
    }

    /// The definition, parsed and checked as a file would be.
    pub fn parse(&self) -> Result<Workflow> {
        let text = serde_json::to_string(&self.document)?;
        let origin = format!("{}.{}.json", self.workflow, self.hash);
        definition::parse_str(&text, &origin).map_err(|problems| {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            Error::Definition(format!(
                "the stored definition {} (version {}) of {} does not load: {}",
                self.hash,
                self.version,
                self.workflow,
                problems.join("; ")
            ))
        })
    }
}

/// The key of a definition in the bucket.
pub fn key(workflow: &str, hash: &str) -> String {
    format!("{workflow}.{hash}")
}

/// The definitions a replica knows, by hash.
pub(in crate::shell) struct Versions {
    bucket: kv::Store,
    known: Mutex<HashMap<String, Arc<Workflow>>>,
}

impl Versions {
    /// Versions kept in `bucket`.
    pub(in crate::shell) fn new(bucket: kv::Store) -> Versions {
        Versions {
            bucket,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Stores a definition this replica serves, or marks it served again (the same
    /// content always has the same key).
    pub(in crate::shell) async fn store(&self, workflow: &Arc<Workflow>) -> Result<()> {
        let bytes: bytes::Bytes = serde_json::to_vec(&StoredDefinition::of(workflow))?.into();
        let key = key(&workflow.name, &workflow.hash);
        // (On a cluster the first write to a bucket just made can come before the servers
        // know its stream: `start` tries again.)
        self.bucket
            .put(&key, bytes)
            .await
            .context(|| format!("storing definition {key}"))?;
        self.lock().insert(workflow.hash.clone(), workflow.clone());
        Ok(())
    }

    /// The definition a run started with: `hash`, or `current` for a run that names none
    /// (started before definitions were kept) or names it. Another one is read from the
    /// bucket; one that cannot be found or parsed is an error that fails the run.
    pub(in crate::shell) async fn for_run(
        &self,
        current: &Arc<Workflow>,
        hash: Option<&str>,
    ) -> Result<Arc<Workflow>> {
        let Some(hash) = hash.filter(|h| *h != current.hash) else {
            return Ok(current.clone());
        };
        if let Some(known) = self.lock().get(hash) {
            return Ok(known.clone());
        }
        let key = key(&current.name, hash);
        let Some(stored) = read(&self.bucket, &key).await? else {
            return Err(Error::Definition(format!(
                "the definition {hash} of {} that the run started with is not stored",
                current.name
            )));
        };
        let parsed = Arc::new(stored.parse()?);
        self.lock().insert(hash.to_string(), parsed.clone());
        Ok(parsed)
    }

    /// The stored definition of `workflow` with `version` that a caller pins for a new run
    /// (the one served most recently, should two files have had the same version); the
    /// error names the versions stored. `None`: `workflow`, served here, has that version.
    pub(in crate::shell) async fn pinned(
        &self,
        workflow: &Workflow,
        version: &str,
    ) -> Result<Option<Arc<Workflow>>> {
        if workflow.version == version {
            return Ok(None);
        }
        let stored = list_in(&self.bucket, Some(&workflow.name)).await?;
        let Some(found) = stored
            .iter()
            .filter(|d| d.version == version)
            .max_by_key(|d| d.served_at)
        else {
            let mut versions: Vec<&str> = stored.iter().map(|d| d.version.as_str()).collect();
            versions.sort_unstable();
            versions.dedup();
            return Err(Error::Definition(format!(
                "workflow {} has no stored version '{}' (stored: {})",
                workflow.name,
                messages::inbound::excerpt(version, 64),
                versions.join(", ")
            )));
        };
        if let Some(known) = self.lock().get(&found.hash) {
            return Ok(Some(known.clone()));
        }
        let parsed = Arc::new(found.parse()?);
        self.lock().insert(found.hash.clone(), parsed.clone());
        Ok(Some(parsed))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Workflow>>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The stored definition under `key`, if any.
async fn read(bucket: &kv::Store, key: &str) -> Result<Option<StoredDefinition>> {
    let Some((_, bytes)) = runs::read_from(bucket, key).await? else {
        return Ok(None);
    };
    let stored = serde_json::from_slice(&bytes)
        .map_err(|e| Error::Definition(format!("stored definition {key} is not readable: {e}")))?;
    Ok(Some(stored))
}

/// Every stored definition (of `workflow` when given), in key order.
pub async fn list_in(bucket: &kv::Store, workflow: Option<&str>) -> Result<Vec<StoredDefinition>> {
    let keys: Vec<String> = match bucket.keys().await {
        Ok(keys) => keys
            .try_collect()
            .await
            .context(|| "listing definitions".into())?,
        Err(e) => return Err(e).context(|| "listing definitions".into()),
    };
    let mut keys: Vec<String> = keys
        .into_iter()
        .filter(|k| workflow.is_none_or(|w| k.rsplit_once('.').is_some_and(|(name, _)| name == w)))
        .collect();
    keys.sort();
    let mut stored = Vec::new();
    for key in keys {
        if let Some(definition) = read(bucket, &key).await? {
            stored.push(definition);
        }
    }
    Ok(stored)
}

/// Whether a definition not served for `retention`, and named by none of `in_use`, is
/// due to be deleted at `now`.
pub fn expired(
    definition: &StoredDefinition,
    in_use: &HashSet<String>,
    now: Millis,
    retention: Duration,
) -> bool {
    let idle = now.0.saturating_sub(definition.served_at.0);
    !in_use.contains(&definition.hash) && u128::from(idle) >= retention.as_millis()
}

impl Versions {
    /// Marks the definitions this replica serves as served, then deletes those of the
    /// same workflows that are due ([`expired`]): not served for `retention` and named by
    /// no run kept in namespace `ns`'s runs bucket (running, or ended and not yet
    /// expired; read through `client`). Returns how many were deleted.
    pub(in crate::shell) async fn sweep(
        &self,
        client: &async_nats::Client,
        ns: &str,
        retention: Duration,
        served: &[Arc<Workflow>],
    ) -> Result<usize> {
        for workflow in served {
            self.store(workflow).await?;
        }
        let mut names: Vec<&str> = served.iter().map(|w| w.name.as_str()).collect();
        names.dedup();
        let bucket = &self.bucket;
        let mut deleted = 0;
        for name in names {
            let stored = list_in(bucket, Some(name)).await?;
            let none = HashSet::new();
            if !stored.iter().any(|d| expired(d, &none, now(), retention)) {
                continue;
            }
            let in_use = runs_by_definition(client, ns, name).await?;
            let in_use: HashSet<String> = in_use.into_keys().collect();
            for definition in stored
                .iter()
                .filter(|d| expired(d, &in_use, now(), retention))
            {
                let key = key(name, &definition.hash);
                bucket
                    .purge(&key)
                    .await
                    .context(|| format!("deleting definition {key}"))?;
                tracing::info!(
                    "deleted definition {key} (version {}): not served for the retention and no run names it",
                    definition.version
                );
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

/// How many runs kept for `workflow` name each definition: (running, ended).
async fn runs_by_definition(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
) -> Result<HashMap<String, (usize, usize)>> {
    let inspector = Inspector::open(client.clone(), ns).await?;
    Ok(count_runs(&inspector.list(Some(workflow)).await?))
}

/// How many of `runs` name each definition: (running, ended).
pub fn count_runs(runs: &[FoundRun]) -> HashMap<String, (usize, usize)> {
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    for run in runs {
        if let Some(hash) = &run.record.definition {
            let count = counts.entry(hash.clone()).or_default();
            if run.record.state.status.is_terminal() {
                count.1 += 1;
            } else {
                count.0 += 1;
            }
        }
    }
    counts
}
