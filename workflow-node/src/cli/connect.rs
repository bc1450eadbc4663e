//! Where the commands find NATS: the `--nats-url` (or `NATS_URL`) server with the
//! connection options of `agent_sdk::ConnectConfig` (user and password, NKey, credentials
//! file, TLS with a CA and a client certificate, a private inbox prefix; flags or
//! `NATS_*` variables), or, with no URL, an embedded nats-server child with JetStream and
//! a data directory of its own, stopped on exit.
//!
//! A server that cannot be reached at start is an error at once (naming the URL), unless
//! the caller asked to wait for it ([`connect_when_up`], `serve --wait-for-server`). Once
//! connected the client reconnects on its own; callers bound every wait (a lost server makes
//! `flush` wait for a reconnect that may never come), and so does [`Connection::close`].

use std::time::{Duration, Instant};

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
    /// User, NKey or credentials, TLS (CA, client certificate) and inbox prefix: flags or
    /// `NATS_*` variables, shared with agent-sdk and stub-agents.
    #[command(flatten)]
    pub connect: agent_sdk::ConnectConfig,
    /// Which keys may sign which agents' cards (`--agent-key NAME=U…`,
    /// `--require-signed-cards`): the node's registry, the web view and the CLI take only
    /// cards their bound key signed.
    #[command(flatten)]
    pub cards: agent_sdk::CardTrust,
}

/// A connection, and the embedded server behind it, if one was started.
pub struct Connection {
    /// Connected (within [`CONNECT_TIMEOUT`]) to one of `url`'s servers; fails over to the
    /// others.
    pub client: async_nats::Client,
    /// `--nats-url` as given (maybe several comma-separated servers), or the embedded
    /// server's; for display only.
    pub url: String,
    /// The embedded server (stopped by [`Connection::close`]).
    pub embedded: Option<NatsServer>,
}

impl Connection {
    /// Flushes (for at most [`CLOSE_TIMEOUT`]: a lost server never answers) and stops the
    /// embedded server, if any.
    pub async fn close(self) {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.client.flush()).await;
        drop(self.client);
        if let Some(mut server) = self.embedded {
            let _ = tokio::task::spawn_blocking(move || server.stop()).await;
        }
    }
}

/// How long connecting to a server that answers may take.
pub const CONNECT_TIMEOUT: Duration = agent_sdk::connect::CONNECT_TIMEOUT;

/// How long [`Connection::close`] waits for the server to take what is still buffered.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often [`connect_when_up`] says it is still waiting.
const WAITING_NOTICE: Duration = Duration::from_secs(3);

/// Connects as `args` say, starting an embedded server when no URL is given; a server that
/// cannot be reached is an error naming the URL, at once.
pub async fn connect(args: &NatsArgs) -> Result<Connection> {
    let (url, embedded) = server_url(args).await?;
    let client = try_connect(args, &url).await?;
    Ok(Connection {
        client,
        url,
        embedded,
    })
}

/// [`connect`], but while no server answers at the URL, tries again every second and says
/// so on stderr every few seconds.
pub async fn connect_when_up(args: &NatsArgs) -> Result<Connection> {
    let (url, embedded) = server_url(args).await?;
    let mut said = None::<Instant>;
    let client = loop {
        match try_connect(args, &url).await {
            Ok(client) => break client,
            Err(e) => {
                if said.is_none_or(|at| at.elapsed() >= WAITING_NOTICE) {
                    eprintln!("{e:#}; waiting for it (--wait-for-server)");
                    said = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    Ok(Connection {
        client,
        url,
        embedded,
    })
}

/// The URL to connect to, and the embedded server started when none is given.
async fn server_url(args: &NatsArgs) -> Result<(String, Option<NatsServer>)> {
    Ok(match &args.nats_url {
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
    })
}

/// One attempt at each of `url`'s servers.
async fn try_connect(args: &NatsArgs, url: &str) -> Result<async_nats::Client> {
    let options = args
        .connect
        .options()
        .await?
        .event_callback(|event| async move { say_refused(event) });
    Ok(agent_sdk::connect::connect_to(url, options).await?)
}

/// Says on stderr what the server refused (a subject this user may not use), whether or
/// not logs are on: the server reports it on the connection, and the command would
/// otherwise only see a call that goes unanswered.
fn say_refused(event: async_nats::Event) {
    if let async_nats::Event::ServerError(e) = event {
        let e = e.to_string();
        let hint = if e.contains("Subscription to \"_INBOX") {
            " (where each user has a private inbox, give --inbox-prefix or NATS_INBOX_PREFIX)"
        } else {
            ""
        };
        eprintln!("the NATS server refused: {e}{hint}");
    }
}
