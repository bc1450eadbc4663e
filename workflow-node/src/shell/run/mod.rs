//! The run, sans I/O: what a run's entry holds and what one event does to it, decided
//! without a clock, a connection or a task (as `quinn-proto` is to `quinn`). The rooms
//! around it load, commit and carry out; this one only computes. A test in `shell` keeps
//! it so: no `async`, no tokio or NATS, no file, socket or clock read here.
//!
//! - `record`: what a run's KV entry holds (the core's state, its caller, its outbox).
//! - `entry`: how the record is stored (its JSON, LZ4-compressed by default).
//! - `envelope`: an event as it travels in a workflow's stream.
//! - `plan`: the per-event decision (load, apply, what to commit and carry out), and
//!   `plan::group`, the group commit of several events of one run.
//! - `outbox`: the commands a commit holds until they are carried out.
//! - `apart`: the items and results of large maps, and large outputs, kept beside the
//!   run's entry.
//! - `check`: the liveness check of a run's calls in flight (a silent call is sent again).
//! - `gate`: an agent's gate: its calls in flight and waiting, and its rate window.
//! - `wake`: a run's pending timers and the one wake entry armed for them.
//! - `history`: the entries of a run's history, and when they are held or sent.
//! - `observed`: what a committed event did (runs, nodes, attempts ended), for metrics.
//! - `spans`: the run's trace spans, derived from the core's states.
//! - `reply`: the final reply and progress updates sent to a run's callers.
//! - `wire`: the A2A/JSON-RPC messages read and written.
//! - `schedule`: a schedule's entry and what one look at it decides.
//! - `names`: keys, buckets, streams and ids, every replica deriving them alike.
//! - `identity`: whether a cancel kept for a run not started yet ends it.
//! - `flow`: the slots of a workflow's flow control (`max_concurrent_runs`,
//!   `concurrency_key`): who holds one, who waits, in which order.
//! - `backoff`: how long a failed event waits before it is tried again, and when to give up.

pub mod apart;
pub(in crate::shell) mod backoff;
pub mod check;
pub mod entry;
pub(in crate::shell) mod envelope;
pub(in crate::shell) mod flow;
pub mod gate;
pub mod history;
pub(in crate::shell) mod identity;
pub mod names;
pub(in crate::shell) mod observed;
pub(in crate::shell) mod outbox;
pub(in crate::shell) mod plan;
pub mod record;
pub(in crate::shell) mod reply;
pub mod schedule;
pub mod spans;
pub mod wake;
pub mod wire;
