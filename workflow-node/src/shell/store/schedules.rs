//! The schedules' entries in KV bucket `{ns}_wf_schedules` (`{workflow}.{schedule}`, see
//! `run::schedule`): read with their revision, written only by compare-and-swap, so that
//! replicas looking at one schedule at once agree on one decision per slot. A removed
//! entry leaves its revision behind, and a write over it names that revision too.

use async_nats::jetstream::{self, kv};
use futures::TryStreamExt;

use crate::shell::error::{Context, Result};
use crate::shell::run::schedule::ScheduleState;
use crate::shell::store::runs::put_in;

/// An entry as read: its revision (0 when the key never had a value; a removed entry's
/// revision otherwise) and its state (`None` when it has none).
#[derive(Debug, Clone)]
pub(in crate::shell) struct Entry {
    /// What a write over it expects.
    pub(in crate::shell) revision: u64,
    /// The state, when the entry holds one.
    pub(in crate::shell) state: Option<ScheduleState>,
}

/// Reads the entry `key`.
pub(in crate::shell) async fn read(bucket: &kv::Store, key: &str) -> Result<Entry> {
    let (revision, state) = read_json(bucket, key, "schedule").await?;
    Ok(Entry { revision, state })
}

/// Reads the JSON entry `key` of `bucket` (`what` names it in errors) from the stream
/// leader: its revision (0 when the key never had a value; a removed entry's revision
/// otherwise) and its value (`None` when it has none). One home for entries written by
/// compare-and-swap over their revision (schedules, agents' gates).
pub(in crate::shell) async fn read_json<T: serde::de::DeserializeOwned>(
    bucket: &kv::Store,
    key: &str,
    what: &str,
) -> Result<(u64, Option<T>)> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let subject = messages::subjects::kv_key(&bucket.name, key);
    let message = match bucket
        .stream
        .get_last_raw_message_by_subject(&subject)
        .await
    {
        Ok(m) => m,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok((0, None)),
        Err(e) => return Err(e).context(|| format!("reading {what} {key}")),
    };
    crate::shell::clock::observe(message.time.unix_timestamp_nanos());
    let removed = message
        .headers
        .get("KV-Operation")
        .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
    let state = if removed || message.payload.is_empty() {
        None
    } else {
        // An entry that cannot be read is one a newer replica wrote: it is left alone.
        Some(serde_json::from_slice(&message.payload).context(|| format!("{what} {key}"))?)
    };
    Ok((message.sequence, state))
}

/// Writes `state` at `key` if its revision is still `expected`: its new revision, `None`
/// when another write came first.
pub(in crate::shell) async fn write(
    js: &jetstream::Context,
    bucket: &kv::Store,
    key: &str,
    state: &ScheduleState,
    expected: u64,
) -> Result<Option<u64>> {
    let bytes = serde_json::to_vec(state)?;
    put_in(js, bucket, key, bytes, Some(expected), None).await
}

/// Removes the entry `key` if its revision is still `expected`: `false` when another
/// write came first.
pub(in crate::shell) async fn remove(bucket: &kv::Store, key: &str, expected: u64) -> Result<bool> {
    match bucket.delete_expect_revision(key, Some(expected)).await {
        Ok(()) => Ok(true),
        Err(e) if e.to_string().contains("wrong last sequence") => Ok(false),
        Err(e) => Err(e).context(|| format!("removing schedule {key}")),
    }
}

/// Every schedule entry of the bucket (for operators: `schedules list`, the web view), as
/// `(workflow, schedule, state)`, sorted; entries that cannot be read are left out.
pub async fn read_all(bucket: &kv::Store) -> Result<Vec<(String, String, ScheduleState)>> {
    let keys = bucket
        .keys()
        .await
        .context(|| "listing the schedules".to_string())?;
    let mut keys: Vec<String> = keys
        .try_collect()
        .await
        .context(|| "listing the schedules".to_string())?;
    keys.sort();
    let mut all = Vec::new();
    for key in keys {
        let Some((workflow, schedule)) = key.split_once('.') else {
            continue;
        };
        if let Ok(Entry {
            state: Some(state), ..
        }) = read(bucket, &key).await
        {
            all.push((workflow.to_string(), schedule.to_string(), state));
        }
    }
    Ok(all)
}

/// The names of the schedules of `workflow` that have an entry.
pub(in crate::shell) async fn names(bucket: &kv::Store, workflow: &str) -> Result<Vec<String>> {
    let prefix = format!("{workflow}.");
    let keys = bucket
        .keys()
        .await
        .context(|| format!("listing the schedules of {workflow}"))?;
    let keys: Vec<String> = keys
        .try_collect()
        .await
        .context(|| format!("listing the schedules of {workflow}"))?;
    let mut names: Vec<String> = keys
        .into_iter()
        .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}
