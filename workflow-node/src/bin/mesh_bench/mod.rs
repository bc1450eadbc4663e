//! The end-to-end benchmark over real NATS: scenarios, the floor, and their report.
//!
//! - `counters`: the server's own counters (`/varz`, `/jsz`) around a measurement.
//! - `env`: the server, connections, echo agents, bench workflows, percentiles.
//! - `floor`: raw request/reply and KV compare-and-swap on the same server.
//! - `scenarios`: `chain` and `throughput` with an in-process node.
//! - `map`: `map`, likewise, with a meter of the KV bytes written.
//! - `wiretap`: which messages a node costs, by kind of subject.
//! - `pull`: the event pull's batch and expiry, and the worker count, one setting at a time.
//! - `procs`: `replicas` and `resume` with `workflow-node serve` processes.
//! - `usage`: the in-process node's own CPU, allocations and encoded bytes.
//! - `profile`: `--profile`, a flame graph of the node's threads.

pub(crate) mod counters;
pub(crate) mod env;
pub(crate) mod floor;
pub(crate) mod map;
pub(crate) mod procs;
pub(crate) mod profile;
pub(crate) mod pull;
pub(crate) mod scenarios;
pub(crate) mod usage;
pub(crate) mod wiretap;

/// What one scenario measured: its JSON object and its table rows.
pub(crate) struct Report {
    /// The scenario's command-line name: the table's heading and the key of its object in
    /// the `--json` file.
    pub(crate) name: &'static str,
    /// The floor measured in the same run.
    pub(crate) floor: floor::Floor,
    /// Figures under the names the issue fixes.
    pub(crate) json: serde_json::Value,
    /// (label, value) rows for the table.
    pub(crate) rows: Vec<(String, String)>,
}
