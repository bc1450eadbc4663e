//! The NATS shell around the core: a process on the mesh that hosts workflows. Its rooms,
//! in the order they may depend on one another (a room uses only those above it):
//!
//! - `run`: sans I/O. What a run's entry holds and what one event does to it (record,
//!   envelope, plan, outbox, apart, wake, history entries, observed, spans, reply, wire,
//!   names): no `async`, no tokio or NATS, no clock.
//! - `telemetry`: metrics (OTLP and `/metrics`), traces, health.
//! - `mesh`: agent cards, the deployment's seal, the object store, setting up buckets.
//! - `store`: runs in KV, the event and history streams, definition versions, reading runs
//!   for operators, the record cache.
//! - `worker`: the driver: pull, decode, load, plan, commit with compare-and-swap, carry
//!   out, ack; group commit, final reply claim, wakes.
//! - `callers`: requests, cancels, steering, schedules changed, agents' status updates,
//!   identity checks.
//! - `triggers`: runs that start themselves: each replica's schedule loop.
//!
//! Beside them: `clock` (the servers' clock as a replica estimates it), `config` (the node's settings), `context` (the handles every I/O room
//! shares), `node` (starting a node and wiring the rooms), `error`.
//!
//! Nothing about a run lives only in one process: its state is in KV, its events in a
//! stream, its wakes in KV. Any replica carries on any run.

pub mod callers;
mod clock;
mod config;
mod context;
mod error;
pub mod mesh;
mod node;
pub mod run;
pub mod store;
pub mod telemetry;
mod triggers;
pub mod worker;

#[cfg(test)]
mod layers;

pub use config::{Config, Pull};
pub use context::now;
pub use error::{Error, Result};
pub use mesh::registry::{full_card, CARD_EXPIRY_INTERVALS};
pub use node::WorkflowNode;
pub use run::envelope::{Caller, Envelope};
pub use run::record::RunRecord;
pub use store::inspect::{Apart, FoundRun, Inspector};
pub use telemetry::encoded::EncodedCounts;
pub use telemetry::health::Health;
pub use telemetry::metrics::{MetricsConfig, Otlp};
