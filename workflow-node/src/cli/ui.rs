//! `workflow-node ui` (or `gateway`): serves the web view ([`crate::web`]) of a mesh on its
//! own, with its doors (A2A over HTTP for every workflow and agent of the catalog), until
//! SIGINT or SIGTERM. One command, not two: the doors and the view share the server, its
//! tokens, its host checks and its signing key, and neither hosts a workflow. The arguments are parsed here; the view itself knows nothing of the
//! CLI.

use std::net::SocketAddr;
use std::process::ExitCode;

use super::connect::{connect, NatsArgs};
use super::runs::refuse;
use crate::web::{Access, AccessArgs, Web};

/// Arguments of `ui`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to serve the pages and the API (port 0 picks a free one, printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub http: SocketAddr,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// The key the starts, cancels and decisions sent from the web view are signed with.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
    /// Who may use the API.
    #[command(flatten)]
    pub access: AccessArgs,
    /// What the MCP door at `/mcp` serves.
    #[command(flatten)]
    pub mcp: crate::doors::mcp::McpArgs,
}

/// Runs `ui`: serves the web view until SIGINT/SIGTERM.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        if args.nats.nats_url.is_none() {
            return refuse(
                "a fresh embedded server has no mesh to show: give --nats-url (or NATS_URL)",
            );
        }
        let signer = args.sign.signer()?;
        let access = Access::new(&args.access)?;
        if let Err(why) = access.check_bind(args.http) {
            return refuse(why);
        }
        let conn = connect(&args.nats).await?;
        let ns = &args.nats.namespace;
        let trust = args.nats.cards.clone();
        let client = conn.client.clone();
        let mcp = args.mcp.clone();
        let web = Web::start_with_mcp(client, ns, signer, access, args.http, trust, mcp).await?;
        eprintln!("web view at http://{}/", web.addr());
        eprintln!("A2A at http://{}/a2a/{{name}}", web.addr());
        agent_sdk::health::signalled().await?;
        drop(web);
        conn.close().await;
        Ok(ExitCode::SUCCESS)
    })
}
