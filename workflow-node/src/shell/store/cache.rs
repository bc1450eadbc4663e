//! A worker's cache of the runs it processed last, bounded by bytes: a run that comes
//! back to the same worker is not read from KV again. Sizes are estimates (the run's entry
//! as stored, plus what it holds beside it that this copy read or wrote); a run larger
//! than the whole budget is not cached at all.

use std::collections::HashMap;

use crate::core::ExecutionId;
use crate::shell::run::record::RunRecord;

/// Cached runs with their KV revision, within a byte budget.
pub(in crate::shell) struct RunCache {
    entries: HashMap<ExecutionId, (u64, RunRecord, usize)>,
    bytes: usize,
    budget: usize,
}

impl RunCache {
    /// An empty cache that holds at most about `budget` bytes.
    pub(in crate::shell) fn new(budget: usize) -> RunCache {
        RunCache {
            entries: HashMap::new(),
            bytes: 0,
            budget,
        }
    }

    /// Takes a run out (the worker puts it back, or a newer copy, when done).
    pub(in crate::shell) fn take(&mut self, execution: &ExecutionId) -> Option<(u64, RunRecord)> {
        let (revision, record, size) = self.entries.remove(execution)?;
        self.bytes -= size;
        Some((revision, record))
    }

    /// Keeps a run at `revision`, making room by dropping others.
    pub(in crate::shell) fn keep(
        &mut self,
        execution: ExecutionId,
        revision: u64,
        record: RunRecord,
    ) {
        let size = record.entry_bytes + record.held_bytes;
        if let Some((_, _, old)) = self.entries.remove(&execution) {
            self.bytes -= old;
        }
        if size > self.budget {
            return;
        }
        while self.bytes + size > self.budget {
            let Some(victim) = self.entries.keys().next().cloned() else {
                break;
            };
            if let Some((_, _, freed)) = self.entries.remove(&victim) {
                self.bytes -= freed;
            }
        }
        self.bytes += size;
        self.entries.insert(execution, (revision, record, size));
    }

    /// The bytes held, as estimated.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Execution;
    use crate::shell::run::envelope::Caller;

    fn run(i: usize, size: usize) -> (ExecutionId, RunRecord) {
        let id = ExecutionId(format!("{i:032x}"));
        let mut record = RunRecord::new(Execution::new(id.clone(), "W"), Caller::default());
        record.entry_bytes = size / 2;
        record.held_bytes = size - size / 2;
        (id, record)
    }

    #[test]
    fn the_cache_stays_within_its_budget_dropping_runs_to_make_room() {
        let mut cache = RunCache::new(1_000);
        for i in 0..10 {
            let (id, record) = run(i, 300);
            cache.keep(id, 1, record);
            assert!(
                cache.bytes() <= 1_000,
                "{} bytes after run {i}",
                cache.bytes()
            );
        }
        assert_eq!(cache.entries.len(), 3);
        let (id, _) = run(9, 300);
        assert!(cache.take(&id).is_some(), "the last run kept is there");
        assert_eq!(cache.bytes(), 600);
    }

    #[test]
    fn a_run_larger_than_the_budget_is_not_cached_and_replacing_one_frees_its_bytes() {
        let mut cache = RunCache::new(1_000);
        let (id, record) = run(1, 400);
        cache.keep(id.clone(), 1, record.clone());
        cache.keep(id.clone(), 2, record);
        assert_eq!(cache.bytes(), 400, "a newer copy replaces the old one");
        let (big, record) = run(2, 5_000);
        cache.keep(big.clone(), 1, record);
        assert!(cache.take(&big).is_none());
        assert_eq!(cache.take(&id).map(|(rev, _)| rev), Some(2));
        assert_eq!(cache.bytes(), 0);
    }
}
