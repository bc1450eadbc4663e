//! What the in-process node alone costs: its CPU, its allocations and the bytes it
//! encodes, apart from the echo agents and the caller that share the bench's process.
//!
//! The node runs on a tokio runtime of its own whose threads are named [`THREAD`]; its
//! connection is made on that runtime too, so the client's reader and writer tasks are
//! the node's. Its CPU is the sum of those threads' run time (`/proc/self/task/*/schedstat`,
//! in nanoseconds; `stat`'s 10 ms ticks where that file is missing), and a counting global
//! allocator adds an allocation to the node's count when the thread that makes it is one of
//! them (an allocation group each enters when the runtime starts it). This measures what a node process
//! of its own would spend, without a second binary to build and start for every scenario.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Value};
use tracking_allocator::{
    AllocationGroupId, AllocationGroupToken, AllocationRegistry, AllocationTracker,
};
use workflow_node::shell::EncodedCounts;

use super::floor::round;
use super::scenarios::us;

/// The name of the node runtime's threads (within the kernel's 15 bytes).
pub(crate) const THREAD: &str = "mesh-node";

/// Whether allocations are counted (see [`count_allocations`]).
static COUNTING: AtomicBool = AtomicBool::new(false);

/// Allocations made on the node's threads, and their bytes.
static NODE_ALLOCS: AtomicU64 = AtomicU64::new(0);
static NODE_ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

/// The bench's global allocator: the system's, each allocation tagged with the group of
/// the thread that made it (`tracking_allocator` holds the unsafe code, which the
/// workspace forbids in its own).
pub(crate) type Allocator = tracking_allocator::Allocator<std::alloc::System>;

/// Counts the allocations of every thread in a group of its own: only the node's threads
/// enter one (see [`runtime`]); all others stay in the root group.
struct NodeAllocations;

impl AllocationTracker for NodeAllocations {
    fn allocated(&self, _addr: usize, size: usize, _wrapped: usize, group: AllocationGroupId) {
        if group != AllocationGroupId::ROOT {
            NODE_ALLOCS.fetch_add(1, Ordering::Relaxed);
            NODE_ALLOC_BYTES.fetch_add(size as u64, Ordering::Relaxed);
        }
    }

    fn deallocated(
        &self,
        _addr: usize,
        _size: usize,
        _wrapped: usize,
        _source: AllocationGroupId,
        _current: AllocationGroupId,
    ) {
    }
}

/// Starts counting (once per process). Counting costs the node's threads CPU of their
/// own (every allocation of the process goes through the tracker, and the node's bump two
/// shared counters): `mesh-bench --no-allocation-count` leaves it off, to read the node's
/// CPU without it.
pub(crate) fn count_allocations() {
    if AllocationRegistry::set_global_tracker(NodeAllocations).is_ok() {
        AllocationRegistry::enable_tracking();
        COUNTING.store(true, Ordering::Relaxed);
    }
}

/// While it lives, allocations are not counted (and [`Usage::per`] reports none): under
/// load the counting itself took a sixth of the node's CPU, so `throughput` measures the
/// node's CPU without it and `chain` (one run at a time, where it costs little) counts.
pub(crate) struct CountingPaused(bool);

/// Stops counting until the returned guard is dropped.
pub(crate) fn pause_counting() -> CountingPaused {
    let was = COUNTING.swap(false, Ordering::Relaxed);
    if was {
        AllocationRegistry::disable_tracking();
    }
    CountingPaused(was)
}

impl Drop for CountingPaused {
    fn drop(&mut self) {
        if self.0 {
            AllocationRegistry::enable_tracking();
            COUNTING.store(true, Ordering::Relaxed);
        }
    }
}

/// Puts the calling thread into a group of its own for the rest of its life.
fn enter_node_group() {
    if let Some(token) = AllocationGroupToken::register() {
        let token: &'static mut AllocationGroupToken = Box::leak(Box::new(token));
        std::mem::forget(token.enter());
    }
}

/// A runtime for one in-process node: two workers (as many as a node process would get
/// on this machine; `MESH_BENCH_NODE_WORKERS` sets another number), threads named
/// [`THREAD`] whose allocations are counted.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    let workers = std::env::var("MESH_BENCH_NODE_WORKERS")
        .ok()
        .and_then(|w| w.parse::<usize>().ok())
        .filter(|w| *w > 0)
        .unwrap_or(2);
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(THREAD)
        .on_thread_start(enter_node_group)
        .enable_all()
        .build()?)
}

/// The ids of the node runtime's threads alive now.
pub(crate) fn node_threads() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|c| c.trim_end() == THREAD)
        })
        .collect()
}

/// CPU time used so far by the node's threads alive now (all of a runtime's workers live
/// as long as it does).
fn node_cpu() -> Option<Duration> {
    let tids = node_threads();
    if tids.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    for tid in tids {
        let schedstat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"));
        let ns = schedstat
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
        total += match ns {
            Some(ns) => Duration::from_nanos(ns),
            None => {
                let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
                super::env::cpu_ticks(&stat)?
            }
        };
    }
    Some(total)
}

/// What the node had spent at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    cpu: Option<Duration>,
    allocs: u64,
    alloc_bytes: u64,
    encoded: EncodedCounts,
}

impl Usage {
    /// Now, with the node's encoded counts.
    pub(crate) fn now(encoded: EncodedCounts) -> Usage {
        Usage {
            cpu: node_cpu(),
            allocs: NODE_ALLOCS.load(Ordering::Relaxed),
            alloc_bytes: NODE_ALLOC_BYTES.load(Ordering::Relaxed),
            encoded,
        }
    }

    /// What was spent between `before` and `self`, per one of `units` node executions.
    pub(crate) fn per(&self, before: &Usage, units: u64) -> PerNode {
        let n = units.max(1) as f64;
        let e = self.encoded.since(&before.encoded);
        let per_write =
            |bytes: u64, writes: u64| (writes > 0).then(|| bytes as f64 / writes as f64);
        PerNode {
            cpu_us: super::env::cpu_us_per(before.cpu, self.cpu, units),
            allocs: COUNTING.load(Ordering::Relaxed).then(|| {
                (
                    (self.allocs - before.allocs) as f64 / n,
                    (self.alloc_bytes - before.alloc_bytes) as f64 / n,
                )
            }),
            commits: e.commits as f64 / n,
            bytes_per_commit: per_write(e.commit_bytes, e.commits),
            events: e.events as f64 / n,
            bytes_per_event: per_write(e.event_bytes, e.events),
            encoded_bytes: (e.commit_bytes + e.event_bytes) as f64 / n,
        }
    }
}

/// The node's own costs per node execution.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PerNode {
    /// CPU of the node's threads, µs (`None`: not readable here).
    pub(crate) cpu_us: Option<f64>,
    /// Allocations and their bytes (`None`: not counted).
    allocs: Option<(f64, f64)>,
    commits: f64,
    bytes_per_commit: Option<f64>,
    events: f64,
    bytes_per_event: Option<f64>,
    encoded_bytes: f64,
}

impl PerNode {
    /// Its JSON object.
    pub(crate) fn json(&self) -> Value {
        json!({
            "cpu_us": self.cpu_us.map(round),
            "allocations": self.allocs.map(|(n, _)| round(n)),
            "allocated_bytes": self.allocs.map(|(_, b)| round(b)),
            "commits": round(self.commits * 100.0) / 100.0,
            "bytes_per_commit": self.bytes_per_commit.map(round),
            "events_published": round(self.events * 100.0) / 100.0,
            "bytes_per_event": self.bytes_per_event.map(round),
            "encoded_bytes": round(self.encoded_bytes),
        })
    }

    /// Its table rows, labelled for a node execution.
    pub(crate) fn rows(&self) -> Vec<(String, String)> {
        let opt = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.0} B"));
        vec![
            (
                "node process alone, per node execution: CPU".into(),
                self.cpu_us.map_or("–".into(), us),
            ),
            (
                "  allocations (bytes)".into(),
                self.allocs
                    .map_or("not counted".into(), |(n, b)| format!("{n:.0} ({b:.0} B)")),
            ),
            (
                "  commits × bytes each; events published × bytes".into(),
                format!(
                    "{:.2} × {}; {:.2} × {} ({:.0} B encoded in all)",
                    self.commits,
                    opt(self.bytes_per_commit),
                    self.events,
                    opt(self.bytes_per_event),
                    self.encoded_bytes
                ),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_reports_no_allocations_and_counting_resumes_after_it() {
        count_allocations();
        let before = Usage::now(EncodedCounts::default());
        {
            let _paused = pause_counting();
            let now = Usage::now(EncodedCounts::default());
            assert_eq!(now.per(&before, 1).allocs, None, "paused: not counted");
        }
        let after = Usage::now(EncodedCounts::default());
        assert!(after.per(&before, 1).allocs.is_some(), "counted again");
    }
}
