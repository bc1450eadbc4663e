//! Liveness and readiness over HTTP for an orchestrator (Kubernetes probes, a container's
//! `HEALTHCHECK`, a load balancer): `GET /livez` answers 200 while the process's event
//! loop runs (a stuck loop answers nothing, so the probe times out); `GET /readyz` answers
//! 200 only once the process has said it [started](Probes::started), while its NATS
//! connection is up, its own check passes and it is not [draining](Probes::draining);
//! 503 with the reason otherwise.
//!
//! One implementation for every process of the mesh: `workflow-node serve` and
//! `stub-agents` (`--health-addr`, `--shutdown-delay`), and any agent written with this
//! SDK.
//!
//! ```no_run
//! # async fn demo(client: async_nats::Client) -> std::io::Result<()> {
//! use agent_sdk::health::Probes;
//! let probes = Probes::new(client);
//! probes.serve("0.0.0.0:8081".parse().unwrap()).await?;
//! // ... subscribe, publish cards ...
//! probes.started();
//! agent_sdk::health::signalled().await?;
//! probes.hold_unready(std::time::Duration::from_secs(5)).await?; // then drain
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

/// A process's own readiness condition, beyond a live connection (`Err` says why not).
type Check = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What readiness is decided from; the process moves it along as it starts and stops.
pub struct Probes {
    client: async_nats::Client,
    started: OnceLock<Check>,
    draining: AtomicBool,
}

impl Probes {
    /// Not ready until [`Probes::started`].
    pub fn new(client: async_nats::Client) -> Arc<Probes> {
        Arc::new(Probes {
            client,
            started: OnceLock::new(),
            draining: AtomicBool::new(false),
        })
    }

    /// Everything is set up (subscriptions, streams, cards): ready from now on, while
    /// the connection is up and until draining.
    pub fn started(&self) {
        self.started_with(|| Ok(()));
    }

    /// As [`Probes::started`], with a condition of the process's own that readiness also
    /// needs (`Err` is the reason `/readyz` gives).
    pub fn started_with(&self, check: impl Fn() -> Result<(), String> + Send + Sync + 'static) {
        let _ = self.started.set(Box::new(check));
    }

    /// The process is stopping (a signal came): never ready again.
    pub fn draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.draining.load(Ordering::SeqCst) {
            return Err("draining".into());
        }
        let Some(check) = self.started.get() else {
            return Err("starting: subscriptions, streams and cards not all set up yet".into());
        };
        let state = self.client.connection_state();
        if state != async_nats::connection::State::Connected {
            return Err(format!("NATS connection {state}"));
        }
        check()
    }

    /// Serves the probes on `addr` (port 0 picks one) until the process ends; returns the
    /// address bound.
    pub async fn serve(self: &Arc<Probes>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        self.serve_router(addr, false).await
    }

    /// As [`Probes::serve`], and `GET /metrics` too: the process's own metrics
    /// ([`crate::metrics`]) in the Prometheus text format.
    pub async fn serve_with_metrics(
        self: &Arc<Probes>,
        addr: SocketAddr,
    ) -> std::io::Result<SocketAddr> {
        self.serve_router(addr, true).await
    }

    async fn serve_router(
        self: &Arc<Probes>,
        addr: SocketAddr,
        metrics: bool,
    ) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let mut app = Router::new()
            .route("/livez", get(|| async { "ok\n" }))
            .route("/readyz", get(ready));
        if metrics {
            app = app.route("/metrics", get(scrape));
        }
        let app = app.with_state(self.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("the health listener stopped: {e}");
            }
        });
        Ok(bound)
    }

    /// After a stop signal: unready at once, then still serving for `delay` (or until
    /// another SIGINT/SIGTERM), so that an orchestrator stops routing here before the
    /// drain starts.
    pub async fn hold_unready(&self, delay: Duration) -> std::io::Result<()> {
        self.draining();
        if delay.is_zero() {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(()),
            signal = signalled() => signal,
        }
    }
}

async fn scrape() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match crate::metrics::scrape() {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                crate::metrics::prometheus::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// Waits for SIGINT or SIGTERM (listening from the first poll: see [`Signals`]).
pub async fn signalled() -> std::io::Result<()> {
    Signals::listen()?.recv().await;
    Ok(())
}

/// SIGINT and SIGTERM, caught from the moment [`Signals::listen`] returns: a process that
/// says it is ready only after listening cannot be killed by a signal sent in between
/// (the default action would end it without draining).
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts catching both signals (needs a Tokio runtime).
    pub fn listen() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGINT or SIGTERM (one caught since [`Signals::listen`] counts).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
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
