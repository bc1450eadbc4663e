//! `workflow-node runs pause|resume|retry ID`: steering a run through the workflow's nodes,
//! which check who asks (the key that started the run, or an operator's) as for a cancel.
//!
//! `pause` and `resume` are answered at once (exit 0 once recorded, 1 when refused: the
//! run ended, is already paused or not paused, or the key may not). `retry` starts a new
//! run from the ended one's failed node and, like `run`, waits for its final reply (exit 0
//! on success, 1 otherwise) or, with `--detach`, prints its id once it is accepted.

use std::process::ExitCode;

use agent_sdk::workflow::{new_task_id, start_retry, StartAs, Started};
use agent_sdk::Timing;
use anyhow::{anyhow, Result};
use messages::a2a::{Message, Part, Role, TaskState};
use messages::control::{RunControl, WorkflowRunControl};
use messages::jsonrpc::{Outcome, Request};
use messages::AgentReply;
use serde_json::json;

use super::runs::{ask, find, open, refuse, task_text, Target};
use crate::core::ExecutionId;
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
    let (conn, inspector) = open(&target.nats).await?;
    let outcome = async {
        let run = match find(inspector.as_ref(), target).await? {
            Ok(run) => run,
            Err(why) => return Ok(Err(why)),
        };
        let ns = &target.nats.namespace;
        let reason = args.reason.as_deref();
        send_control(&conn.client, ns, &run, action, reason, signer.as_ref()).await
    }
    .await;
    conn.close().await;
    match outcome? {
        Ok(text) => {
            if target.json {
                println!("{}", json!({action.as_str(): "recorded", "message": text}));
            } else {
                println!("{text}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => refuse(why),
    }
}

/// Asks the workflow's nodes to pause or resume `run` (a `workflow_run_control` signed by
/// `signer`); the node's answer, or why it refused.
pub(crate) async fn send_control(
    client: &async_nats::Client,
    ns: &str,
    run: &FoundRun,
    action: RunControl,
    reason: Option<&str>,
    signer: Option<&agent_sdk::Signer>,
) -> Result<std::result::Result<String, String>> {
    let control = WorkflowRunControl {
        execution_id: run.execution.0.clone(),
        action,
        reason: reason.map(str::to_string),
    };
    let message_id = format!("{}-{}", action.as_str(), uuid::Uuid::new_v4().simple());
    let message = Message::new(
        message_id.clone(),
        Role::User,
        vec![Part::data_part(&control)],
    );
    let request = Request::message_send(message_id.as_str(), message);
    let answer = ask(client, ns, &run.workflow, &request, signer).await?;
    Ok(match answer {
        Err(why) => Err(why),
        Ok(Outcome::Error(e)) => Err(e.message),
        Ok(Outcome::Result(r)) => match *r {
            AgentReply::Task(t) => {
                let text = task_text(&t).unwrap_or_default();
                if t.status.state == TaskState::Completed {
                    Ok(text)
                } else {
                    Err(text)
                }
            }
            _ => Err(format!(
                "{} gave an answer that is not a task",
                run.workflow
            )),
        },
    })
}

/// Retries `run` as a new run and returns its execution id once the workflow accepted it,
/// or why it refused.
pub(crate) async fn send_retry(
    client: &async_nats::Client,
    ns: &str,
    run: &FoundRun,
    signer: Option<agent_sdk::Signer>,
    timing: Timing,
) -> Result<std::result::Result<ExecutionId, String>> {
    let task_id = new_task_id();
    let execution = crate::shell::run::names::execution_id(&run.workflow, &task_id);
    let start = StartAs {
        task_id,
        version: None,
        signer,
    };
    let started = start_retry(client, ns, &run.workflow, &run.execution.0, timing, start)
        .await
        .map_err(|e| anyhow!("sending the retry: {e}"))?;
    Ok(match started {
        Started::Accepted => Ok(execution),
        Started::Ended { text, .. } if text.is_empty() => Err("the retry was refused".into()),
        Started::Ended { text, .. } => Err(text),
    })
}

/// Runs `runs retry`.
pub(crate) async fn retry(args: RetryArgs) -> Result<ExitCode> {
    let target = &args.target;
    let timeout =
        workflow_expr::duration::parse(&args.timeout).map_err(|e| anyhow!("--timeout: {e}"))?;
    let resend_interval = workflow_expr::duration::parse(&args.resend_interval)
        .map_err(|e| anyhow!("--resend-interval: {e}"))?;
    let signer = args.sign.signer()?;
    let (conn, inspector) = open(&target.nats).await?;
    let run = match find(inspector.as_ref(), target).await {
        Ok(Ok(run)) => run,
        Ok(Err(why)) => {
            conn.close().await;
            return refuse(why);
        }
        Err(e) => {
            conn.close().await;
            return Err(e);
        }
    };
    if !run.record.state.retryable() {
        conn.close().await;
        return refuse(format!(
            "run {} is {}: only a run that ended without success can be retried",
            run.execution,
            run.record.state.shown_status()
        ));
    }
    let ns = target.nats.namespace.clone();
    let timing = Timing {
        timeout,
        resend_interval,
    };
    if args.detach {
        let sent = send_retry(&conn.client, &ns, &run, signer, timing).await;
        conn.close().await;
        let execution = match sent? {
            Ok(execution) => execution,
            Err(why) => return refuse(why),
        };
        if target.json {
            println!(
                "{}",
                json!({"execution_id": execution.0, "retry_of": run.execution.0})
            );
        } else {
            println!("{execution}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let task_id = new_task_id();
    let execution = crate::shell::run::names::execution_id(&run.workflow, &task_id);
    if !target.json {
        eprintln!("retrying run {} as run {execution}", run.execution);
    }
    let start = StartAs {
        task_id,
        version: None,
        signer,
    };
    let progress = super::run::show_progress;
    let result = agent_sdk::workflow::retry(
        &conn.client,
        &ns,
        &run.workflow,
        &run.execution.0,
        timing,
        start,
        progress,
    )
    .await;
    conn.close().await;
    let result = result?;
    super::run::print_result(&result, target.json);
    Ok(if result.status == "success" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
