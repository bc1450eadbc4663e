//! Where the commands find NATS: the `--nats-url` (or `NATS_URL`) server with the usual
//! connect options, or, with neither, an embedded nats-server child with JetStream and a
//! data directory of its own, stopped on exit.

use std::path::PathBuf;

use anyhow::{Context, Result};
use nats_process::{NatsServer, Options};

/// Connection options shared by the commands that talk to NATS.
#[derive(Debug, Clone, clap::Args)]
pub struct NatsArgs {
    /// NATS server URL, or several comma-separated (the servers of a cluster); without it
    /// (and without NATS_URL) a local server is started.
    #[arg(long, env = "NATS_URL")]
    pub nats_url: Option<String>,
    /// First token of every subject and of the JetStream resource names: agents and nodes
    /// see each other only within one namespace.
    #[arg(long, default_value = "mesh", env = "MESH_NAMESPACE")]
    pub namespace: String,
    /// Credentials file (.creds) for the server.
    #[arg(long, env = "NATS_CREDS")]
    pub creds: Option<PathBuf>,
    /// NKey seed for the server.
    #[arg(long, env = "NATS_NKEY")]
    pub nkey: Option<String>,
    /// CA certificate to trust; given, the connection requires TLS.
    #[arg(long, env = "NATS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key (mutual TLS).
    #[arg(long, num_args = 2, value_names = ["CERT", "KEY"])]
    pub tls_client: Option<Vec<PathBuf>>,
}

/// A connection, and the embedded server behind it, if one was started.
pub struct Connection {
    /// Connected (within 10 s) to one of `url`'s servers; fails over to the others.
    pub client: async_nats::Client,
    /// `--nats-url` as given (maybe several comma-separated servers), or the embedded
    /// server's; for display only.
    pub url: String,
    /// The embedded server (stopped by [`Connection::close`]).
    pub embedded: Option<NatsServer>,
}

impl Connection {
    /// Flushes and stops the embedded server, if any.
    pub async fn close(self) {
        let _ = self.client.flush().await;
        drop(self.client);
        if let Some(mut server) = self.embedded {
            let _ = tokio::task::spawn_blocking(move || server.stop()).await;
        }
    }
}

/// Connects as `args` say, starting an embedded server when no URL is given.
pub async fn connect(args: &NatsArgs) -> Result<Connection> {
    let (url, embedded) = match &args.nats_url {
        Some(url) => (url.clone(), None),
        None => {
            let server = tokio::task::spawn_blocking(|| NatsServer::start(Options::default()))
                .await?
                .context("starting the embedded nats-server")?;
            eprintln!(
                "no --nats-url or NATS_URL: started a local nats-server at {} (data in {})",
                server.url(),
                server.store_dir().display()
            );
            (server.url(), Some(server))
        }
    };
    let mut options = async_nats::ConnectOptions::new().retry_on_initial_connect();
    if let Some(creds) = &args.creds {
        options = options
            .credentials_file(creds)
            .await
            .context("reading the credentials file")?;
    }
    if let Some(seed) = &args.nkey {
        options = options.nkey(seed.clone());
    }
    if let Some(ca) = &args.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some(pair) = &args.tls_client {
        options = options.add_client_certificate(pair[0].clone(), pair[1].clone());
    }
    // A comma-separated list names several servers of a cluster: the client starts with
    // any that answers and fails over to the others.
    let servers: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let client = tokio::time::timeout(std::time::Duration::from_secs(10), options.connect(servers))
        .await
        .with_context(|| format!("connecting to {url} timed out"))?
        .with_context(|| format!("connecting to {url}"))?;
    Ok(Connection {
        client,
        url,
        embedded,
    })
}
