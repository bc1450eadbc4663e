//! `workflow-node runs list|show|watch|history|cancel|pause|resume|retry`: the operator's view of the runs of
//! a namespace, read straight from the runs bucket and the history stream
//! ([`crate::shell::store::inspect`]); a cancel goes to the workflow's nodes, which check it.
//!
//! Exit 0 when done, 1 when the run named is unknown, of another workflow, or cannot be
//! cancelled (the message says which), 2 on a usage or connection error.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Result};
use messages::control::RunControl;
use messages::jsonrpc::{Method, Outcome, Request, Response, TaskIdParams};
use messages::{subjects, AgentReply};
use serde_json::{json, Value};

use super::connect::{connect, Connection, NatsArgs};
use super::runs_show;
use super::table::{self, Table};
use crate::core::RunStatus;
use crate::shell::run::history::HistoryEntry;
use crate::shell::{now, Error as ShellError};
use crate::shell::{FoundRun, Inspector};

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
    pub status: Option<StatusArg>,
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

/// A run status, as `--status` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusArg {
    /// The main DAG is running.
    Running,
    /// Exit handlers are running.
    Finishing,
    /// It succeeded.
    Success,
    /// It failed.
    Failure,
    /// It was cancelled.
    Cancelled,
    /// It hit its deadline.
    #[value(name = "timed_out", alias = "timed-out")]
    TimedOut,
    /// It is paused (`runs pause`).
    Paused,
}

impl StatusArg {
    /// Whether `run` has this status (`Paused`: it is paused, whatever is below).
    pub(crate) fn matches(self, run: &crate::core::Execution) -> bool {
        if self == StatusArg::Paused || run.is_paused() {
            return self == StatusArg::Paused && run.is_paused();
        }
        let status = run.status;
        let want = match self {
            StatusArg::Paused => return false,
            StatusArg::Running => RunStatus::Running,
            StatusArg::Finishing => RunStatus::Finishing,
            StatusArg::Success => RunStatus::Success,
            StatusArg::Failure => RunStatus::Failure,
            StatusArg::Cancelled => RunStatus::Cancelled,
            StatusArg::TimedOut => RunStatus::TimedOut,
        };
        status == want
    }
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
        }
    })
}

/// Says why a command cannot do what it was asked, on stderr; exit 1.
pub(crate) fn refuse(message: impl std::fmt::Display) -> Result<ExitCode> {
    eprintln!("{message}");
    Ok(ExitCode::from(1))
}

/// Connects to the mesh the runs live on (an embedded server has none) and opens its runs
/// bucket; `None` when no workflow node ever ran in the namespace.
pub(crate) async fn open(nats: &NatsArgs) -> Result<(Connection, Option<Inspector>)> {
    if nats.nats_url.is_none() {
        return Err(anyhow!(
            "a fresh embedded server has no runs: give --nats-url (or NATS_URL) of the mesh"
        ));
    }
    let conn = connect(nats).await?;
    match Inspector::open(conn.client.clone(), &nats.namespace).await {
        Ok(i) => Ok((conn, Some(i))),
        Err(ShellError::Missing(_)) => Ok((conn, None)),
        Err(e) => {
            conn.close().await;
            Err(e.into())
        }
    }
}

/// The run `target` names, or why there is none (to say, exit 1).
pub(crate) async fn find(
    inspector: Option<&Inspector>,
    target: &Target,
) -> Result<std::result::Result<FoundRun, String>> {
    let ns = &target.nats.namespace;
    let not_found = || {
        let of = target
            .workflow
            .as_deref()
            .map(|w| format!(" of {w}"))
            .unwrap_or_default();
        let hint =
            if target.workflow.is_none() && crate::core::ExecutionId::parse(&target.id).is_err() {
                " (a task id needs --workflow)"
            } else {
                ""
            };
        format!("no run '{}'{of} in namespace '{ns}'{hint}", target.id)
    };
    let Some(inspector) = inspector else {
        return Ok(Err(not_found()));
    };
    let found = inspector
        .find(
            &target.id,
            target.workflow.as_deref(),
            target.caller.as_deref(),
        )
        .await?;
    Ok(match found {
        None => Err(not_found()),
        Some(run) => match &target.workflow {
            Some(w) if *w != run.workflow => Err(format!(
                "run {} is a run of {}, not of {w}",
                run.execution, run.workflow
            )),
            _ => Ok(run),
        },
    })
}

async fn list(args: ListArgs) -> Result<ExitCode> {
    let since = match &args.since {
        Some(text) => {
            Some(workflow_expr::duration::parse(text).map_err(|e| anyhow!("--since: {e}"))?)
        }
        None => None,
    };
    let (conn, inspector) = open(&args.nats).await?;
    let runs = match &inspector {
        Some(i) => i.list(args.workflow.as_deref()).await,
        None => Ok(Vec::new()),
    };
    conn.close().await;
    let mut runs = runs?;
    let now = now();
    let after = since.map(|d| now.0.saturating_sub(duration_ms(d)));
    runs.retain(|r| {
        let s = &r.record.state;
        args.status.is_none_or(|want| want.matches(s)) && after.is_none_or(|a| s.started_at.0 >= a)
    });
    runs.sort_by(|a, b| {
        let key = |r: &FoundRun| (r.record.state.started_at, r.execution.0.clone());
        key(b).cmp(&key(a))
    });
    let total = runs.len();
    if args.limit > 0 {
        runs.truncate(args.limit);
    }
    if args.json {
        let rows: Vec<Value> = runs.iter().map(|r| summary(r, now)).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        let mut t = Table::new(&["RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "CALLER"]);
        for r in &runs {
            let s = &r.record.state;
            t.row(vec![
                r.execution.0.clone(),
                r.workflow.clone(),
                s.shown_status().into(),
                table::time(Some(s.started_at)),
                table::span(Some(s.started_at), r.record.ended_at, now),
                caller(r).unwrap_or("-").into(),
            ]);
        }
        if t.is_empty() {
            println!("no runs");
        } else {
            print!("{}", t.render());
        }
    }
    if total > runs.len() {
        eprintln!("{} more (--limit 0 lists them all)", total - runs.len());
    }
    Ok(ExitCode::SUCCESS)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Who started a run: its `Mesh-Caller`, else the calling workflow's sub-task.
pub(crate) fn caller(run: &FoundRun) -> Option<&str> {
    let c = &run.record.caller;
    c.name.as_deref().or(c.sub_task_id.as_deref())
}

/// A run's line in `runs list --json`.
pub(crate) fn summary(run: &FoundRun, now: crate::core::Millis) -> Value {
    let s = &run.record.state;
    let duration = (s.started_at.0 > 0).then(|| {
        run.record
            .ended_at
            .unwrap_or(now)
            .0
            .saturating_sub(s.started_at.0)
    });
    json!({
        "execution_id": run.execution.0,
        "workflow": run.workflow,
        "status": s.shown_status(),
        "started_at": table::rfc3339(Some(s.started_at)),
        "ended_at": table::rfc3339(run.record.ended_at),
        "duration_ms": duration,
        "caller": caller(run),
        "retry_of": s.retry_of.as_ref().map(|r| &r.0),
        "paused_since": s
            .paused
            .as_ref()
            .filter(|_| s.is_paused())
            .map(|p| table::rfc3339(Some(p.since))),
    })
}

async fn history(target: Target) -> Result<ExitCode> {
    let (conn, inspector) = open(&target.nats).await?;
    let found = find(inspector.as_ref(), &target).await;
    let entries = match (&found, &inspector) {
        (Ok(Ok(run)), Some(i)) => Some(i.history(&run.workflow, &run.execution).await),
        _ => None,
    };
    conn.close().await;
    let run = match found? {
        Ok(run) => run,
        Err(why) => return refuse(why),
    };
    let entries = entries.expect("read for a run found")?;
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
pub(crate) fn history_table(entries: &[HistoryEntry]) -> Table {
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
            table::time(Some(e.at)),
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
    let (conn, inspector) = open(&target.nats).await?;
    let outcome = async {
        let run = match find(inspector.as_ref(), target).await? {
            Ok(run) => run,
            Err(why) => return Ok(Err(why)),
        };
        let status = run.record.state.status;
        if status.is_terminal() {
            return Ok(Err(format!(
                "run {} already ended ({})",
                run.execution,
                status.as_str()
            )));
        }
        let ns = &target.nats.namespace;
        send_cancel(
            &conn.client,
            ns,
            &run,
            args.reason.as_deref(),
            signer.as_ref(),
        )
        .await
    }
    .await;
    conn.close().await;
    match outcome? {
        Ok(text) => {
            if target.json {
                println!("{}", json!({"cancel": "requested", "message": text}));
            } else {
                println!("{text}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => refuse(why),
    }
}

/// Asks the workflow's nodes to cancel `run` (`tasks/cancel` by execution id, with the
/// reason in its metadata, signed by `signer`); the node's answer, or why it refused.
pub(crate) async fn send_cancel(
    client: &async_nats::Client,
    ns: &str,
    run: &FoundRun,
    reason: Option<&str>,
    signer: Option<&agent_sdk::Signer>,
) -> Result<std::result::Result<String, String>> {
    let mut metadata = serde_json::Map::new();
    if let Some(r) = reason {
        metadata.insert("reason".into(), json!(r));
    }
    let request = Request {
        id: format!("cancel-{}", uuid::Uuid::new_v4().simple()).into(),
        method: Method::TasksCancel(TaskIdParams {
            id: run.execution.0.clone(),
            metadata: (!metadata.is_empty()).then_some(metadata),
        }),
    };
    let reply = ask(client, ns, &run.workflow, &request, signer).await?;
    let reply = match reply {
        Ok(r) => r,
        Err(why) => return Ok(Err(why)),
    };
    Ok(match reply {
        Outcome::Result(r) => match *r {
            AgentReply::Task(t) => Ok(task_text(&t)
                .unwrap_or_else(|| format!("cancel of run {} requested", run.execution))),
            _ => Ok(format!("cancel of run {} requested", run.execution)),
        },
        Outcome::Error(e) => Err(e.message),
    })
}

/// Sends `request` to the nodes serving `workflow`, signed by `signer` if given, and reads
/// the answer; `Err` says that nothing serves it.
pub(crate) async fn ask(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    request: &Request,
    signer: Option<&agent_sdk::Signer>,
) -> Result<std::result::Result<Outcome, String>> {
    let body = serde_json::to_vec(request)?;
    let subject = subjects::agent_request(ns, workflow);
    let headers = signer
        .map(|s| s.sign(&subject, &body, std::time::SystemTime::now()))
        .unwrap_or_default();
    let reply = match client
        .request_with_headers(subject, headers, body.into())
        .await
    {
        Ok(r) => r,
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
            return Ok(Err(format!(
                "no workflow node serves {workflow} in namespace '{ns}' now: nothing was sent"
            )))
        }
        Err(e) => return Err(anyhow!("asking {workflow}: {e}")),
    };
    let response: Response = serde_json::from_slice(&reply.payload)
        .map_err(|e| anyhow!("{workflow} sent an answer that cannot be read: {e}"))?;
    Ok(Ok(response.outcome))
}

/// The text parts of a task's status message, joined.
pub(crate) fn task_text(task: &messages::Task) -> Option<String> {
    let parts = &task.status.message.as_ref()?.parts;
    let text: Vec<&str> = parts.iter().filter_map(messages::Part::as_text).collect();
    (!text.is_empty()).then(|| text.join("\n"))
}
