//! Where runs are kept, and reading them back: the runs bucket (read, compare-and-swap,
//! the keys kept beside an entry), a workflow's event stream, the history stream, the
//! stored definition versions runs are applied with, and the worker's cache of records.
//!
//! - `runs`: a run's entry in KV: load, commit with compare-and-swap, end, keys apart.
//! - `events`: a workflow's event stream and consumer; publishing an event into it.
//! - `history`: publishing a run's history entries into the history stream.
//! - `schedules`: the schedules' entries, written by compare-and-swap.
//! - `inspect`: reading runs and their history for operators.
//! - `versions`: the definitions runs use, stored by content hash, and their sweep.
//! - `cache`: records kept in memory between a run's events.

pub(in crate::shell) mod cache;
pub(in crate::shell) mod events;
pub(in crate::shell) mod history;
pub mod inspect;
pub(in crate::shell) mod runs;
pub mod schedules;
pub mod versions;
