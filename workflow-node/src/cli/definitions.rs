//! `workflow-node definitions list|delete`: the workflow definitions stored for runs to
//! keep theirs by, how many kept runs use each, and retiring one explicitly
//! ([`crate::ops::definitions`]).
//!
//! Exit 0 when done, 1 when the definition named is unknown or still in use (the message
//! says which), 2 on a usage or connection error.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::{json, Value};

use super::connect::NatsArgs;
use super::runs::{open, refused};
use super::table::Table;
use crate::ops::definitions;

/// Arguments of `definitions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: DefinitionsCommand,
}

/// The subcommands of `definitions`.
#[derive(Debug, clap::Subcommand)]
pub enum DefinitionsCommand {
    /// List the stored definitions: workflow, version, hash, when last served, and how many
    /// kept runs (running, ended) use each.
    List(ListArgs),
    /// Delete a stored definition that no running run uses and no replica serves.
    Delete(DeleteArgs),
}

/// Arguments of `definitions list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this workflow's definitions.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Arguments of `definitions delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The workflow's name.
    pub workflow: String,
    /// The version (the file's `version`) or content hash to delete.
    pub version: String,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Runs `definitions`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        match args.command {
            DefinitionsCommand::List(a) => list(a).await,
            DefinitionsCommand::Delete(a) => delete(a).await,
        }
    })
}

async fn list(args: ListArgs) -> Result<ExitCode> {
    let (conn, runs) = open(&args.nats).await?;
    let rows = definitions::list(&runs, args.workflow.as_deref()).await;
    conn.close().await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(r) => return refused(r),
    };
    if args.json {
        let rows: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "workflow": r.stored.workflow,
                    "version": r.stored.version,
                    "hash": r.stored.hash,
                    "served_at": r.stored.served_at.0,
                    "running": r.running,
                    "ended": r.ended,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "WORKFLOW",
        "VERSION",
        "HASH",
        "LAST SERVED",
        "RUNNING",
        "ENDED",
    ]);
    for r in &rows {
        t.row(vec![
            r.stored.workflow.clone(),
            r.stored.version.clone(),
            r.stored.hash.clone(),
            crate::ops::view::time(Some(r.stored.served_at)),
            r.running.to_string(),
            r.ended.to_string(),
        ]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

async fn delete(args: DeleteArgs) -> Result<ExitCode> {
    let (conn, runs) = open(&args.nats).await?;
    let deleted = definitions::delete(&runs, &args.workflow, &args.version).await;
    conn.close().await;
    let row = match deleted {
        Ok(row) => row,
        Err(r) => return refused(r),
    };
    let ended = if row.ended > 0 {
        format!(
            " ({} ended run(s) named it: `runs show` draws them from their reached nodes only)",
            row.ended
        )
    } else {
        String::new()
    };
    println!(
        "deleted version {} ({}) of {}{ended}",
        row.stored.version, row.stored.hash, args.workflow
    );
    Ok(ExitCode::SUCCESS)
}
