//! Workflow definitions by content hash, in a KV bucket (`{workflow}.{hash}` → the file as
//! JSON): every run names the definition it started with, and its events are applied with
//! that definition, whichever replica handles them and whatever version of the file that
//! replica serves. A replica stores the definitions it serves at start, and reads (then
//! keeps) any other one a run names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_nats::jetstream::kv;

use super::error::{Context, Error, Result};
use super::store;
use crate::definition::{self, Workflow};

/// The definitions a replica knows, by hash.
pub(super) struct Definitions {
    bucket: kv::Store,
    known: Mutex<HashMap<String, Arc<Workflow>>>,
}

/// The key of a definition in the bucket.
fn key(workflow: &str, hash: &str) -> String {
    format!("{workflow}.{hash}")
}

impl Definitions {
    /// Definitions kept in `bucket`.
    pub(super) fn new(bucket: kv::Store) -> Definitions {
        Definitions {
            bucket,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Stores a definition this replica serves (the same content always has the same key,
    /// so every replica writes the same value).
    pub(super) async fn store(&self, workflow: &Arc<Workflow>) -> Result<()> {
        let bytes = serde_json::to_vec(&workflow.document)?;
        let key = key(&workflow.name, &workflow.hash);
        self.bucket
            .put(&key, bytes.into())
            .await
            .context(|| format!("storing definition {key}"))?;
        self.lock().insert(workflow.hash.clone(), workflow.clone());
        Ok(())
    }

    /// The definition a run started with: `hash`, or `current` for a run that names none
    /// (started before definitions were kept) or names it. Another one is read from the
    /// bucket; one that cannot be found or parsed is an error that fails the run.
    pub(super) async fn for_run(
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
        let Some((_, bytes)) = store::read_from(&self.bucket, &key).await? else {
            return Err(Error::Definition(format!(
                "the definition {hash} of {} that the run started with is not stored",
                current.name
            )));
        };
        let text = String::from_utf8_lossy(&bytes);
        let parsed = definition::parse_str(&text, &format!("{key}.json")).map_err(|problems| {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            Error::Definition(format!(
                "the definition {hash} of {} that the run started with does not load: {}",
                current.name,
                problems.join("; ")
            ))
        })?;
        let parsed = Arc::new(parsed);
        self.lock().insert(hash.to_string(), parsed.clone());
        Ok(parsed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Workflow>>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}
