//! `workflow-node triggers dead-letters [--workflow W]` and `triggers replay WORKFLOW SEQ`:
//! the messages event triggers parked, and publishing one again
//! ([`crate::ops::triggers`]). Exit 0 when done, 1 when refused, 2 on an error.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use super::connect::{connect, NatsArgs};
use super::runs::refused;
use super::table::Table;
use crate::ops::triggers;

/// Arguments of `triggers`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: TriggersCommand,
}

/// The subcommands of `triggers`.
#[derive(Debug, clap::Subcommand)]
pub enum TriggersCommand {
    /// List the dead letters: messages a trigger took but could not start a run with.
    DeadLetters(ListArgs),
    /// Publish a dead letter again on its subject (the trigger takes it again).
    Replay(ReplayArgs),
}

/// Arguments of `triggers dead-letters`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only those of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Arguments of `triggers replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The workflow whose trigger parked it.
    pub workflow: String,
    /// The dead letter's sequence (from `triggers dead-letters`).
    pub sequence: u64,
    /// The operator key the request is signed with.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Runs `triggers`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        match args.command {
            TriggersCommand::DeadLetters(a) => list(a).await,
            TriggersCommand::Replay(a) => replay(a).await,
        }
    })
}

async fn list(a: ListArgs) -> Result<ExitCode> {
    let conn = connect(&a.nats).await?;
    let found = triggers::list(&conn.client, &a.nats.namespace, a.workflow.as_deref()).await;
    conn.close().await;
    let found = match found {
        Ok(found) => found,
        Err(r) => return refused(r),
    };
    if a.json {
        println!("{}", json!(found));
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["SEQ", "WORKFLOW", "TRIGGER", "SUBJECT", "PARKED", "REASON"]);
    for d in &found {
        t.row(vec![
            d.sequence.to_string(),
            d.workflow.clone(),
            d.trigger.clone(),
            d.subject.clone(),
            d.parked_at.clone(),
            d.reason.clone(),
        ]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

async fn replay(a: ReplayArgs) -> Result<ExitCode> {
    let signer = a.sign.signer()?;
    let conn = connect(&a.nats).await?;
    let ns = &a.nats.namespace;
    let outcome =
        triggers::replay(&conn.client, ns, &a.workflow, a.sequence, signer.as_ref()).await;
    conn.close().await;
    match outcome {
        Ok(text) => {
            println!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(r) => refused(r),
    }
}
