//! A nats-server started with the shipped least-privilege configuration
//! (`deploy/secure/nats.conf`, included unchanged), with a CA, certificates, NKeys and
//! passwords made by the shipped `deploy/secure/gen-local.sh`; clients per user whose
//! permission violations (reported by the server on the connection) are collected.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent_sdk::ConnectConfig;
use async_nats::{Client, Event};
use clap::Parser;
use tokio::sync::mpsc;

/// How long a denial may take to come back from the server.
pub(crate) const DENIAL: Duration = Duration::from_secs(10);

/// The repository root.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A server on the shipped config, and the files that let each user in.
pub(crate) struct Secure {
    pub(crate) server: test_harness::NatsServer,
    pub(crate) pki: PathBuf,
    _dir: tempfile::TempDir,
}

impl Secure {
    /// Generates the keys and certificates with the shipped script, then starts the server
    /// with the shipped config; only the listen port, log and store directory are the
    /// harness's, and the certificate paths, public keys and passwords come from the
    /// script's `server.env` through the environment.
    pub(crate) fn start() -> Secure {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = dir.path().join("pki");
        let out = Command::new("bash")
            .arg(repo().join("deploy/secure/gen-local.sh"))
            .arg(&pki)
            .output()
            .expect("running deploy/secure/gen-local.sh");
        assert!(
            out.status.success(),
            "gen-local.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let server = test_harness::nats_with(test_harness::Options {
            include: Some(repo().join("deploy/secure/nats.conf")),
            env: read_env(&pki.join("server.env")),
            ..Default::default()
        });
        Secure {
            server,
            pki,
            _dir: dir,
        }
    }

    /// The client variables of `user` (`deploy/secure/local/USER.env` as the script writes
    /// it), with this server's URL.
    pub(crate) fn env(&self, user: &str) -> Vec<(String, String)> {
        read_env(&self.pki.join(format!("{user}.env")))
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                "NATS_URL" => (k, self.server.url()),
                _ => (k, v),
            })
            .collect()
    }

    /// `user`'s connection options, parsed from the command-line flags that its env file's
    /// variables stand for.
    pub(crate) fn config(&self, user: &str) -> ConnectConfig {
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            connect: ConnectConfig,
        }
        let mut args = vec!["test".to_owned()];
        for (key, value) in self.env(user) {
            let flag = match key.as_str() {
                "NATS_USER" => "--user",
                "NATS_PASSWORD" => "--password",
                "NATS_NKEY_FILE" => "--nkey-file",
                "NATS_CA" => "--tls-ca",
                "NATS_CERT" => "--tls-cert",
                "NATS_KEY" => "--tls-key",
                "NATS_INBOX_PREFIX" => "--inbox-prefix",
                _ => continue,
            };
            args.extend([flag.to_owned(), value]);
        }
        Flags::try_parse_from(args)
            .expect("the env file's settings are valid flags")
            .connect
    }

    /// A connection as `user`, its server errors collected.
    pub(crate) async fn connect(&self, user: &str) -> Watched {
        Watched::connect(&self.server.url(), self.config(user)).await
    }

    /// The server log's lines about permission violations.
    pub(crate) fn violations_logged(&self) -> Vec<String> {
        std::fs::read_to_string(self.server.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Violation"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Secure {
    /// A failed test shows what the server refused, and to whom.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "server-side violations:\n{}",
                self.violations_logged().join("\n")
            );
        }
    }
}

/// `KEY=VALUE` lines (comments and blanks skipped).
fn read_env(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// A client whose server errors ("Permissions Violation for Publish to …") are kept.
pub(crate) struct Watched {
    pub(crate) client: Client,
    errors: mpsc::UnboundedReceiver<String>,
}

impl Watched {
    /// Connects with `config`, its event callback replaced by a collector of server errors.
    pub(crate) async fn connect(url: &str, config: ConnectConfig) -> Watched {
        let (tx, errors) = mpsc::unbounded_channel();
        let options = config
            .options()
            .await
            .expect("connect options")
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    if let Event::ServerError(e) = event {
                        let _ = tx.send(e.to_string());
                    }
                }
            });
        let client = options.connect(url).await.expect("connecting");
        Watched { client, errors }
    }

    /// Waits for the server to refuse `what` (`Publish` or `Subscription`) on `subject`
    /// and returns its error; panics after [`DENIAL`] without one.
    pub(crate) async fn denied(&mut self, what: &str, subject: &str) -> String {
        self.denied_like(what, &format!("{subject}\"")).await
    }

    /// [`Watched::denied`] for a subject that starts with `prefix`.
    pub(crate) async fn denied_like(&mut self, what: &str, prefix: &str) -> String {
        let wanted = format!("Permissions Violation for {what} to \"{prefix}");
        let found = tokio::time::timeout(DENIAL, async {
            while let Some(error) = self.errors.recv().await {
                if error.contains(&wanted) {
                    return Some(error);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(error)) => error,
            _ => panic!("no \"{wanted}\" within {DENIAL:?}"),
        }
    }

    /// The server errors so far (none on a connection that stayed within its rights).
    pub(crate) async fn errors(&mut self) -> Vec<String> {
        // A round trip first: an error the server sent before it is in by then.
        agent_sdk::Mesh::new(self.client.clone())
            .roundtrip()
            .await
            .expect("a round trip through the own inbox");
        let mut seen = Vec::new();
        while let Ok(error) = self.errors.try_recv() {
            seen.push(error);
        }
        seen
    }
}
