//! `GET /metrics`: each scrape collects the node's manual reader and answers in the
//! Prometheus text format. Nothing is kept between scrapes: the SDK's cumulative sums are
//! the state, so two scrapers see the same counts.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader as _;
use opentelemetry_sdk::metrics::ManualReader;
use tokio::net::TcpListener;

use crate::shell::error::{Error, Result};
use agent_sdk::metrics::prometheus;

/// Binds the metrics address (port 0 picks a free one; the listener tells which).
pub(in crate::shell) async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| Error::Setup {
        resource: format!("the metrics endpoint at {addr}"),
        source: e.into(),
    })
}

/// Serves `/metrics` on `listener` until the task is aborted.
pub(in crate::shell) async fn serve(listener: TcpListener, reader: Arc<ManualReader>) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(reader);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!("the metrics endpoint stopped: {e}");
    }
}

async fn metrics(State(reader): State<Arc<ManualReader>>) -> Response {
    let mut collected = ResourceMetrics::default();
    match reader.collect(&mut collected) {
        Ok(()) => (
            [(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)],
            prometheus::render(&collected),
        )
            .into_response(),
        // Only after shutdown: the node is stopping.
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}
