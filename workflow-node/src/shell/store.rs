//! The run's entry in the runs bucket: reading it whole (with what lives beside it) and
//! writing it with compare-and-swap.

use async_nats::jetstream::kv::{CreateErrorKind, UpdateErrorKind};

use super::error::{Context, Error, Result};
use super::plan::{Commit, Loaded};
use super::record::RunRecord;
use super::{maps, Shared};
use crate::core::{Event, ExecutionId};
use crate::definition::Workflow;

/// Reads a run's entry from KV, with the item chunks of its large maps and a large input.
pub(super) async fn load(shared: &Shared, key: &str) -> Result<Loaded> {
    let entry = shared
        .runs
        .entry(key)
        .await
        .context(|| format!("reading run {key}"))?;
    let Some(entry) = entry.filter(|e| !e.value.is_empty()) else {
        return Ok(Loaded {
            revision: None,
            record: None,
            from_cache: false,
        });
    };
    let mut record: RunRecord =
        serde_json::from_slice(&entry.value).map_err(|source| Error::Encoding {
            context: format!("decoding run {key}"),
            source,
        })?;
    maps::load_items(shared, key, &mut record)
        .await
        .context(|| format!("reading what run {key} keeps apart"))?;
    Ok(Loaded {
        revision: Some(entry.revision),
        record: Some(record),
        from_cache: false,
    })
}

/// Before `event` is applied: reads the results of a large map it may end.
pub(super) async fn load_results(
    shared: &Shared,
    workflow: &Workflow,
    key: &str,
    record: &mut RunRecord,
    event: &Event,
) -> Result<()> {
    let Some(wanted) = maps::results_wanted(workflow, record, event) else {
        return Ok(());
    };
    maps::load_results(shared, key, record, wanted)
        .await
        .context(|| format!("reading the map results of run {key}"))
}

/// Writes `commit` over the revision it was planned on. `Ok(None)`: another replica wrote
/// first.
pub(super) async fn cas(
    shared: &Shared,
    execution: &ExecutionId,
    key: &str,
    commit: Commit,
) -> Result<Option<u64>> {
    let limit = shared.client.server_info().max_payload;
    if commit.bytes.len() > limit {
        return Err(Error::StateTooLarge {
            execution: execution.clone(),
            size: commit.bytes.len(),
            limit,
        });
    }
    let written = match commit.revision {
        None => match shared.runs.create(key, commit.bytes.into()).await {
            Ok(rev) => Some(rev),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => None,
            Err(e) => return Err(e).context(|| format!("creating run {key}")),
        },
        Some(rev) => match shared.runs.update(key, commit.bytes.into(), rev).await {
            Ok(rev) => Some(rev),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => None,
            Err(e) => return Err(e).context(|| format!("writing run {key}")),
        },
    };
    Ok(written)
}
