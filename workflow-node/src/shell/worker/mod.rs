//! The driver: the event stream of each workflow and its shared durable consumer. Pull,
//! decode, load, plan (in `run`), commit with compare-and-swap, carry out, ack.
//!
//! - `driver`: pulls a workflow's events and hands each run's to the task that owns it.
//! - `process`: one event: load its run, plan, commit, carry out.
//! - `group`: the group commit: several events of one run in one commit.
//! - `decode`: reads what the stream delivers (events, agents' replies, artifacts).
//! - `effects`: carries out the core's commands (dispatch, wakes, progress, final reply).
//! - `tail`: finishes an event once its commit holds (history, spans, ending).
//! - `final_claim`: one replica sends a run's final reply.
//! - `signs`: the signs of life this replica heard from calls in flight.
//! - `slots`: the agents' gates in KV: a limited agent's calls admitted, waiting, released.
//! - `lease`: keeps events in hand from being redelivered while they are worked on.
//! - `wakes`: the wakes bucket, watched by every replica, firing what comes due.
//! - `flow`: a queued run's slot under its workflow's flow control, taken and given back.

pub(in crate::shell) mod decode;
pub(in crate::shell) mod driver;
pub(in crate::shell) mod effects;
pub(in crate::shell) mod final_claim;
pub(in crate::shell) mod flow;
pub(in crate::shell) mod group;
pub(in crate::shell) mod lease;
pub(in crate::shell) mod process;
pub(in crate::shell) mod signs;
pub(in crate::shell) mod slots;
pub(in crate::shell) mod tail;
pub mod wakes;
