//! What a node tells its operators about itself: metrics (recorded from what a committed
//! event did, served at `/metrics` and exported over OTLP), traces (the run's spans,
//! emitted once a commit holds), and health.
//!
//! - `metrics`: OpenTelemetry metrics; `metrics::prometheus` renders them, and
//!   `metrics::scrape` serves them.
//! - `traces`: the run's spans, emitted with ids every replica derives alike.
//! - `health`: whether every workflow's events are being pulled.
//! - `encoded`: the bytes each commit and event publish encodes, for the benchmark.

pub(in crate::shell) mod encoded;
pub(in crate::shell) mod health;
pub(in crate::shell) mod metrics;
pub(in crate::shell) mod traces;
