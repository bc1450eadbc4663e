//! `workflow-node definitions list|delete`: the workflow definitions stored for runs to
//! keep theirs by ([`crate::shell::store::versions`]), how many kept runs use each, and
//! retiring one explicitly.
//!
//! Exit 0 when done, 1 when the definition named is unknown or still in use (the message
//! says which), 2 on a usage or connection error.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_nats::jetstream;
use serde_json::{json, Value};

use super::connect::NatsArgs;
use super::runs::{open, refuse};
use super::table::{self, Table};
use crate::shell::run::names;
use crate::shell::store::versions::{self, count_runs, StoredDefinition, SERVED_REFRESH};

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

/// A definition and the kept runs that use it.
struct Row {
    stored: StoredDefinition,
    running: usize,
    ended: usize,
}

/// The stored definitions (of `workflow`, when given) with their runs counted.
async fn rows(nats: &NatsArgs, workflow: Option<&str>) -> Result<Vec<Row>> {
    let (conn, inspector) = open(nats).await?;
    let result = async {
        let js = jetstream::new(conn.client.clone());
        let bucket = match js
            .get_key_value(names::versions_bucket(&nats.namespace))
            .await
        {
            Ok(bucket) => bucket,
            Err(_) => return Ok(Vec::new()),
        };
        let stored = versions::list_in(&bucket, workflow).await?;
        let counts: HashMap<String, (usize, usize)> = match &inspector {
            Some(i) => count_runs(&i.list(workflow).await?),
            None => HashMap::new(),
        };
        Ok::<_, anyhow::Error>(
            stored
                .into_iter()
                .map(|stored| {
                    let (running, ended) = counts.get(&stored.hash).copied().unwrap_or_default();
                    Row {
                        stored,
                        running,
                        ended,
                    }
                })
                .collect(),
        )
    }
    .await;
    conn.close().await;
    result
}

async fn list(args: ListArgs) -> Result<ExitCode> {
    let rows = rows(&args.nats, args.workflow.as_deref()).await?;
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
            table::time(Some(r.stored.served_at)),
            r.running.to_string(),
            r.ended.to_string(),
        ]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

/// Whether a definition last served at `served_at` may still be served by a replica (each
/// marks what it serves every [`SERVED_REFRESH`]).
fn maybe_served(stored: &StoredDefinition) -> bool {
    let recent = Duration::from_millis(crate::shell::now().0.saturating_sub(stored.served_at.0));
    recent < 2 * SERVED_REFRESH
}

async fn delete(args: DeleteArgs) -> Result<ExitCode> {
    let rows = rows(&args.nats, Some(&args.workflow)).await?;
    let named: Vec<&Row> = rows
        .iter()
        .filter(|r| r.stored.hash == args.version || r.stored.version == args.version)
        .collect();
    let row = match named.as_slice() {
        [] => {
            let versions: Vec<&str> = rows.iter().map(|r| r.stored.version.as_str()).collect();
            return refuse(format!(
                "workflow {} has no stored definition '{}' (stored versions: {})",
                args.workflow,
                args.version,
                if versions.is_empty() {
                    "none".to_string()
                } else {
                    versions.join(", ")
                }
            ));
        }
        [row] => *row,
        several => {
            let hashes: Vec<&str> = several.iter().map(|r| r.stored.hash.as_str()).collect();
            return refuse(format!(
                "version {} of {} is stored {} times: name one by hash ({})",
                args.version,
                args.workflow,
                several.len(),
                hashes.join(", ")
            ));
        }
    };
    let what = format!(
        "version {} ({}) of {}",
        row.stored.version, row.stored.hash, args.workflow
    );
    if row.running > 0 {
        return refuse(format!(
            "{what} is used by {} running run(s): it cannot be deleted until they end",
            row.running
        ));
    }
    if maybe_served(&row.stored) {
        return refuse(format!(
            "{what} was served by a replica at {}: stop serving it first (a replica marks what it serves every {} min)",
            table::time(Some(row.stored.served_at)),
            SERVED_REFRESH.as_secs() / 60
        ));
    }
    let (conn, _) = open(&args.nats).await?;
    let js = jetstream::new(conn.client.clone());
    let purged = async {
        let bucket = js
            .get_key_value(names::versions_bucket(&args.nats.namespace))
            .await?;
        bucket
            .purge(versions::key(&args.workflow, &row.stored.hash))
            .await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    conn.close().await;
    purged.map_err(|e| anyhow!("deleting {what}: {e}"))?;
    let ended = if row.ended > 0 {
        format!(
            " ({} ended run(s) named it: `runs show` draws them from their reached nodes only)",
            row.ended
        )
    } else {
        String::new()
    };
    println!("deleted {what}{ended}");
    Ok(ExitCode::SUCCESS)
}
