//! How a process reaches a secured mesh: who it is (user and password, an NKey, or a
//! credentials file), TLS (a CA to trust, a client certificate for mutual TLS) and its
//! private inbox prefix. One [`ConnectConfig`] serves the agent SDK, `stub-agents` and
//! every `workflow-node` command (with feature `clap`, a `clap` argument group: flags and
//! `NATS_*` variables).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = agent_sdk::ConnectConfig {
//!     user: Some("alice".into()),
//!     password: Some(std::env::var("ALICE_PASSWORD")?),
//!     tls_ca: Some("deploy/secure/local/ca.pem".into()),
//!     tls_cert: Some("deploy/secure/local/alice-cert.pem".into()),
//!     tls_key: Some("deploy/secure/local/alice-key.pem".into()),
//!     inbox_prefix: Some("_INBOX.alice".into()),
//!     ..Default::default()
//! };
//! let mesh = agent_sdk::Mesh::connect_with("nats://127.0.0.1:4222", &config).await?;
//! # let _ = mesh; Ok(()) }
//! ```
//!
//! Under least-privilege permissions (`deploy/secure/nats.conf`) a caller may subscribe
//! only to its own inbox, `_INBOX.{user}.>`, so it must set that prefix: replies and
//! progress then come to subjects no other user can read. The server reports a subject a
//! user may not use as a "Permissions Violation" error on the connection, not to the
//! call that used it; such errors are logged here (warn), so a misconfigured client says
//! why its calls go unanswered.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event};

/// How long connecting to a server that answers may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything but the URL that a deployment sets to let a process in: identity, TLS,
/// inbox prefix. `Default` is an anonymous plain connection with the `_INBOX` prefix.
///
/// At most one identity: a user and password, an NKey seed (inline or from a file), or a
/// credentials file (JWT and seed, for servers in operator mode).
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ConnectConfig {
    /// User name on the NATS server (with --password).
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_USER", help_heading = "NATS connection")
    )]
    pub user: Option<String>,
    /// The user's password.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            env = "NATS_PASSWORD",
            hide_env_values = true,
            help_heading = "NATS connection"
        )
    )]
    pub password: Option<String>,
    /// NKey user seed (`SU…`); prefer --nkey-file, which keeps it off the command line.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            env = "NATS_NKEY",
            hide_env_values = true,
            help_heading = "NATS connection"
        )
    )]
    pub nkey: Option<String>,
    /// File holding an NKey user seed (`SU…`, as `nk -gen user` writes it).
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_NKEY_FILE", help_heading = "NATS connection")
    )]
    pub nkey_file: Option<PathBuf>,
    /// Credentials file (.creds: a user JWT and its seed).
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_CREDS", help_heading = "NATS connection")
    )]
    pub creds: Option<PathBuf>,
    /// CA certificate (PEM) to trust for the server's certificate; given, the connection
    /// requires TLS.
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_CA", help_heading = "NATS connection")
    )]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers that verify clients (mutual TLS); with
    /// --tls-key.
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_CERT", help_heading = "NATS connection")
    )]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_KEY", help_heading = "NATS connection")
    )]
    pub tls_key: Option<PathBuf>,
    /// Require TLS even without --tls-ca (a server certificate from a public CA).
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_TLS", help_heading = "NATS connection")
    )]
    pub tls: bool,
    /// Prefix of this connection's reply inboxes (default `_INBOX`): `_INBOX.{user}` where
    /// the server lets each user read only its own inbox.
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "NATS_INBOX_PREFIX", help_heading = "NATS connection")
    )]
    pub inbox_prefix: Option<String>,
}

/// Why a [`ConnectConfig`] could not connect.
#[derive(Debug, thiserror::Error)]
pub enum ConnectConfigError {
    /// Two ways of saying who connects were given.
    #[error("{first} and {second} both say who connects: give only one")]
    TwoIdentities {
        /// The first identity option found.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
    /// One half of a pair was given without the other.
    #[error("{given} needs {missing}")]
    Unpaired {
        /// The option given.
        given: &'static str,
        /// The option it needs.
        missing: &'static str,
    },
    /// A file named by an option could not be read.
    #[error("reading {what} {}: {source}", path.display())]
    Read {
        /// What the file is (its option).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The NKey seed file holds no user seed.
    #[error("{} holds no NKey user seed (a line starting with SU)", path.display())]
    NoSeed {
        /// The file.
        path: PathBuf,
    },
    /// The inbox prefix is not a subject without wildcards.
    #[error("inbox prefix {prefix:?}: {why}")]
    InboxPrefix {
        /// The prefix as given.
        prefix: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// No server at the URL let this client in (unreachable, TLS or authentication
    /// refused), within [`CONNECT_TIMEOUT`].
    #[error("cannot reach the NATS server at {url}: {why}")]
    Connect {
        /// The URL (maybe several comma-separated servers).
        url: String,
        /// The client's reason.
        why: String,
    },
}

impl ConnectConfig {
    /// async-nats' options for this config: files are read now, and a bad combination is
    /// an error naming the options.
    pub async fn options(&self) -> Result<ConnectOptions, ConnectConfigError> {
        self.check()?;
        let mut options = ConnectOptions::new()
            .connection_timeout(CONNECT_TIMEOUT)
            .event_callback(|event| async move { log_event(event) });
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            options = options.user_and_password(user.clone(), password.clone());
        }
        if let Some(seed) = &self.nkey {
            options = options.nkey(seed.trim().to_owned());
        }
        if let Some(path) = &self.nkey_file {
            options = options.nkey(read_seed(path)?);
        }
        if let Some(path) = &self.creds {
            options = options.credentials_file(path).await.map_err(|source| {
                ConnectConfigError::Read {
                    what: "the credentials file (--creds)",
                    path: path.clone(),
                    source,
                }
            })?;
        }
        if let Some(ca) = &self.tls_ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        if self.tls {
            options = options.require_tls(true);
        }
        if let Some(prefix) = &self.inbox_prefix {
            options = options.custom_inbox_prefix(prefix);
        }
        Ok(options)
    }

    /// Connects to `url` (one server, or several comma-separated: the servers of a
    /// cluster, the client starting with any that answers and failing over to the
    /// others), within [`CONNECT_TIMEOUT`]; a server that does not let this client in is
    /// an error naming the URL, at once.
    pub async fn connect(&self, url: &str) -> Result<Client, ConnectConfigError> {
        connect_to(url, self.options().await?).await
    }

    /// Checks the combination: one identity at most, pairs complete, a usable prefix.
    fn check(&self) -> Result<(), ConnectConfigError> {
        let identities = [
            (self.user.is_some(), "--user (NATS_USER)"),
            (self.nkey.is_some(), "--nkey (NATS_NKEY)"),
            (self.nkey_file.is_some(), "--nkey-file (NATS_NKEY_FILE)"),
            (self.creds.is_some(), "--creds (NATS_CREDS)"),
        ];
        let mut given = identities.iter().filter(|(set, _)| *set).map(|(_, n)| *n);
        if let (Some(first), Some(second)) = (given.next(), given.next()) {
            return Err(ConnectConfigError::TwoIdentities { first, second });
        }
        let pairs = [
            (
                self.user.is_some(),
                self.password.is_some(),
                "--user (NATS_USER)",
                "--password (NATS_PASSWORD)",
            ),
            (
                self.tls_cert.is_some(),
                self.tls_key.is_some(),
                "--tls-cert (NATS_CERT)",
                "--tls-key (NATS_KEY)",
            ),
        ];
        for (a, b, name_a, name_b) in pairs {
            if a != b {
                let (given, missing) = if a {
                    (name_a, name_b)
                } else {
                    (name_b, name_a)
                };
                return Err(ConnectConfigError::Unpaired { given, missing });
            }
        }
        if let Some(prefix) = &self.inbox_prefix {
            check_prefix(prefix)?;
        }
        Ok(())
    }
}

/// Connects to `url` with `options` (those of [`ConnectConfig::options`], changed as the
/// caller likes: another event callback, say) as [`ConnectConfig::connect`] does.
pub async fn connect_to(url: &str, options: ConnectOptions) -> Result<Client, ConnectConfigError> {
    let servers: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let refused = |why: String| ConnectConfigError::Connect {
        url: url.to_owned(),
        why,
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect(servers)).await {
        Err(_) => Err(refused(format!(
            "no answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        ))),
        // async-nats' errors print their source too: the chain would say it twice.
        Ok(Err(e)) => Err(refused(e.to_string())),
        Ok(Ok(client)) => Ok(client),
    }
}

/// An inbox prefix is a subject of one or more tokens, without wildcards or spaces.
fn check_prefix(prefix: &str) -> Result<(), ConnectConfigError> {
    let why = if prefix.split('.').any(str::is_empty) {
        Some("empty token (a leading, trailing or double dot)")
    } else if prefix.contains(['*', '>']) {
        Some("wildcards (* or >) are not allowed")
    } else if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("spaces are not allowed")
    } else {
        None
    };
    match why {
        Some(why) => Err(ConnectConfigError::InboxPrefix {
            prefix: prefix.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// The user seed in an NKey seed file: its first line starting with `SU`.
fn read_seed(path: &Path) -> Result<String, ConnectConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConnectConfigError::Read {
        what: "the NKey seed file (--nkey-file)",
        path: path.to_owned(),
        source,
    })?;
    text.lines()
        .map(str::trim)
        .find(|line| line.starts_with("SU"))
        .map(str::to_owned)
        .ok_or_else(|| ConnectConfigError::NoSeed {
            path: path.to_owned(),
        })
}

/// Server errors (a permission the user lacks) and lost connections, logged: the server
/// reports them on the connection, not to whichever call caused them.
fn log_event(event: Event) {
    match event {
        Event::ServerError(e) => tracing::warn!("NATS server: {e}"),
        Event::ClientError(e) => tracing::warn!("NATS client: {e}"),
        Event::Disconnected => tracing::warn!("NATS: disconnected, reconnecting"),
        Event::SlowConsumer(sid) => tracing::warn!("NATS: subscription {sid} is too slow"),
        other => tracing::debug!("NATS: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(f)
    }

    #[test]
    fn one_identity_and_whole_pairs() {
        let two = ConnectConfig {
            user: Some("alice".into()),
            password: Some("pw".into()),
            nkey: Some("SUxyz".into()),
            ..Default::default()
        };
        let e = run(two.options()).unwrap_err();
        assert!(matches!(e, ConnectConfigError::TwoIdentities { .. }), "{e}");
        assert!(e.to_string().contains("--user") && e.to_string().contains("--nkey"));

        let half = ConnectConfig {
            tls_key: Some("key.pem".into()),
            ..Default::default()
        };
        let e = run(half.options()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--tls-key (NATS_KEY) needs --tls-cert (NATS_CERT)"
        );

        let user_only = ConnectConfig {
            user: Some("alice".into()),
            ..Default::default()
        };
        assert!(run(user_only.options()).is_err());
        assert!(run(ConnectConfig::default().options()).is_ok());
    }

    #[test]
    fn inbox_prefixes_are_checked() {
        for bad in ["_INBOX.", "_INBOX.*", "a..b", "_INBOX.al ice", ""] {
            assert!(check_prefix(bad).is_err(), "{bad:?} passed");
        }
        check_prefix("_INBOX.alice").unwrap();
        check_prefix("_INBOX_alice").unwrap();
    }

    #[test]
    fn a_seed_file_gives_its_user_seed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.nk");
        std::fs::write(&path, "# node\n  SUABC\n").unwrap();
        assert_eq!(read_seed(&path).unwrap(), "SUABC");
        std::fs::write(&path, "UABC\n").unwrap();
        let e = read_seed(&path).unwrap_err();
        assert!(e.to_string().contains("no NKey user seed"), "{e}");
        let e = read_seed(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("--nkey-file"), "{e}");
    }
}
