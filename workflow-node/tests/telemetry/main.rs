//! Metrics: a scrape of `/metrics` from an in-process node, and from `serve` processes
//! pushing over OTLP/HTTP and flushing on a SIGTERM drain.

#[path = "../support/mod.rs"]
mod support;

mod cli_metrics;
mod metrics;
