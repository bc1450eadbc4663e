//! The one error type of this crate.

use std::path::PathBuf;

/// Why a nats-server could not be found, installed, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable binary was found and none could be installed.
    #[error("nats-server not found (searched: {searched}); run `bash deploy/install-nats.sh` or set NATS_SERVER_BIN")]
    NotFound {
        /// Where we looked, for the message.
        searched: String,
    },
    /// A binary was found but it is older than [`crate::MIN_VERSION`] or its version is unreadable.
    #[error("nats-server at {path} is unusable: {reason}")]
    Unusable {
        /// The nats-server binary that was run with `--version` and refused.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `deploy/install-nats.sh` failed.
    #[error("installing nats-server with {script} failed: {reason}")]
    Install {
        /// The install script.
        script: PathBuf,
        /// Exit status or spawn error.
        reason: String,
    },
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The server exited or did not become ready in time.
    #[error("nats-server did not start: {reason}\n--- last lines of {log} ---\n{log_tail}")]
    Startup {
        /// What went wrong (exit status, timeout, ...).
        reason: String,
        /// The server's log file.
        log: PathBuf,
        /// The end of that log.
        log_tail: String,
    },
    /// An earlier search in this process failed (the search runs once); its message.
    #[error("{0}")]
    Unavailable(String),
    /// A cluster did not form (routes or JetStream meta leader) before the deadline.
    #[error("nats cluster not ready: {0}")]
    Cluster(String),
}

impl Error {
    /// Wraps an I/O error with what we were doing.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
