//! What lives beside a run's KV entry instead of in it, so the cost of an event does not
//! grow with a map's items and the entry stays far below NATS's max payload: the items
//! and results of large maps, and a large workflow input. Pure layout decisions;
//! `store::runs` reads and writes them.
//!
//! The core keeps a map's `items` and `results` inline ([`crate::core::MapState`]); the
//! shell persists them apart once a map has more than [`INLINE_ITEMS`] items:
//!
//! - items: written once, in chunks of at most [`CHUNK_BYTES`], under
//!   `{run key}.items.{map}.{chunk}`, **before** the commit that starts the map (their
//!   content is fixed by the committed state, so a writer that loses the CAS writes the same
//!   bytes);
//! - results: one key per item, `{run key}.result.{map}.{index}`, written **after** the
//!   commit that records the item's end, as part of that event's outbox entry (so a replica
//!   that dies before writing it leaves it in the entry, and the redelivery writes it);
//! - the run's entry holds the map's counters and [`MapRef`] (the chunk layout), with
//!   `items` and `results` emptied.
//!
//! - a large workflow input (above [`INLINE_INPUT`] bytes) is kept under `{run key}.input`,
//!   written before the commit that starts the run; the entry holds null in its place.
//! - the run's output, set by the commit that ends the run, is kept under
//!   `{run key}.output` when large; one over the inline limit (what callers get as an
//!   artifact) is stored, before that commit, as the run's output artifact, and the key
//!   names it. Every later answer (the final reply, a resent request's, `tasks/get`, from
//!   any replica) names that one object: none stores it again.
//!
//! A replica that loads the run reads the item chunks at once, but the results only before
//! an event that may end the map (they are only needed for its output), taking results
//! still in outbox entries first.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::core::{Detail, Event, MapState, Slot};
use crate::definition::{NodeRole, Workflow};
use crate::shell::run::names::{input_key, items_key, node_output_key, result_key, run_output_key};
use crate::shell::run::record::{ItemResult, MapRef, RunRecord};

/// Maps with at most this many items stay inline in the run's entry.
pub const INLINE_ITEMS: usize = 256;
/// Workflow inputs up to this many bytes stay inline in the run's entry.
pub const INLINE_INPUT: usize = 16 * 1024;
/// Node and run outputs up to this many bytes stay inline in the run's entry.
pub const INLINE_OUTPUT: usize = 16 * 1024;
/// Most serialised item bytes per chunk key.
pub const CHUNK_BYTES: usize = 128 * 1024;

/// A value to put under a key of the runs bucket, beside a run's entry.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::shell) struct Write {
    /// Full key, starting with the run's key (`{workflow}.{execution}.…`, see `names`).
    pub(in crate::shell) key: String,
    /// The JSON-encoded value, put as is.
    pub(in crate::shell) bytes: Vec<u8>,
    /// `Some(execution)`: the run's output over the inline limit, stored as that run's
    /// output artifact (its key holds a stand-in naming the artifact).
    pub(in crate::shell) output_of: Option<String>,
}

impl Write {
    /// A value kept in the runs bucket (moved to the object store only when too large
    /// for a KV message).
    fn kv(key: String, bytes: Vec<u8>) -> Write {
        Write {
            key,
            bytes,
            output_of: None,
        }
    }
}

fn running_maps(record: &mut RunRecord) -> impl Iterator<Item = (&String, &mut MapState)> {
    record
        .state
        .nodes
        .iter_mut()
        .filter_map(|(id, n)| match n.detail.as_mut() {
            Some(Detail::Map(m)) => Some((id, m)),
            _ => None,
        })
}

/// Externalises what just got large: returns the writes to make before the commit (a
/// large input, the item chunks of a map that just started, outputs that are new or
/// changed) and records where they are. Forgets maps that ended. A run output over
/// `inline_limit` (`Config::inline_limit`) is stored as the run's output artifact.
pub(in crate::shell) fn set_apart(
    record: &mut RunRecord,
    run_key: &str,
    inline_limit: usize,
) -> serde_json::Result<Vec<Write>> {
    let mut writes = set_outputs_apart(record, run_key, inline_limit)?;
    if !record.input_apart && record.state.started {
        let input = serde_json::to_vec(&record.state.input)?;
        if input.len() > INLINE_INPUT {
            writes.push(Write::kv(input_key(run_key), input));
            record.input_apart = true;
        }
    }
    let mut refs = std::mem::take(&mut record.maps);
    let mut alive = BTreeMap::new();
    for (id, map) in running_maps(record) {
        if let Some(r) = refs.remove(id) {
            alive.insert(id.clone(), r);
            continue;
        }
        if map.items.len() <= INLINE_ITEMS {
            continue;
        }
        let mut starts = Vec::new();
        let mut chunk: Vec<&Value> = Vec::new();
        let mut size = 0;
        let mut flush = |chunk: &mut Vec<&Value>,
                         starts: &mut Vec<u32>,
                         next: usize|
         -> serde_json::Result<()> {
            let first = next - chunk.len();
            starts.push(first as u32);
            let bytes = serde_json::to_vec(chunk)?;
            writes.push(Write::kv(items_key(run_key, id, starts.len() - 1), bytes));
            chunk.clear();
            Ok(())
        };
        for (i, item) in map.items.iter().enumerate() {
            let n = serde_json::to_vec(item)?.len();
            if !chunk.is_empty() && size + n > CHUNK_BYTES {
                flush(&mut chunk, &mut starts, i)?;
                size = 0;
            }
            size += n;
            chunk.push(item);
        }
        if !chunk.is_empty() {
            flush(&mut chunk, &mut starts, map.items.len())?;
        }
        let total = map.items.len() as u32;
        alive.insert(
            id.clone(),
            MapRef {
                starts,
                total,
                results_loaded: true,
            },
        );
    }
    record.maps_apart |= !alive.is_empty();
    record.maps = alive;
    Ok(writes)
}

/// Writes the node outputs and the run output that are large and not yet apart (or
/// changed since: an inner node's output changes each iteration); an output that became
/// small again goes back inline. The run's output is kept apart above the smaller of
/// [`INLINE_OUTPUT`] and `inline_limit`, and above `inline_limit` as its artifact.
fn set_outputs_apart(
    record: &mut RunRecord,
    run_key: &str,
    inline_limit: usize,
) -> serde_json::Result<Vec<Write>> {
    let mut writes = Vec::new();
    for (id, node) in &record.state.nodes {
        let Some(output) = &node.output else {
            record.outputs_apart.remove(id);
            continue;
        };
        let rev = node.output_rev;
        if record.outputs_measured.get(id) == Some(&rev) {
            continue;
        }
        record.outputs_measured.insert(id.clone(), rev);
        let bytes = serde_json::to_vec(output)?;
        if bytes.len() <= INLINE_OUTPUT {
            record.outputs_apart.remove(id);
        } else if record.outputs_apart.get(id) != Some(&rev) {
            writes.push(Write::kv(node_output_key(run_key, id), bytes));
            record.outputs_apart.insert(id.clone(), rev);
        }
    }
    match &record.state.output {
        None => {
            record.output_apart = false;
            record.output_artifact = false;
        }
        Some(_) if record.output_apart => {}
        Some(output) => {
            let bytes = serde_json::to_vec(output)?;
            if bytes.len() > INLINE_OUTPUT.min(inline_limit) {
                let artifact = bytes.len() > inline_limit;
                writes.push(Write {
                    key: run_output_key(run_key),
                    bytes,
                    output_of: artifact.then(|| record.state.id.0.clone()),
                });
                record.output_apart = true;
                record.output_artifact = artifact;
            }
        }
    }
    Ok(writes)
}

/// The run's entry as stored: without what is kept apart (a large input and outputs, the
/// items and results of map kept aparts).
pub(in crate::shell) fn encode(record: &mut RunRecord) -> serde_json::Result<Vec<u8>> {
    let externalised: Vec<String> = record.maps.keys().cloned().collect();
    let aside = Aside::take(record, |id| externalised.iter().any(|m| m == id));
    let bytes = serde_json::to_vec(record);
    aside.put_back(record);
    bytes
}

/// Values taken out of a run's state for a moment, to be put back.
struct Aside {
    input: Option<Value>,
    output: Option<Value>,
    outputs: Vec<(String, Value)>,
    maps: Vec<(String, Vec<Value>, Vec<Value>)>,
}

impl Aside {
    /// Takes out what is kept apart, and the items and results of the maps `map` selects.
    fn take(record: &mut RunRecord, map: impl Fn(&str) -> bool) -> Aside {
        let state = &mut record.state;
        let input = record.input_apart.then(|| std::mem::take(&mut state.input));
        let output = if record.output_apart {
            state.output.take()
        } else {
            None
        };
        let mut outputs = Vec::new();
        let mut maps = Vec::new();
        for (id, n) in state.nodes.iter_mut() {
            if record.outputs_apart.contains_key(id) {
                if let Some(o) = n.output.take() {
                    outputs.push((id.clone(), o));
                }
            }
            if let Some(Detail::Map(m)) = n.detail.as_mut() {
                if map(id) {
                    let items = std::mem::take(&mut m.items);
                    maps.push((id.clone(), items, std::mem::take(&mut m.results)));
                }
            }
        }
        Aside {
            input,
            output,
            outputs,
            maps,
        }
    }

    fn put_back(self, record: &mut RunRecord) {
        let state = &mut record.state;
        if let Some(input) = self.input {
            state.input = input;
        }
        if self.output.is_some() {
            state.output = self.output;
        }
        for (id, o) in self.outputs {
            if let Some(n) = state.nodes.get_mut(&id) {
                n.output = Some(o);
            }
        }
        for (id, items, results) in self.maps {
            if let Some(Some(Detail::Map(m))) = state.nodes.get_mut(&id).map(|n| n.detail.as_mut())
            {
                m.items = items;
                m.results = results;
            }
        }
    }
}

/// The map kept apart whose inner node made `event`'s call, if the event is an item's
/// success that may end a map whose results are not loaded.
fn unloaded_map_ending<'r>(
    workflow: &Workflow,
    record: &'r RunRecord,
    event: &Event,
    ahead: u32,
) -> Option<&'r String> {
    let Event::CallSucceeded { task, .. } = event else {
        return None;
    };
    let Slot::Item(_) = task.slot else {
        return None;
    };
    let idx = *workflow.graph.index.get(&task.node)?;
    let NodeRole::Inner { owner } = workflow.graph.roles[idx] else {
        return None;
    };
    let map_id = &workflow.nodes[owner].id;
    let (id, r) = record.maps.get_key_value(map_id)?;
    let Some(Detail::Map(map)) = record.state.nodes.get(id)?.detail.as_ref() else {
        return None;
    };
    (!r.results_loaded && map.done + ahead >= r.total).then_some(id)
}

/// Before applying `event` (and `ahead - 1` more events with it, a group commit), when
/// they may end an map kept apart whose results are not loaded: fills in the results
/// still in outbox entries, and returns the map and the indices of the results to read
/// from their keys (`store::load_results`).
pub(in crate::shell) fn results_wanted(
    workflow: &Workflow,
    record: &mut RunRecord,
    event: &Event,
    ahead: u32,
) -> Option<(String, Vec<u32>)> {
    let id = unloaded_map_ending(workflow, record, event, ahead)?.clone();
    let pending: Vec<ItemResult> = record
        .outbox
        .iter()
        .flat_map(|e| e.results.iter())
        .filter(|r| r.map == id)
        .cloned()
        .collect();
    let running: std::collections::HashSet<u32> = record
        .state
        .calls
        .keys()
        .filter_map(|k| match k.slot {
            Slot::Item(i) => Some(i),
            _ => None,
        })
        .collect();
    let map = map_mut(record, &id)?;
    for r in pending {
        if let Some(slot) = map.results.get_mut(r.index as usize) {
            *slot = r.value;
        }
    }
    let wanted = (0..map.next)
        .filter(|i| !running.contains(i) && map.results[*i as usize].is_null())
        .collect();
    Some((id, wanted))
}

/// The state of map `id`, if it is a map that has started.
pub(in crate::shell) fn map_mut<'r>(
    record: &'r mut RunRecord,
    id: &str,
) -> Option<&'r mut MapState> {
    match record.state.nodes.get_mut(id)?.detail.as_mut()? {
        Detail::Map(map) => Some(map),
        _ => None,
    }
}

/// After applying `event`: the item result to store apart, when it ended an item of an
/// map kept apart that goes on.
pub(in crate::shell) fn item_results(
    workflow: &Workflow,
    record: &RunRecord,
    event: &Event,
) -> Vec<ItemResult> {
    let Event::CallSucceeded { task, .. } = event else {
        return Vec::new();
    };
    let Slot::Item(i) = task.slot else {
        return Vec::new();
    };
    let Some(&idx) = workflow.graph.index.get(&task.node) else {
        return Vec::new();
    };
    let NodeRole::Inner { owner } = workflow.graph.roles[idx] else {
        return Vec::new();
    };
    let map_id = &workflow.nodes[owner].id;
    if !record.maps.contains_key(map_id) {
        return Vec::new();
    }
    let Some(Detail::Map(map)) = record
        .state
        .nodes
        .get(map_id)
        .and_then(|n| n.detail.as_ref())
    else {
        return Vec::new();
    };
    let called = record.state.calls.contains_key(task);
    match map.results.get(i as usize) {
        Some(value) if !called => vec![ItemResult {
            map: map_id.clone(),
            index: i,
            value: value.clone(),
        }],
        _ => Vec::new(),
    }
}

/// The values a run keeps apart (its input and outputs), as they are stored: all but an
/// output stored as the run's artifact, which the commit ending the run wrote (its key
/// and object live the retention from then), and which is never stored twice.
pub(in crate::shell) fn kept_apart(
    record: &RunRecord,
    run_key: &str,
) -> serde_json::Result<Vec<Write>> {
    let state = &record.state;
    let mut writes = Vec::new();
    if record.input_apart {
        let bytes = serde_json::to_vec(&state.input)?;
        writes.push(Write::kv(input_key(run_key), bytes));
    }
    let output = state.output.as_ref();
    if let (true, false, Some(output)) = (record.output_apart, record.output_artifact, output) {
        let bytes = serde_json::to_vec(output)?;
        writes.push(Write::kv(run_output_key(run_key), bytes));
    }
    for id in record.outputs_apart.keys() {
        if let Some(output) = state.nodes.get(id).and_then(|n| n.output.as_ref()) {
            let bytes = serde_json::to_vec(output)?;
            writes.push(Write::kv(node_output_key(run_key, id), bytes));
        }
    }
    Ok(writes)
}

/// The key patterns of the items and results of a run's maps (see the module doc).
pub(in crate::shell) fn map_key_patterns(run_key: &str) -> Vec<String> {
    vec![format!("{run_key}.items.>"), format!("{run_key}.result.>")]
}

/// Empties every output the run holds (node outputs, map results, the run's output): what
/// an abandoned run keeps is its control state and error.
pub(in crate::shell) fn drop_outputs(record: &mut RunRecord) {
    record.state.output = None;
    record.output_apart = false;
    record.output_artifact = false;
    record.outputs_apart.clear();
    for node in record.state.nodes.values_mut() {
        node.output = None;
        if let Some(Detail::Map(map)) = node.detail.as_mut() {
            map.results.iter_mut().for_each(|r| *r = Value::Null);
        }
    }
}

/// The writes of item results.
pub(in crate::shell) fn result_writes(
    run_key: &str,
    results: &[ItemResult],
) -> serde_json::Result<Vec<Write>> {
    results
        .iter()
        .map(|r| {
            let bytes = serde_json::to_vec(&r.value)?;
            Ok(Write::kv(result_key(run_key, &r.map, r.index), bytes))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Execution, ExecutionId, RunStatus};
    use crate::shell::run::envelope::Caller;

    /// A run that just ended with an output of `len` bytes (as JSON).
    fn ended(len: usize) -> RunRecord {
        let mut state = Execution::new(ExecutionId("e1".into()), "W");
        state.started = true;
        state.status = RunStatus::Success;
        state.output = Some(Value::String("x".repeat(len - 2)));
        RunRecord::new(state, Caller::default())
    }

    #[test]
    fn an_output_over_the_inline_limit_is_stored_once_as_the_runs_artifact() {
        let mut record = ended(300 * 1024);
        let writes = set_apart(&mut record, "W.e1", 256 * 1024).expect("encodes");
        let output: Vec<&Write> = writes.iter().filter(|w| w.key == "W.e1.output").collect();
        assert_eq!(output.len(), 1, "{writes:?}");
        assert_eq!(output[0].output_of.as_deref(), Some("e1"));
        assert!(record.output_apart && record.output_artifact);
        // Neither a later commit nor the run's end writes it again.
        assert!(set_apart(&mut record, "W.e1", 256 * 1024)
            .expect("encodes")
            .is_empty());
        let expire = kept_apart(&record, "W.e1").expect("encodes");
        assert!(expire.iter().all(|w| w.key != "W.e1.output"), "{expire:?}");
    }

    #[test]
    fn an_output_under_the_inline_limit_is_kept_in_kv_and_expires_with_the_run() {
        let mut record = ended(40 * 1024);
        let writes = set_apart(&mut record, "W.e1", 256 * 1024).expect("encodes");
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert_eq!(writes[0].output_of, None);
        assert!(record.output_apart && !record.output_artifact);
        let expire = kept_apart(&record, "W.e1").expect("encodes");
        assert!(expire.iter().any(|w| w.key == "W.e1.output"), "{expire:?}");
    }

    #[test]
    fn a_small_inline_limit_makes_a_small_output_the_runs_artifact() {
        let mut record = ended(1024);
        let writes = set_apart(&mut record, "W.e1", 64).expect("encodes");
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert_eq!(writes[0].output_of.as_deref(), Some("e1"));
        assert!(record.output_artifact);
    }
}
