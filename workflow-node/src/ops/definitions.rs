//! The workflow definitions stored for runs to keep theirs by
//! ([`crate::shell::definitions`]): listing them with how many kept runs use each, and
//! retiring one explicitly, refused while a running run uses it or a replica may serve it.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream;

use crate::shell::run::names;
use crate::shell::store::versions::{self, count_runs, StoredDefinition, SERVED_REFRESH};

use super::refusal::Refusal;
use super::runs::Runs;

/// A stored definition and the kept runs that use it.
#[derive(Debug, Clone)]
pub struct Row {
    /// The definition as stored.
    pub stored: StoredDefinition,
    /// Runs using it that have not ended.
    pub running: usize,
    /// Runs using it that ended.
    pub ended: usize,
}

/// The stored definitions (of `workflow`, when given) with their runs counted.
pub async fn list(runs: &Runs, workflow: Option<&str>) -> Result<Vec<Row>, Refusal> {
    let Some(bucket) = bucket(runs).await else {
        return Ok(Vec::new());
    };
    let stored = versions::list_in(&bucket, workflow)
        .await
        .map_err(|e| Refusal::unavailable(e.to_string()))?;
    let counts: HashMap<String, (usize, usize)> = count_runs(&runs.all(workflow).await?);
    Ok(stored
        .into_iter()
        .map(|stored| {
            let (running, ended) = counts.get(&stored.hash).copied().unwrap_or_default();
            Row {
                stored,
                running,
                ended,
            }
        })
        .collect())
}

async fn bucket(runs: &Runs) -> Option<jetstream::kv::Store> {
    let js = jetstream::new(runs.client().clone());
    js.get_key_value(names::versions_bucket(runs.namespace()))
        .await
        .ok()
}

/// Whether a definition may still be served by a replica (each marks what it serves every
/// [`SERVED_REFRESH`]).
fn maybe_served(stored: &StoredDefinition) -> bool {
    let recent = Duration::from_millis(crate::shell::now().0.saturating_sub(stored.served_at.0));
    recent < 2 * SERVED_REFRESH
}

/// The one stored definition of `workflow` that `version` (a version or a hash) names.
fn named<'a>(rows: &'a [Row], workflow: &str, version: &str) -> Result<&'a Row, Refusal> {
    let named: Vec<&Row> = rows
        .iter()
        .filter(|r| r.stored.hash == version || r.stored.version == version)
        .collect();
    match named.as_slice() {
        [] => {
            let versions: Vec<&str> = rows.iter().map(|r| r.stored.version.as_str()).collect();
            let versions = if versions.is_empty() {
                "none".to_string()
            } else {
                versions.join(", ")
            };
            Err(Refusal::not_found(format!(
                "workflow {workflow} has no stored definition '{version}' (stored versions: {versions})"
            )))
        }
        [row] => Ok(row),
        several => {
            let hashes: Vec<&str> = several.iter().map(|r| r.stored.hash.as_str()).collect();
            Err(Refusal::invalid(format!(
                "version {version} of {workflow} is stored {} times: name one by hash ({})",
                several.len(),
                hashes.join(", ")
            )))
        }
    }
}

/// Deletes the stored definition `version` (a version or a hash) of `workflow`, unless a
/// running run uses it or a replica may serve it; the row deleted.
pub async fn delete(runs: &Runs, workflow: &str, version: &str) -> Result<Row, Refusal> {
    let rows = list(runs, Some(workflow)).await?;
    let row = named(&rows, workflow, version)?;
    let what = format!(
        "version {} ({}) of {workflow}",
        row.stored.version, row.stored.hash
    );
    if row.running > 0 {
        return Err(Refusal::conflict(format!(
            "{what} is used by {} running run(s): it cannot be deleted until they end",
            row.running
        )));
    }
    if maybe_served(&row.stored) {
        return Err(Refusal::conflict(format!(
            "{what} was served by a replica at {}: stop serving it first (a replica marks what it serves every {} min)",
            super::view::time(Some(row.stored.served_at)),
            SERVED_REFRESH.as_secs() / 60
        )));
    }
    let purged = async {
        let bucket = bucket(runs).await.ok_or("the definitions bucket is gone")?;
        bucket
            .purge(versions::key(workflow, &row.stored.hash))
            .await?;
        Ok::<_, async_nats::Error>(())
    }
    .await;
    purged.map_err(|e| Refusal::unavailable(format!("deleting {what}: {e}")))?;
    Ok(row.clone())
}
