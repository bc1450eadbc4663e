//! `workflow-node approvals`, `approve ID NODE` and `reject ID NODE`: the approval gates
//! waiting across runs, and a decision on one ([`crate::ops::approvals`]), which the
//! workflow's nodes check and record.
//!
//! Exit 0 when done, 1 when the run is unknown, of another workflow, or its node is not
//! waiting (or the workflow refused the decision), 2 on a usage or connection error.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::{json, Value};

use super::connect::NatsArgs;
use super::runs::{self, refused, Target};
use super::table::{self, Table};
use crate::ops::approvals::{self, Decided, Waiting};
use crate::ops::view::rfc3339;

/// Arguments of `approvals`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only runs of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Arguments of `approve` and `reject`.
#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// The run (its execution id, or with --workflow the task id it was started with), the
    /// NATS connection and the output format.
    #[command(flatten)]
    pub target: Target,
    /// The approval node.
    pub node: String,
    /// Who decides: the signer's approver name or key. Optional: the node records whoever
    /// signed, and refuses a `--by` that names someone else.
    #[arg(long)]
    pub by: Option<String>,
    /// Why (kept in the node's output or error).
    #[arg(long)]
    pub comment: Option<String>,
    /// The approver's key (an operator's, for a gate that lists no approvers): a decision
    /// counts only when signed by one the gate names.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
}

/// Runs `approvals`.
pub fn list(args: ListArgs) -> ExitCode {
    super::block_on(list_waiting(args))
}

/// Runs `approve` (`approve` true) or `reject`.
pub fn decide(args: DecideArgs, approve: bool) -> ExitCode {
    super::block_on(send_decision(args, approve))
}

async fn list_waiting(args: ListArgs) -> Result<ExitCode> {
    let (conn, runs) = runs::open(&args.nats).await?;
    let waiting = approvals::waiting(&runs, args.workflow.as_deref()).await;
    conn.close().await;
    let waiting = match waiting {
        Ok(waiting) => waiting,
        Err(r) => return refused(r),
    };
    if args.json {
        let rows: Vec<Value> = waiting.iter().map(waiting_json).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "RUN",
        "WORKFLOW",
        "NODE",
        "WAITING SINCE",
        "APPROVERS",
        "MESSAGE",
    ]);
    for w in &waiting {
        let ask = w.run.record.asks.get(&w.node);
        let approvers = ask
            .map(|a| a.approvers.join(","))
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "anyone".into());
        t.row(vec![
            w.run.execution.0.clone(),
            w.run.workflow.clone(),
            w.node.clone(),
            crate::ops::view::time(w.since),
            approvers,
            table::short(ask.and_then(|a| a.message.as_deref()).unwrap_or(""), 80),
        ]);
    }
    if t.is_empty() {
        println!("no approvals waiting");
    } else {
        print!("{}", t.render());
    }
    Ok(ExitCode::SUCCESS)
}

/// A waiting gate's line in `approvals --json`.
fn waiting_json(w: &Waiting) -> Value {
    let ask = w.run.record.asks.get(&w.node);
    json!({
        "execution_id": w.run.execution.0,
        "workflow": w.run.workflow,
        "node_id": w.node,
        "waiting_since": rfc3339(w.since),
        "approvers": ask.map(|a| a.approvers.clone()).unwrap_or_default(),
        "message": ask.and_then(|a| a.message.clone()),
    })
}

async fn send_decision(args: DecideArgs, approve: bool) -> Result<ExitCode> {
    let target = &args.target;
    let signer = args.sign.signer()?;
    let (conn, runs) = runs::open(&target.nats).await?;
    let outcome = async {
        let run = runs::find(&runs, target).await?;
        let decision = Decided {
            node: &args.node,
            approve,
            by: args.by.as_deref(),
            comment: args.comment.as_deref(),
        };
        approvals::decide(&runs, &run, decision, signer.as_ref()).await
    }
    .await;
    conn.close().await;
    let text = match outcome {
        Ok(text) => text,
        Err(r) => return refused(r),
    };
    if target.json {
        println!("{}", json!({"recorded": true, "message": text}));
    } else {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}
