//! `workflow-node runs list|show|watch|history|cancel|pause|resume|retry|signal`: the operator's
//! view of the runs of a namespace. Each subcommand parses its arguments, calls
//! [`crate::ops`] and prints; a refusal prints its message.
//!
//! Exit 0 when done, 1 when the run named is unknown, of another workflow, or cannot be
//! cancelled (the message says which), 2 on a usage or connection error.

use std::process::ExitCode;

use anyhow::{anyhow, Result};
use messages::control::RunControl;
use serde_json::{json, Value};

use super::connect::{connect, Connection, NatsArgs};
use super::runs_show;
use super::table::{self, Table};
use crate::core::ExecutionId;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::runs::{Filter, RunRef, Runs, StatusFilter};
use crate::ops::{steer, view};
use crate::shell::run::history::HistoryEntry;
use crate::shell::FoundRun;

/// Arguments of `runs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: RunsCommand,
}

/// The subcommands of `runs`.
#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// List runs: id, workflow, status, started, duration, caller (newest first).
    List(ListArgs),
    /// Show a run: its nodes (status, attempts, started, duration, error), input, output
    /// and error.
    Show(runs_show::ShowArgs),
    /// Show a run live, until it ends.
    Watch(runs_show::WatchArgs),
    /// The events applied to a run, in order.
    History(Target),
    /// Cancel a run.
    Cancel(CancelArgs),
    /// Pause a run: it dispatches no new call (calls in flight end) until resumed.
    Pause(super::steer::ControlArgs),
    /// Resume a paused run where it stopped.
    Resume(super::steer::ControlArgs),
    /// Retry a run that ended without success as a new run: the nodes that succeeded are kept, the
    /// failed node and what depends on it run again; waits for its final reply.
    Retry(super::steer::RetryArgs),
    /// Send a signal to a run's wait node: `RUN NAME --data JSON|@FILE`, or `--key K
    /// --workflow W NAME ...` for the run whose wait node waits under that key.
    Signal(super::signal::SignalArgs),
}

/// Which run, and how to print it.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The run's execution id (or, with --workflow, the task id it was started with).
    pub id: String,
    /// The run's workflow: a run of another one is refused, and ID may be a task id.
    #[arg(long)]
    pub workflow: Option<String>,
    /// The caller name (`Mesh-Caller`) a task id was started with.
    #[arg(long)]
    pub caller: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Arguments of `runs list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only runs of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Only runs in this status.
    #[arg(long, value_enum)]
    pub status: Option<StatusFilter>,
    /// Only runs started within this long, e.g. 1h, 30m, 2d.
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many runs, the newest (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Arguments of `runs cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// Which run.
    #[command(flatten)]
    pub target: Target,
    /// Why (kept in the run's history and error).
    #[arg(long)]
    pub reason: Option<String>,
    /// The key the cancel is signed with: an operator's (a run named by its execution id),
    /// or the one that started the run.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
}

impl Target {
    /// The run this names, as [`crate::ops`] takes it.
    pub(crate) fn run_ref(&self) -> RunRef<'_> {
        RunRef {
            id: &self.id,
            workflow: self.workflow.as_deref(),
            caller: self.caller.as_deref(),
        }
    }
}

/// Runs `runs`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        match args.command {
            RunsCommand::List(a) => list(a).await,
            RunsCommand::Show(a) => runs_show::show(a).await,
            RunsCommand::Watch(a) => runs_show::watch(a).await,
            RunsCommand::History(a) => history(a).await,
            RunsCommand::Cancel(a) => cancel(a).await,
            RunsCommand::Pause(a) => super::steer::control(a, RunControl::Pause).await,
            RunsCommand::Resume(a) => super::steer::control(a, RunControl::Resume).await,
            RunsCommand::Retry(a) => super::steer::retry(a).await,
            RunsCommand::Signal(a) => super::signal::signal(a).await,
        }
    })
}

/// Says why a command cannot do what it was asked, on stderr; exit 1.
pub(crate) fn refuse(message: impl std::fmt::Display) -> Result<ExitCode> {
    eprintln!("{message}");
    Ok(ExitCode::from(1))
}

/// An operation's refusal as the CLI says it: a refusal of what was asked prints its
/// message (exit 1); a failure to ask at all is an error (exit 2).
pub(crate) fn refused(r: Refusal) -> Result<ExitCode> {
    if r.kind.is_refusal() {
        refuse(r.message)
    } else {
        Err(anyhow!(r.message))
    }
}

/// Connects to the mesh the runs live on (an embedded server has none) and opens its
/// runs.
pub(crate) async fn open(nats: &NatsArgs) -> Result<(Connection, Runs)> {
    if nats.nats_url.is_none() {
        return Err(anyhow!(
            "a fresh embedded server has no runs: give --nats-url (or NATS_URL) of the mesh"
        ));
    }
    let conn = connect(nats).await?;
    match Runs::open(conn.client.clone(), &nats.namespace).await {
        Ok(runs) => Ok((conn, runs)),
        Err(e) => {
            conn.close().await;
            Err(anyhow!(e.message))
        }
    }
}

/// The run `target` names; not found, with a hint when a task id was given without its
/// workflow.
pub(crate) async fn find(runs: &Runs, target: &Target) -> Result<FoundRun, Refusal> {
    runs.find(target.run_ref()).await.map_err(|mut r| {
        let task_id = target.workflow.is_none() && ExecutionId::parse(&target.id).is_err();
        if r.kind == RefusalKind::NotFound && task_id {
            r.message.push_str(" (a task id needs --workflow)");
        }
        r
    })
}

async fn list(args: ListArgs) -> Result<ExitCode> {
    let since = match &args.since {
        Some(text) => {
            Some(workflow_expr::duration::parse(text).map_err(|e| anyhow!("--since: {e}"))?)
        }
        None => None,
    };
    let filter = Filter {
        workflow: args.workflow.as_deref(),
        status: args.status,
        since,
        limit: args.limit,
    };
    let (conn, runs) = open(&args.nats).await?;
    let listed = runs.list(&filter).await;
    conn.close().await;
    let listed = match listed {
        Ok(listed) => listed,
        Err(r) => return refused(r),
    };
    let (runs, now) = (&listed.runs, listed.now);
    if args.json {
        let rows: Vec<Value> = runs.iter().map(|r| view::summary(r, now)).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        let mut t = Table::new(&["RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "CALLER"]);
        for r in runs {
            let s = &r.record.state;
            t.row(vec![
                r.execution.0.clone(),
                r.workflow.clone(),
                s.shown_status().into(),
                crate::ops::view::time(Some(s.started_at)),
                table::span(Some(s.started_at), r.record.ended_at, now),
                view::caller(r).unwrap_or("-").into(),
            ]);
        }
        if t.is_empty() {
            println!("no runs");
        } else {
            print!("{}", t.render());
        }
    }
    if listed.total > runs.len() {
        eprintln!(
            "{} more (--limit 0 lists them all)",
            listed.total - runs.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn history(target: Target) -> Result<ExitCode> {
    let (conn, runs) = open(&target.nats).await?;
    let read = async {
        let run = find(&runs, &target).await?;
        let entries = runs.history(&run).await?;
        Ok::<_, Refusal>((run, entries))
    }
    .await;
    conn.close().await;
    let (run, entries) = match read {
        Ok(read) => read,
        Err(r) => return refused(r),
    };
    if target.json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "run {} of {}: {} events",
        run.execution,
        run.workflow,
        entries.len()
    );
    print!("{}", history_table(&entries).render());
    Ok(ExitCode::SUCCESS)
}

/// A run's history as a table.
fn history_table(entries: &[HistoryEntry]) -> Table {
    let mut t = Table::new(&[
        "#", "TIME", "REPLICA", "EVENT", "NODE", "ATTEMPT", "RUN", "DETAIL",
    ]);
    for e in entries {
        let node = match (&e.node, &e.slot) {
            (Some(n), Some(s)) => format!("{n} [{s}]"),
            (Some(n), None) => n.clone(),
            _ => "-".into(),
        };
        t.row(vec![
            e.n.to_string(),
            crate::ops::view::time(Some(e.at)),
            e.replica.clone(),
            e.event.clone(),
            node,
            e.attempt.map_or("-".into(), |a| a.to_string()),
            e.status.as_str().into(),
            table::short(e.detail.as_deref().unwrap_or(""), 80),
        ]);
    }
    t
}

async fn cancel(args: CancelArgs) -> Result<ExitCode> {
    let target = &args.target;
    let signer = args.sign.signer()?;
    let (conn, runs) = open(&target.nats).await?;
    let outcome = async {
        let run = find(&runs, target).await?;
        steer::cancel(&runs, &run, args.reason.as_deref(), signer.as_ref()).await
    }
    .await;
    conn.close().await;
    let text = match outcome {
        Ok(text) => text,
        Err(r) => return refused(r),
    };
    if target.json {
        println!("{}", json!({"cancel": "requested", "message": text}));
    } else {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}
