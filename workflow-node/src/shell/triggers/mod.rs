//! Runs that start themselves. Every replica runs the same loops; what they decide is
//! committed by compare-and-swap before it is carried out (see `run::schedule`), and what
//! they carry out is idempotent, so any number of replicas, restarted at any time, start
//! each slot's run once.
//!
//! - `clock`: the time fire times are read against (one seam, see there).
//! - `schedules`: looking at every schedule of the workflows served, once per tick.
//! - `events`: taking each event trigger's messages through its durable consumer.
//! - `hooks`: answering each webhook trigger's deliveries, forwarded by the HTTP doors.

pub(in crate::shell) mod clock;
pub(in crate::shell) mod events;
pub(in crate::shell) mod hooks;
pub(in crate::shell) mod schedules;
