//! What a node tells its operators about itself: metrics (recorded from what a committed
//! event did, served at `/metrics` and exported over OTLP), traces (the run's spans,
//! emitted once a commit holds), and health.
//!
//! - `metrics`: OpenTelemetry metrics; `metrics::prometheus` renders them, and
//!   `metrics::scrape` serves them.
//! - `traces`: the run's spans, emitted with ids every replica derives alike.
//! - `health`: whether every workflow's events are being pulled.

pub(in crate::shell) mod health;
pub(in crate::shell) mod metrics;
pub(in crate::shell) mod traces;
