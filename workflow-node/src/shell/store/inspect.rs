//! Reading runs as an operator does (`workflow-node runs`, `approvals`): straight from the
//! runs bucket and the history stream, with no workflow node needed. Run records are read
//! whole in one pass of an ordered consumer (the last value of each `{workflow}.{execution}`
//! key), and what a run keeps apart (a large input or output, in its own key or the object
//! store) only when asked.
//!
//! Nothing here writes: cancels and approval decisions go to the workflows' nodes, which
//! check them (see `cli::runs`).

use std::time::Duration;

use async_nats::jetstream::consumer::{push, DeliverPolicy, ReplayPolicy};
use async_nats::jetstream::{self, kv, stream};
use futures::StreamExt;
use messages::subjects;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::core::ExecutionId;
use crate::shell::error::{Context, Error, Result};
use crate::shell::run::history::{self, HistoryEntry};
use crate::shell::run::names::{self, input_key, run_output_key};
use crate::shell::run::record::RunRecord;
use crate::shell::store::runs::{moved_to, read_from};

/// How long one pass over a bucket or stream may take.
const SCAN_TIMEOUT: Duration = Duration::from_secs(60);

/// The history entries a run's record holds: those not published yet, and those its
/// outbox entries are publishing.
fn unpublished(record: RunRecord) -> Vec<HistoryEntry> {
    let publishing = record
        .outbox
        .into_iter()
        .flat_map(|e| e.history.into_iter().chain(e.more_history));
    record.history_held.into_iter().chain(publishing).collect()
}

/// A run as found in the runs bucket.
#[derive(Debug, Clone)]
pub struct FoundRun {
    /// The workflow it runs (the first token of its key).
    pub workflow: String,
    /// Its execution id.
    pub execution: ExecutionId,
    /// The KV revision read.
    pub revision: u64,
    /// Its record, without what it keeps apart (see [`Inspector::apart`]).
    pub record: RunRecord,
}

/// What a run keeps beside its record, read back.
#[derive(Debug, Clone, Default)]
pub struct Apart {
    /// The workflow input, when it is kept apart.
    pub input: Option<Value>,
    /// The run's output, when it is kept apart.
    pub output: Option<Value>,
}

/// Reads the runs and histories of one namespace.
#[derive(Clone)]
pub struct Inspector {
    client: async_nats::Client,
    js: jetstream::Context,
    ns: String,
    runs: kv::Store,
}

impl Inspector {
    /// Opens the runs bucket of namespace `ns`: [`Error::Missing`] when it does not exist
    /// (no workflow node ever ran there).
    pub async fn open(client: async_nats::Client, ns: &str) -> Result<Inspector> {
        let js = jetstream::new(client.clone());
        let bucket = names::runs_bucket(ns);
        let runs = match js.get_key_value(&bucket).await {
            Ok(runs) => runs,
            Err(e) if e.kind() == jetstream::context::KeyValueErrorKind::GetBucket => {
                return Err(Error::Missing(format!(
                    "the runs bucket {bucket} (no workflow node has run in namespace '{ns}')"
                )))
            }
            Err(e) => return Err(e).context(|| format!("opening bucket {bucket}")),
        };
        Ok(Inspector {
            client,
            js,
            ns: ns.to_string(),
            runs,
        })
    }

    /// Every run kept (of `workflow` only, when given), in no particular order.
    pub async fn list(&self, workflow: Option<&str>) -> Result<Vec<FoundRun>> {
        let pattern = format!("{}.*", workflow.unwrap_or("*"));
        self.records(&pattern).await
    }

    /// The run named by `id`: its execution id, or, with `workflow`, the task id `caller`
    /// (its `Mesh-Caller`, if any) started it with. `None` when there is no such run (a
    /// run of another workflow than `workflow` is returned: the caller tells them apart).
    pub async fn find(
        &self,
        id: &str,
        workflow: Option<&str>,
        caller: Option<&str>,
    ) -> Result<Option<FoundRun>> {
        if let Ok(execution) = ExecutionId::parse(id) {
            let found = self.records(&format!("*.{}", execution.0)).await?;
            let preferred = found
                .iter()
                .position(|r| workflow.is_none_or(|w| r.workflow == w))
                .unwrap_or(0);
            if let Some(run) = found.into_iter().nth(preferred) {
                return Ok(Some(run));
            }
        }
        let Some(workflow) = workflow else {
            return Ok(None);
        };
        if subjects::validate_token(workflow).is_err() {
            return Ok(None);
        }
        let execution = names::caller_execution_id(workflow, caller, id);
        self.read_run(workflow, &execution).await
    }

    /// The run `execution` of `workflow` as stored now.
    pub async fn read_run(
        &self,
        workflow: &str,
        execution: &ExecutionId,
    ) -> Result<Option<FoundRun>> {
        let key = names::run_key(workflow, execution);
        let Some((revision, bytes)) = read_from(&self.runs, &key).await? else {
            return Ok(None);
        };
        Ok(Some(FoundRun {
            workflow: workflow.to_string(),
            execution: execution.clone(),
            revision,
            record: decode_record(&bytes, &key)?,
        }))
    }

    /// Reads back the input and output `run` keeps apart (following a value moved to the
    /// object store); values it keeps in its record are not repeated.
    pub async fn apart(&self, run: &FoundRun) -> Result<Apart> {
        let key = names::run_key(&run.workflow, &run.execution);
        let mut apart = Apart::default();
        if run.record.input_apart {
            apart.input = self.value(&input_key(&key)).await?;
        }
        if run.record.output_apart {
            apart.output = self.value(&run_output_key(&key)).await?;
        }
        Ok(apart)
    }

    /// The history of run `execution` of `workflow`, in order (empty when none is kept):
    /// the entries its record still holds or is publishing, then those in the stream. The
    /// record is read first: an entry that leaves it afterwards was published by then.
    pub async fn history(
        &self,
        workflow: &str,
        execution: &ExecutionId,
    ) -> Result<Vec<HistoryEntry>> {
        let mut entries = match self.read_run(workflow, execution).await? {
            Some(run) => unpublished(run.record),
            None => Vec::new(),
        };
        let name = names::history_stream(&self.ns);
        let stream = match self.js.get_stream(&name).await {
            Ok(s) => s,
            Err(e)
                if matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) =>
            {
                return Ok(history::in_order(entries))
            }
            Err(e) => return Err(e).context(|| format!("opening stream {name}")),
        };
        let subject = subjects::run_history(&self.ns, workflow, &execution.0);
        let mut seq = 0;
        while let Some(m) = next_of(&stream, &subject, seq + 1).await? {
            seq = m.sequence;
            match history::parse(&m.payload) {
                Ok(e) => entries.extend(e),
                Err(e) => tracing::warn!("skipping an unreadable history message: {e}"),
            }
        }
        Ok(history::in_order(entries))
    }

    /// A watch of run `execution`'s record: its current value, then every new one.
    pub async fn watch(&self, workflow: &str, execution: &ExecutionId) -> Result<kv::Watch> {
        let key = names::run_key(workflow, execution);
        self.runs
            .watch_with_history(&key)
            .await
            .context(|| format!("watching {key}"))
    }

    /// Waits until `changes` (the run's [`Inspector::watch`]) shows a revision past
    /// `run`'s; then read it with [`Inspector::read_run`]. Cancel-safe (it only waits on the
    /// watch, and drops only entries already seen), so it can race other futures in a
    /// `select!`. A watch error (a missed heartbeat, a server restart) is skipped.
    pub async fn changed(changes: &mut kv::Watch, run: &FoundRun) -> Result<()> {
        loop {
            match changes.next().await {
                Some(Ok(entry)) if entry.revision > run.revision => return Ok(()),
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::debug!("watch of run {}: {e}", run.execution),
                None => {
                    return Err(Error::Connection {
                        context: format!("watching run {}", run.execution),
                        source: "the watch ended".into(),
                    })
                }
            }
        }
    }

    /// The records under keys matching `pattern` (`{workflow}.{execution}`, with `*`s).
    async fn records(&self, pattern: &str) -> Result<Vec<FoundRun>> {
        let filter = subjects::kv_key(&self.runs.name, pattern);
        let messages = scan(
            &self.client,
            &self.runs.stream,
            filter,
            DeliverPolicy::LastPerSubject,
        )
        .await?;
        let prefix = subjects::kv_key(&self.runs.name, "");
        let mut runs = Vec::with_capacity(messages.len());
        for m in messages {
            let removed = m
                .headers
                .as_ref()
                .and_then(|h| h.get("KV-Operation"))
                .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
            let key = m.subject.trim_start_matches(prefix.as_str());
            let Some((workflow, execution)) = key.split_once('.') else {
                continue;
            };
            if removed || m.payload.is_empty() {
                continue;
            }
            let Ok(execution) = ExecutionId::parse(execution) else {
                continue;
            };
            let revision = m.info().map(|i| i.stream_sequence).unwrap_or(0);
            match decode_record(&m.payload, key) {
                Ok(record) => runs.push(FoundRun {
                    workflow: workflow.to_string(),
                    execution,
                    revision,
                    record,
                }),
                Err(e) => tracing::warn!("skipping {key}: {e}"),
            }
        }
        Ok(runs)
    }

    /// The value of a key kept beside a record, following it to the object store.
    async fn value(&self, key: &str) -> Result<Option<Value>> {
        let Some((_, bytes)) = read_from(&self.runs, key).await? else {
            return Ok(None);
        };
        let Some(object) = moved_to(&bytes) else {
            return decode(&bytes, key).map(Some);
        };
        // A run's output artifact is named by its URI; a value moved for its size, by name.
        let uri = match messages::payload::parse_object_uri(&object) {
            Some(_) => object,
            None => messages::payload::object_uri(&subjects::artifact_bucket(&self.ns), &object),
        };
        agent_sdk::ArtifactStore::new(self.client.clone(), &self.ns)
            .get_uri(&uri)
            .await
            .map(Some)
            .context(|| format!("reading {uri}"))
    }
}

/// A run's entry as stored (see [`crate::shell::run::entry`]).
fn decode_record(bytes: &[u8], key: &str) -> Result<RunRecord> {
    RunRecord::from_entry(bytes).map_err(|source| Error::Encoding {
        context: format!("decoding {key}"),
        source,
    })
}

fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| Error::Encoding {
        context: format!("decoding {what}"),
        source,
    })
}

/// Every message of `stream` on `filter` as `policy` delivers them, in one pass of an
/// ordered consumer (none when nothing matches).
/// The first message on `subject` in `stream` at or after sequence `from`, asked of the
/// stream's leader; `None` when there is none.
///
/// A run's history is read this way, a message at a time (a run has one per 16 entries),
/// rather than with an ordered consumer: an ordered consumer is a replica of one server,
/// which may be a follower still catching up after a restart, holding the entries written
/// since it came back and not yet those written while it was down. The leader has every
/// entry the stream acknowledged.
async fn next_of(
    stream: &stream::Stream,
    subject: &str,
    from: u64,
) -> Result<Option<jetstream::message::StreamMessage>> {
    use jetstream::stream::RawMessageErrorKind as Kind;
    let got = stream
        .raw_message_builder()
        .sequence(from)
        .next_by_subject(subject)
        .send()
        .await;
    match got {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == Kind::NoMessageFound => Ok(None),
        Err(e)
            if matches!(e.kind(), Kind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND) =>
        {
            Ok(None)
        }
        Err(e) => Err(e).context(|| format!("reading {subject}")),
    }
}

async fn scan(
    client: &async_nats::Client,
    stream: &stream::Stream,
    filter: String,
    policy: DeliverPolicy,
) -> Result<Vec<jetstream::Message>> {
    let what = || format!("reading {filter}");
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            filter_subject: filter.clone(),
            deliver_policy: policy,
            replay_policy: ReplayPolicy::Instant,
            ..Default::default()
        })
        .await
        .context(what)?;
    if consumer.cached_info().num_pending == 0 {
        return Ok(Vec::new());
    }
    let mut messages = consumer.messages().await.context(what)?;
    let read = async {
        let mut out = Vec::new();
        while let Some(m) = messages.next().await {
            let m = m.context(what)?;
            let pending = m.info().map(|i| i.pending).unwrap_or(0);
            out.push(m);
            if pending == 0 {
                break;
            }
        }
        Ok(out)
    };
    tokio::time::timeout(SCAN_TIMEOUT, read)
        .await
        .map_err(|_| Error::Connection {
            context: what(),
            source: "no end within 60 s".into(),
        })?
}
