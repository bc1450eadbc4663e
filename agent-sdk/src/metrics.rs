//! Metrics of a process built on this SDK, read in the Prometheus text format: OpenTelemetry
//! instruments on a meter provider of the process's own, with a manual reader collected
//! on each scrape of `/metrics` ([`crate::health::Probes::serve_with_metrics`], beside the
//! health probes). Nothing is kept between scrapes: the SDK's cumulative sums are the
//! state. The provider is made at first use and records whether or not anyone scrapes
//! (recording is a few atomic adds).
//!
//! [`prometheus`] renders what a reader collected; workflow-node's `/metrics` uses it too,
//! so both speak the same names (`mesh.llm.calls` with unit `{call}` is
//! `mesh_llm_calls_total`).

pub mod prometheus;

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Temporality,
};

/// A reader a provider owns and `/metrics` shares: the manual reader behind an `Arc`.
#[derive(Debug)]
pub struct SharedReader(pub Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

struct Process {
    provider: SdkMeterProvider,
    reader: Arc<ManualReader>,
}

fn process() -> &'static Process {
    static PROCESS: OnceLock<Process> = OnceLock::new();
    PROCESS.get_or_init(|| {
        let reader = Arc::new(ManualReader::builder().build());
        let provider = SdkMeterProvider::builder()
            .with_reader(SharedReader(reader.clone()))
            .build();
        Process { provider, reader }
    })
}

/// The process's meter for `scope` (the part of the SDK that records).
pub fn meter(scope: &'static str) -> Meter {
    process().provider.meter(scope)
}

/// Everything the process recorded so far, in the Prometheus text format.
pub fn scrape() -> Result<String, String> {
    let mut collected = ResourceMetrics::default();
    process()
        .reader
        .collect(&mut collected)
        .map_err(|e| e.to_string())?;
    Ok(prometheus::render(&collected))
}
