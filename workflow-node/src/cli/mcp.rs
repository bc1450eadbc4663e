//! `workflow-node mcp`: the MCP door ([`crate::doors::mcp`]) on stdin and stdout, for an
//! editor or assistant that starts it as a subprocess. stdout carries MCP only; messages
//! go to stderr. Credentials come from the environment and flags, as for every command
//! (stdio takes no OAuth flow).

use std::process::ExitCode;

use super::connect::{connect, NatsArgs};
use super::runs::refuse;
use crate::doors::mcp::{self, Door, McpArgs};

/// Arguments of `mcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// The key the tool calls (and their cancels) are signed with.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
    /// Which tools to serve, and how long a call may take.
    #[command(flatten)]
    pub mcp: McpArgs,
}

/// Runs `mcp`: serves the door on stdio until the client closes it.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        if args.nats.nats_url.is_none() {
            return refuse(
                "a fresh embedded server has no tools to serve: give --nats-url (or NATS_URL)",
            );
        }
        let conn = connect(&args.nats).await?;
        let mut mesh = agent_sdk::Mesh::new(conn.client.clone())
            .namespace(&args.nats.namespace)?
            .card_trust(args.nats.cards.clone());
        if let Some(signer) = args.sign.signer()? {
            mesh = mesh.signer(signer);
        }
        let door = Door::open(mesh, args.mcp).await?;
        mcp::serve_stdio(door).await?;
        conn.close().await;
        Ok(ExitCode::SUCCESS)
    })
}
