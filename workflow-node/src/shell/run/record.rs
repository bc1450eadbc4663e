//! What one KV entry holds for a run: the core's state, who to answer, and the outbox of
//! commands committed but perhaps not yet carried out.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::collections::BTreeMap;

use crate::core::{Command, Execution, Millis, TaskKey};
use crate::shell::run::check::CallCheck;
use crate::shell::run::envelope::Caller;
use crate::shell::run::history::HistoryEntry;
use crate::shell::run::spans::{CallTimes, EndedSpan};
use crate::shell::run::wake::{PendingTimer, Wake, WakeWrite};

/// Commands produced by one event and committed with its state. An entry stays until its
/// event's processing finished its side effects; a redelivered event whose entry is still
/// here carries them out again (at-least-once), instead of re-applying the event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// Stream sequence of the event that produced the commands: a redelivery with this
    /// sequence replays them, and the entry is dropped once they are carried out.
    pub seq: u64,
    /// When it was committed (entries older than the redelivery horizon are dropped).
    pub at: Millis,
    /// The commands, thinned (see `outbox`): dispatch inputs, outputs and the run's input
    /// are left out and taken back from `state` when replayed.
    pub commands: Vec<Command>,
    /// Item results of large maps to write to their own keys (see `apart`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ItemResult>,
    /// The run's history entry for the event, published after the commit (and again on a
    /// replay: its message id makes the stream keep one copy; see `history`). Entries
    /// committed since history is held in the record go in `more_history` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryEntry>,
    /// Spans the event ended (when traces are exported): emitted again if the event comes
    /// back before it was acked, as its commands are carried out again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<EndedSpan>,
    /// The run's wake entry to write or remove (see `wake`): written again on a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<WakeWrite>,
    /// The other events committed with this one (a group commit, see `plan::group`):
    /// a redelivery of any of them replays the entry, which holds all their commands,
    /// results, history entries and wake writes. Every event of a group is acked only once
    /// all of it is carried out, so the entry goes with `seq`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group: Vec<u64>,
    /// History entries to publish after `history`, in one message: those this commit took
    /// out of the record's `history_held` (and, in a group, those of the group's events).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_history: Vec<HistoryEntry>,
    /// Whether the entry's timers are kept as the run's wake (every entry committed since
    /// wakes exist). A replayed entry from before arms its `StartTimer` commands one entry
    /// per timer, as it was committed to.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timers_in_wake: bool,
}

/// One run's entry in the runs bucket, under the run's key `{workflow}.{execution}`;
/// committed by compare-and-swap on the revision it was read at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The core's state of the run, as `apply` left it after the last committed event.
    pub state: Execution,
    /// Who started the run: it hears of its progress and gets the final reply.
    pub caller: Caller,
    /// The content hash of the definition the run started with: its events are applied
    /// with that one only. `None` for runs started before definitions were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// Callers that resent the request from other reply addresses while the run went on:
    /// they hear of it too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached: Vec<Caller>,
    /// Commands committed, maybe not carried out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<OutboxEntry>,
    /// Large maps whose items and results are kept under keys of their own (see `apart`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub maps: BTreeMap<String, MapRef>,
    /// Whether the workflow input is kept under a key of its own (see `apart`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_apart: bool,
    /// Nodes whose output is kept under a key of its own, with the `output_rev` stored
    /// there (see `apart`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs_apart: BTreeMap<String, u32>,
    /// Whether any of the run's maps ever kept its items and results apart (their keys are
    /// removed when the run ends).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maps_apart: bool,
    /// Whether the run's output is kept under a key of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_apart: bool,
    /// Whether the output kept apart is the run's output artifact (it was over the inline
    /// limit), stored before the commit that ended the run: answers name that object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_artifact: bool,
    /// History entries committed and not yet published: they go to the history stream
    /// together, in one message, once [`crate::shell::run::history::HELD_MAX`] of them are held or the
    /// run has ended (see `history`); readers take them from here meanwhile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history_held: Vec<HistoryEntry>,
    /// How many events changed the run (committed): numbers its history entries.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub applied: u64,
    /// When the run ended (the commit that made it terminal); `None` while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Millis>,
    /// Attempts dispatched so far, by node (every call of a map's inner node, fork branch
    /// or loop iteration counts): for inspection only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attempts: BTreeMap<String, u32>,
    /// Approvals waiting for a decision, by node, with what their approvers were asked:
    /// for `workflow-node approvals`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub asks: BTreeMap<String, ApprovalAsk>,
    /// When each call in flight, and its current attempt, started (kept while traces are
    /// exported): the start of their spans, which are emitted when they end, maybe by
    /// another replica (see `spans`). The run's and its nodes' starts are in `state`, the
    /// caller's trace context in `caller.traceparent`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub call_times: BTreeMap<TaskKey, CallTimes>,
    /// The timers the run has started and not yet seen fire or cancelled, by key: the
    /// wake fires them (see `wake`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timers: BTreeMap<String, PendingTimer>,
    /// The liveness checks of the calls in flight, by call: the wake stands for the
    /// earliest of them too (see `check`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checks: BTreeMap<TaskKey, CallCheck>,
    /// The run's wake entry in the wakes bucket, as last armed by a commit: no later
    /// than the earliest of `timers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<Wake>,
    /// Outputs already measured, by node and `output_rev`: small ones are not measured
    /// again at every event. Not stored: a replica that loads the run measures once.
    #[serde(skip)]
    pub outputs_measured: BTreeMap<String, u32>,
    /// The size of the entry as last stored or read (not stored): for the cache's budget.
    #[serde(skip)]
    pub entry_bytes: usize,
    /// The bytes of what this copy holds beside its entry, read or written (input,
    /// outputs, items, results; not stored): for the cache's budget. Grows only.
    #[serde(skip)]
    pub held_bytes: usize,
}

impl RunRecord {
    /// The record of a new run of `caller`'s.
    pub fn new(state: Execution, caller: Caller) -> RunRecord {
        RunRecord {
            state,
            caller,
            definition: None,
            attached: Vec::new(),
            outbox: Vec::new(),
            maps: BTreeMap::new(),
            input_apart: false,
            outputs_apart: BTreeMap::new(),
            output_apart: false,
            output_artifact: false,
            call_times: BTreeMap::new(),
            maps_apart: false,
            history_held: Vec::new(),
            applied: 0,
            ended_at: None,
            attempts: BTreeMap::new(),
            asks: BTreeMap::new(),
            timers: BTreeMap::new(),
            checks: BTreeMap::new(),
            wake: None,
            outputs_measured: BTreeMap::new(),
            entry_bytes: 0,
            held_bytes: 0,
        }
    }

    /// Everyone who hears of the run: its caller, then the callers attached later.
    pub fn callers(&self) -> Vec<Caller> {
        std::iter::once(self.caller.clone())
            .chain(self.attached.iter().cloned())
            .collect()
    }
}

/// What an approval node waiting for a decision asked of its approvers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAsk {
    /// Who may decide (empty: anyone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// The node's message, templates resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it times out, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Millis>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An item's result, kept in its event's outbox entry until written to its own key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    /// Id of the map node; with `index` it names the key `{run}.result.{map}.{index}`.
    pub map: String,
    /// 0-based position of the item in the map's items, and of its result in the results.
    pub index: u32,
    /// The item's output, as it goes into the map's results.
    pub value: Value,
}

/// Where a map's items kept apart are: the first item index of each chunk.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MapRef {
    /// First item index of each chunk (chunk `c` holds `starts[c]..starts[c+1]`).
    pub starts: Vec<u32>,
    /// Number of items across all chunks: the last chunk ends here.
    pub total: u32,
    /// Whether the item results are in memory (not persisted: false after a load).
    #[serde(skip)]
    pub results_loaded: bool,
}
