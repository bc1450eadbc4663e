//! The runs bucket: reading a run's entry whole (with what [`crate::shell::run::apart`] keeps beside it),
//! writing it with compare-and-swap, and the writes beside it.
//!
//! Reads go to the bucket stream's leader, never to a follower (KV's direct get may answer
//! from one that lags on a cluster): a replica that read an old revision would take a
//! result for a no-op and ack it, losing it. A commit needs no such care, its
//! compare-and-swap is decided by the leader, but what it is planned on must be current.

use async_nats::jetstream::context::PublishAckFuture;
use std::time::{Duration, SystemTime};

use std::collections::BTreeSet;

use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::core::{Detail, Event, ExecutionId};
use crate::definition::Workflow;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Error, Result};
use crate::shell::run::apart::{self, Write};
use crate::shell::run::entry;
use crate::shell::run::names::{input_key, items_key, node_output_key, result_key, run_output_key};
use crate::shell::run::plan::{Commit, Ending, Loaded};
use crate::shell::run::record::RunRecord;

/// Item results read at once when a map's results are loaded.
const PARALLEL_GETS: usize = 64;

/// Reads a run's entry from KV, with the item chunks of its large maps and a large input;
/// results stay null until [`load_results`].
pub(in crate::shell) async fn load(shared: &Shared, key: &str) -> Result<Loaded> {
    let Some((revision, mut record)) = read_record(shared, key).await? else {
        return Ok(Loaded {
            revision: None,
            record: None,
            from_cache: false,
            settled: Default::default(),
        });
    };
    load_apart(shared, key, &mut record).await?;
    for (id, r) in record.maps.clone() {
        let mut items = Vec::with_capacity(r.total as usize);
        for c in 0..r.starts.len() {
            let chunk: Vec<Value> =
                get(shared, &items_key(key, &id, c), &mut record.held_bytes).await?;
            items.extend(chunk);
        }
        if let Some(Some(Detail::Map(map))) =
            record.state.nodes.get_mut(&id).map(|n| n.detail.as_mut())
        {
            map.results = vec![Value::Null; items.len()];
            map.items = items;
        }
    }
    Ok(Loaded {
        revision: Some(revision),
        record: Some(record),
        from_cache: false,
        settled: Default::default(),
    })
}

/// A run's entry alone, with its revision: what it keeps apart is not read (its input and
/// outputs are left null, its large maps' items empty).
pub(in crate::shell) async fn read_record(
    shared: &Shared,
    key: &str,
) -> Result<Option<(u64, RunRecord)>> {
    let Some((revision, value)) = read(shared, key).await? else {
        return Ok(None);
    };
    let record = RunRecord::from_entry(&value).map_err(|source| Error::Encoding {
        context: format!("decoding run {key}"),
        source,
    })?;
    Ok(Some((revision, record)))
}

/// Reads back the input and outputs `record` keeps apart.
pub(in crate::shell) async fn load_apart(
    shared: &Shared,
    key: &str,
    record: &mut RunRecord,
) -> Result<()> {
    if record.input_apart {
        record.state.input = get(shared, &input_key(key), &mut record.held_bytes).await?;
    }
    if record.output_apart {
        let output = get(shared, &run_output_key(key), &mut record.held_bytes).await?;
        record.state.output = Some(output);
    }
    for node in record.outputs_apart.keys().cloned().collect::<Vec<_>>() {
        let output = get(shared, &node_output_key(key, &node), &mut record.held_bytes).await?;
        if let Some(n) = record.state.nodes.get_mut(&node) {
            n.output = Some(output);
        }
    }
    Ok(())
}

/// Reads back what answering an ended run needs of what `record` keeps apart: its
/// output, unless that is the run's artifact, which an answer names without reading it.
pub(in crate::shell) async fn load_answer(
    shared: &Shared,
    key: &str,
    record: &mut RunRecord,
) -> Result<()> {
    if record.output_apart && !record.output_artifact {
        let output = get(shared, &run_output_key(key), &mut record.held_bytes).await?;
        record.state.output = Some(output);
    }
    Ok(())
}

/// The outbox entries of `record`, other than `current`'s, whose events can no longer come
/// back: their messages are gone from the workflow's work-queue stream (acked, or removed
/// by its limits). Asked of the stream's leader, all at once; an entry whose message is
/// still there (its replica is carrying it out, or died doing so) stays.
pub(in crate::shell) async fn settled(
    shared: &Shared,
    workflow: &str,
    record: &RunRecord,
    current: u64,
) -> Result<BTreeSet<u64>> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind as Kind;
    let seqs: Vec<u64> = record
        .outbox
        .iter()
        .map(|e| e.seq)
        .filter(|s| *s != current)
        .collect();
    if seqs.is_empty() {
        return Ok(BTreeSet::new());
    }
    let name = crate::shell::run::names::event_stream(&shared.ns, workflow);
    let stream = shared
        .js
        .get_stream_no_info(&name)
        .await
        .context(|| format!("opening stream {name}"))?;
    let checks = seqs.iter().map(|&seq| {
        let stream = &stream;
        async move { (seq, stream.get_raw_message(seq).await) }
    });
    let mut gone = BTreeSet::new();
    for (seq, got) in futures::future::join_all(checks).await {
        match got {
            Ok(_) => {}
            Err(e) if e.kind() == Kind::NoMessageFound => {
                gone.insert(seq);
            }
            Err(e) if matches!(e.kind(), Kind::JetStream(j) if j.error_code() == async_nats::jetstream::ErrorCode::NO_MESSAGE_FOUND) =>
            {
                gone.insert(seq);
            }
            Err(e) => return Err(e).context(|| format!("looking up event {seq} of {name}")),
        }
    }
    Ok(gone)
}

/// The current revision and value of `key`, read from the stream's leader; `None` when
/// the key has no value (never written, deleted or purged).
pub(in crate::shell) async fn read(
    shared: &Shared,
    key: &str,
) -> Result<Option<(u64, bytes::Bytes)>> {
    read_from(&shared.runs, key).await
}

/// The current value of `key`, when it was written (its time on the server) and its
/// revision; `None` when it has no value.
pub(in crate::shell) async fn written_at(
    bucket: &async_nats::jetstream::kv::Store,
    key: &str,
) -> Result<Option<(bytes::Bytes, SystemTime, u64)>> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let subject = messages::subjects::kv_key(&bucket.name, key);
    match bucket
        .stream
        .get_last_raw_message_by_subject(&subject)
        .await
    {
        Ok(m) if m.payload.is_empty() => Ok(None),
        Ok(m) => Ok(Some((m.payload, m.time.into(), m.sequence))),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(e).context(|| format!("reading {key}")),
    }
}

/// [`read`] from any bucket.
pub(in crate::shell) async fn read_from(
    bucket: &async_nats::jetstream::kv::Store,
    key: &str,
) -> Result<Option<(u64, bytes::Bytes)>> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let subject = messages::subjects::kv_key(&bucket.name, key);
    let message = match bucket
        .stream
        .get_last_raw_message_by_subject(&subject)
        .await
    {
        Ok(m) => m,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
        Err(e) => return Err(e).context(|| format!("reading {key}")),
    };
    let removed = message
        .headers
        .get("KV-Operation")
        .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
    if removed || message.payload.is_empty() {
        return Ok(None);
    }
    Ok(Some((message.sequence, message.payload)))
}

/// Reads and decodes a key that must exist (following it to the object store when its
/// value was too large for KV), adding its size to `held`.
async fn get<T: DeserializeOwned>(shared: &Shared, key: &str, held: &mut usize) -> Result<T> {
    let (_, bytes) = read(shared, key)
        .await?
        .ok_or_else(|| Error::Missing(key.to_string()))?;
    *held += bytes.len();
    if let Some(object) = moved_to(&bytes) {
        let value = shared.artifacts.get(&object).await?;
        return serde_json::from_value(value).map_err(|source| Error::Encoding {
            context: format!("decoding {key}"),
            source,
        });
    }
    decode(&bytes, || key.to_string())
}

/// The KV value standing for a value too large for KV: it names the object that holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Moved {
    mesh_moved_to_object: String,
}

pub(in crate::shell) fn moved_to(bytes: &[u8]) -> Option<String> {
    // Cheap test first: a stand-in is a small object with this one key.
    if bytes.len() > 512 || !bytes.starts_with(b"{\"mesh_moved_to_object\"") {
        return None;
    }
    serde_json::from_slice::<Moved>(bytes)
        .ok()
        .map(|m| m.mesh_moved_to_object)
}

/// The value standing for one stored in the object store at `uri` (as in KV): what a
/// `Started` event carries instead of an input too large for an event.
pub(in crate::shell) fn stand_in(uri: String) -> Value {
    serde_json::to_value(Moved {
        mesh_moved_to_object: uri,
    })
    .expect("a stand-in serialises")
}

/// The object a value from [`stand_in`] names.
pub(in crate::shell) fn stood_in_for(value: &Value) -> Option<&str> {
    match value.as_object() {
        Some(o) if o.len() == 1 => o.get("mesh_moved_to_object")?.as_str(),
        _ => None,
    }
}

fn decode<T: DeserializeOwned>(bytes: &[u8], what: impl FnOnce() -> String) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| Error::Encoding {
        context: format!("decoding {}", what()),
        source,
    })
}

/// Before `event` is applied: reads the results of a large map it may end (see
/// [`apart::results_wanted`]).
pub(in crate::shell) async fn load_results(
    shared: &Shared,
    workflow: &Workflow,
    key: &str,
    record: &mut RunRecord,
    event: &Event,
    ahead: u32,
) -> Result<()> {
    let Some((id, wanted)) = apart::results_wanted(workflow, record, event, ahead) else {
        return Ok(());
    };
    let id_ref = &id;
    let mut fetched = futures::stream::iter(wanted)
        .map(|i| async move {
            let key = result_key(key, id_ref, i);
            let got = read(shared, &key).await;
            (i, key, got)
        })
        .buffer_unordered(PARALLEL_GETS);
    let Some(map) = apart::map_mut(record, &id) else {
        return Ok(());
    };
    let mut held = 0;
    while let Some((i, result_key, got)) = fetched.next().await {
        if let Some((_, bytes)) = got? {
            held += bytes.len();
            map.results[i as usize] = decode(&bytes, || result_key)?;
        }
    }
    record.held_bytes += held;
    if let Some(r) = record.maps.get_mut(&id) {
        r.results_loaded = true;
    }
    Ok(())
}

/// Writes `commit` over the revision it was planned on. `Ok(None)`: another replica wrote
/// first. The commit that ends a run makes its record expire after the retention; one
/// that holds only a cancel kept for a run not started yet, after the short
/// `Config::early_cancel_expiry` (the start, if it comes in time, commits without one).
pub(in crate::shell) async fn cas(
    shared: &Shared,
    execution: &ExecutionId,
    key: &str,
    commit: Commit,
) -> Result<Option<u64>> {
    let server = shared.client.server_info().max_payload;
    let limit = shared
        .config
        .max_state_bytes
        .map_or(server, |m| m.min(server));
    if commit.bytes.len() > limit {
        return Err(Error::StateTooLarge {
            execution: execution.clone(),
            size: commit.bytes.len(),
            limit,
        });
    }
    let ttl = if commit.unstarted {
        Some(shared.config.early_cancel_expiry)
    } else {
        commit.ends_run.then_some(shared.config.retention)
    };
    let stored = entry::pack(commit.bytes, shared.config.record_format);
    shared.encoded.commit(stored.len());
    put(shared, key, stored, Some(commit.revision.unwrap_or(0)), ttl).await
}

/// Puts `bytes` under `key` of the runs bucket, on condition that `expected` is its
/// current revision (0: the key has no value) when given, expiring after `ttl` when given.
/// `Ok(None)`: the condition failed.
pub(in crate::shell) async fn put(
    shared: &Shared,
    key: &str,
    bytes: Vec<u8>,
    expected: Option<u64>,
    ttl: Option<Duration>,
) -> Result<Option<u64>> {
    put_in(&shared.js, &shared.runs, key, bytes, expected, ttl).await
}

/// [`put`] into any bucket.
pub(in crate::shell) async fn put_in(
    js: &async_nats::jetstream::Context,
    bucket: &async_nats::jetstream::kv::Store,
    key: &str,
    bytes: Vec<u8>,
    expected: Option<u64>,
    ttl: Option<Duration>,
) -> Result<Option<u64>> {
    use async_nats::jetstream::context::PublishErrorKind;
    let mut h = async_nats::HeaderMap::new();
    if let Some(revision) = expected {
        h.insert(
            async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            revision.to_string().as_str(),
        );
    }
    if let Some(ttl) = ttl {
        h.insert(async_nats::header::NATS_MESSAGE_TTL, ttl_secs(ttl).as_str());
    }
    let subject = messages::subjects::kv_key(&bucket.name, key);
    let sent = js.publish_with_headers(subject, h, bytes.into()).await;
    match async { sent?.await }.await {
        Ok(ack) => Ok(Some(ack.sequence)),
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence || wrong_last_sequence(&e) => {
            Ok(None)
        }
        Err(e) => Err(e).context(|| format!("writing {key}")),
    }
}

/// Whether a failed publish was refused for its expected last sequence: servers answer
/// that with error code 10071, or (2.11 on, in some paths) 10164, which the client does
/// not map to `WrongLastSequence`.
fn wrong_last_sequence(e: &async_nats::jetstream::context::PublishError) -> bool {
    let text = e.to_string();
    text.contains("error code 10071")
        || text.contains("error code 10164")
        || text.contains("wrong last sequence")
}

/// A TTL header's value: whole seconds, at least one.
fn ttl_secs(ttl: Duration) -> String {
    ttl.as_secs().max(1).to_string()
}

/// Makes what an ended run keeps beside its entry expire after the retention, like its
/// entry, and removes its maps' items and results.
pub(in crate::shell) async fn end(shared: &Shared, ending: Ending) -> Result<()> {
    start_puts(shared, ending.expire, shared.config.retention)
        .await?
        .stored()
        .await?;
    let stream = shared.runs.stream.clone();
    for pattern in ending.remove {
        let subject = messages::subjects::kv_key(&shared.runs.name, &pattern);
        stream
            .purge()
            .filter(subject)
            .await
            .context(|| format!("removing {pattern}"))?;
    }
    Ok(())
}

/// A run's output artifact, `(name, uri)`: version 1 of `{execution}.{tag}.output.json`
/// in the artifact bucket, where the commit ending the run stores an output over the
/// inline limit (see [`apart`]), and the one object every answer names.
pub(in crate::shell) fn output_artifact(shared: &Shared, execution: &str) -> (String, String) {
    let name = shared.seal.object_name(execution, ".output.json");
    let bucket = messages::subjects::artifact_bucket(&shared.ns);
    let uri = messages::payload::object_uri(&bucket, &messages::payload::version_key(&name, 1));
    (name, uri)
}

/// Writes in flight: started together, awaited together.
pub(in crate::shell) struct Pending(Vec<(String, PublishAckFuture)>);

/// Starts writing `writes` beside a run's entry, to expire after `ttl`; [`Pending::stored`]
/// waits for them. A value too large for one KV message goes to the object store first
/// (under its key's name), and its key holds a small stand-in naming it; a run's output
/// over the inline limit goes to the run's output artifact ([`output_artifact`]) instead.
pub(in crate::shell) async fn start_puts(
    shared: &Shared,
    writes: Vec<Write>,
    ttl: Duration,
) -> Result<Pending> {
    let bucket = crate::shell::run::names::runs_bucket(&shared.ns);
    let kv_limit = shared
        .client
        .server_info()
        .max_payload
        .saturating_sub(8 * 1024);
    let mut acks = Vec::with_capacity(writes.len());
    for Write {
        key,
        mut bytes,
        output_of,
    } in writes
    {
        if let Some(execution) = output_of {
            let (name, _) = output_artifact(shared, &execution);
            let uri = shared
                .artifacts
                .put_run(&name, &execution, bytes)
                .await
                .context(|| format!("storing the output of run {execution}"))?;
            bytes = serde_json::to_vec(&Moved {
                mesh_moved_to_object: uri,
            })?;
        } else if bytes.len() > kv_limit {
            let name = shared.seal.object_name(&format!("runs/{key}"), ".json");
            shared.artifacts.put(&name, bytes).await?;
            bytes = serde_json::to_vec(&Moved {
                mesh_moved_to_object: name,
            })?;
        }
        let mut h = async_nats::HeaderMap::new();
        h.insert(async_nats::header::NATS_MESSAGE_TTL, ttl_secs(ttl).as_str());
        let ack = shared
            .js
            .publish_with_headers(messages::subjects::kv_key(&bucket, &key), h, bytes.into())
            .await
            .context(|| format!("writing {key}"))?;
        acks.push((key, ack));
    }
    Ok(Pending(acks))
}

impl Pending {
    /// Waits until the server stored every write.
    pub(in crate::shell) async fn stored(self) -> Result<()> {
        for (key, ack) in self.0 {
            ack.await.context(|| format!("writing {key}"))?;
        }
        Ok(())
    }
}
