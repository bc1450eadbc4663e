//! Runs real `nats-server` processes: for integration tests and for the workflow node's
//! embedded mode (a local server when no `--nats-url` is given).
//!
//! - [`binary`]: find a nats-server ≥ 2.11 (`$NATS_SERVER_BIN`, `<repo>/.nats/bin`, `PATH`),
//!   installing it with `deploy/install-nats.sh` when none is found.
//! - [`server`]: [`NatsServer`], one child process with JetStream on an ephemeral loopback
//!   port, its own store directory, readiness read from its log, clean-up on drop.
//! - [`cluster`]: [`Cluster`], three servers with routes and a JetStream meta leader.
//! - [`config`]: the config file we generate for each server.
//!
//! ```no_run
//! let server = nats_process::NatsServer::start(Default::default())?;
//! println!("connect to {}", server.url());
//! # Ok::<(), nats_process::Error>(())
//! ```

pub mod binary;
pub mod cluster;
pub mod config;
mod error;
pub mod server;

pub use binary::{find_binary, Version, MIN_VERSION};
pub use cluster::{Cluster, Dial};
pub use config::ClusterConfig;
pub use error::Error;
pub use server::{NatsServer, Options, DEFAULT_MAX_FILE_STORE};
