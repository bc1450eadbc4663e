//! Liveness and readiness over HTTP for an orchestrator (`serve --health-addr ADDR`):
//! `GET /livez` answers 200 while the process's event loop runs (a stuck loop answers
//! nothing); `GET /readyz` answers 200 only once the node has started (its streams,
//! consumers and buckets exist and its cards are out), while it reaches NATS, pulls every
//! workflow's events and is not draining; 503 with the reason otherwise.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::shell::Health;

/// What readiness is decided from; shared with `serve`, which moves it along.
pub struct Probes {
    client: async_nats::Client,
    health: OnceLock<Arc<Health>>,
    draining: AtomicBool,
}

impl Probes {
    /// Not ready until [`Probes::started`].
    pub fn new(client: async_nats::Client) -> Arc<Probes> {
        Arc::new(Probes {
            client,
            health: OnceLock::new(),
            draining: AtomicBool::new(false),
        })
    }

    /// The node has started: ready from now on, while its health holds.
    pub fn started(&self, health: Arc<Health>) {
        let _ = self.health.set(health);
    }

    /// The node is draining (a signal came): never ready again.
    pub fn draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.draining.load(Ordering::SeqCst) {
            return Err("draining".into());
        }
        let Some(health) = self.health.get() else {
            return Err("starting: streams, buckets and cards not all set up yet".into());
        };
        let state = self.client.connection_state();
        if state != async_nats::connection::State::Connected {
            return Err(format!("NATS connection {state}"));
        }
        let broken: Vec<String> = health.broken().into_iter().map(|(w, _)| w).collect();
        if !broken.is_empty() {
            return Err(format!("events not pulled: {}", broken.join(", ")));
        }
        Ok(())
    }

    /// Serves the probes on `addr` (port 0 picks one) until the process ends; the address.
    pub async fn serve(self: &Arc<Probes>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let app = Router::new()
            .route("/livez", get(|| async { "ok\n" }))
            .route("/readyz", get(ready))
            .with_state(self.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("the health listener stopped: {e}");
            }
        });
        Ok(bound)
    }
}

async fn ready(State(probes): State<Arc<Probes>>) -> (StatusCode, String) {
    match probes.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}
