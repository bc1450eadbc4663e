//! `workflow-node runs pause|resume|retry ID`: steering a run through the workflow's nodes
//! ([`crate::ops::steer`]), which check who asks (the key that started the run, or an
//! operator's) as for a cancel.
//!
//! `pause` and `resume` are answered at once (exit 0 once recorded, 1 when refused: the
//! run ended, is already paused or not paused, or the key may not). `retry` starts a new
//! run from the ended one's failed node and, like `run`, waits for its final reply (exit 0
//! on success, 1 otherwise) or, with `--detach`, prints its id once it is accepted.

use std::process::ExitCode;

use agent_sdk::workflow::{new_task_id, RunResult, StartAs};
use agent_sdk::Timing;
use anyhow::{anyhow, Result};
use messages::control::RunControl;
use serde_json::json;

use super::runs::{find, open, refused, Target};
use crate::core::ExecutionId;
use crate::ops::refusal::Refusal;
use crate::ops::runs::Runs;
use crate::ops::steer;
use crate::shell::FoundRun;

/// Arguments of `runs pause` and `runs resume`.
#[derive(Debug, clap::Args)]
pub struct ControlArgs {
    /// Which run.
    #[command(flatten)]
    pub target: Target,
    /// Why (kept in the run's history).
    #[arg(long)]
    pub reason: Option<String>,
    /// The key the request is signed with: an operator's (a run named by its execution
    /// id), or the one that started the run.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
}

/// Arguments of `runs retry`.
#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    /// Which run: one that ended without success (failed, cancelled).
    #[command(flatten)]
    pub target: Target,
    /// How long to wait for the new run's final reply, e.g. 30s, 5m.
    #[arg(long, default_value = "5m")]
    pub timeout: String,
    /// Silence after which the request is resent with the same task id.
    #[arg(long, default_value = "3s")]
    pub resend_interval: String,
    /// Print the new run's id once it is accepted, and return at once.
    #[arg(long)]
    pub detach: bool,
    /// The key the request is signed with: an operator's, or the one that started the run
    /// (it then owns the new run too).
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
}

/// Runs `runs pause` (`action` pause) or `runs resume`.
pub(crate) async fn control(args: ControlArgs, action: RunControl) -> Result<ExitCode> {
    let target = &args.target;
    let signer = args.sign.signer()?;
    let (conn, runs) = open(&target.nats).await?;
    let outcome = async {
        let run = find(&runs, target).await?;
        let reason = args.reason.as_deref();
        steer::control(&runs, &run, action, reason, signer.as_ref()).await
    }
    .await;
    conn.close().await;
    let text = match outcome {
        Ok(text) => text,
        Err(r) => return refused(r),
    };
    if target.json {
        println!("{}", json!({action.as_str(): "recorded", "message": text}));
    } else {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `runs retry`.
pub(crate) async fn retry(args: RetryArgs) -> Result<ExitCode> {
    let target = &args.target;
    let timeout =
        workflow_expr::duration::parse(&args.timeout).map_err(|e| anyhow!("--timeout: {e}"))?;
    let resend_interval = workflow_expr::duration::parse(&args.resend_interval)
        .map_err(|e| anyhow!("--resend-interval: {e}"))?;
    let timing = Timing {
        timeout,
        resend_interval,
    };
    let signer = args.sign.signer()?;
    let (conn, runs) = open(&target.nats).await?;
    let run = async {
        let run = find(&runs, target).await?;
        steer::retryable(&run)?;
        Ok::<_, Refusal>(run)
    }
    .await;
    let run = match run {
        Ok(run) => run,
        Err(r) => {
            conn.close().await;
            return refused(r);
        }
    };
    let task_id = new_task_id();
    if args.detach {
        let sent = steer::retry(&runs, &run, &task_id, signer, timing).await;
        conn.close().await;
        return match sent {
            Ok(execution) => print_detached(&execution, &run, target.json),
            Err(r) => refused(r),
        };
    }
    let result = retry_and_wait(&runs, &run, (&task_id, signer), timing, target.json).await;
    conn.close().await;
    let result = result?;
    super::run::print_result(&result, target.json);
    Ok(if result.status == "success" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints the id of the new run `execution`, a retry of `run`.
fn print_detached(execution: &ExecutionId, run: &FoundRun, json: bool) -> Result<ExitCode> {
    if json {
        println!(
            "{}",
            json!({"execution_id": execution.0, "retry_of": run.execution.0})
        );
    } else {
        println!("{execution}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Retries `run` as a new run with task id `task_id` signed by `signer`, showing its
/// progress, until its final reply.
async fn retry_and_wait(
    runs: &Runs,
    run: &FoundRun,
    (task_id, signer): (&str, Option<agent_sdk::Signer>),
    timing: Timing,
    json: bool,
) -> Result<RunResult> {
    let (client, ns) = (runs.client(), runs.namespace());
    let execution = crate::shell::run::names::execution_id(&run.workflow, task_id);
    if !json {
        eprintln!("retrying run {} as run {execution}", run.execution);
    }
    let start = StartAs {
        task_id: task_id.to_string(),
        version: None,
        signer,
        priority: None,
    };
    let progress = super::run::show_progress;
    let retried = agent_sdk::workflow::retry(
        client,
        ns,
        &run.workflow,
        &run.execution.0,
        timing,
        start,
        progress,
    );
    Ok(retried.await?)
}
