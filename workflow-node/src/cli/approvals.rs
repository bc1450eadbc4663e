//! `workflow-node approvals`, `approve ID NODE` and `reject ID NODE`: the approval gates
//! waiting across runs (read from the runs bucket), and a decision on one, sent to the
//! workflow's nodes as a `workflow_approval_decision` (they check it and record it).
//!
//! Exit 0 when done, 1 when the run is unknown, of another workflow, or its node is not
//! waiting (or the workflow refused the decision), 2 on a usage or connection error.

use std::process::ExitCode;

use anyhow::Result;
use messages::a2a::{Message, Part, Role, TaskState};
use messages::jsonrpc::{Outcome, Request};
use messages::workflow::{Decision, WorkflowApprovalDecision};
use messages::AgentReply;
use serde_json::{json, Value};

use super::connect::NatsArgs;
use super::runs::{self, refuse, Target};
use super::table::{self, Table};
use crate::core::NodeStatus;
use crate::shell::FoundRun;

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
    let (conn, inspector) = runs::open(&args.nats).await?;
    let found = match &inspector {
        Some(i) => i.list(args.workflow.as_deref()).await,
        None => Ok(Vec::new()),
    };
    conn.close().await;
    let mut waiting: Vec<(FoundRun, String)> = Vec::new();
    for run in found? {
        if run.record.state.status.is_terminal() {
            continue;
        }
        let nodes: Vec<String> = run
            .record
            .state
            .nodes
            .iter()
            .filter(|(_, n)| n.status == NodeStatus::Waiting)
            .map(|(id, _)| id.clone())
            .collect();
        for node in nodes {
            waiting.push((run.clone(), node));
        }
    }
    let since = |(run, node): &(FoundRun, String)| {
        run.record.state.nodes.get(node).and_then(|n| n.started_at)
    };
    waiting.sort_by_key(since);
    if args.json {
        let rows: Vec<Value> = waiting
            .iter()
            .map(|w| {
                let (run, node) = w;
                let ask = run.record.asks.get(node);
                json!({
                    "execution_id": run.execution.0,
                    "workflow": run.workflow,
                    "node_id": node,
                    "waiting_since": table::rfc3339(since(w)),
                    "approvers": ask.map(|a| a.approvers.clone()).unwrap_or_default(),
                    "message": ask.and_then(|a| a.message.clone()),
                })
            })
            .collect();
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
        let (run, node) = w;
        let ask = run.record.asks.get(node);
        let approvers = ask
            .map(|a| a.approvers.join(","))
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "anyone".into());
        t.row(vec![
            run.execution.0.clone(),
            run.workflow.clone(),
            node.clone(),
            table::time(since(w)),
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

async fn send_decision(args: DecideArgs, approve: bool) -> Result<ExitCode> {
    let target = &args.target;
    let signer = args.sign.signer()?;
    let (conn, inspector) = runs::open(&target.nats).await?;
    let outcome = async {
        let run = match runs::find(inspector.as_ref(), target).await? {
            Ok(run) => run,
            Err(why) => return Ok(Err(why)),
        };
        let ns = &target.nats.namespace;
        let decision = Decided {
            node: &args.node,
            approve,
            by: args.by.as_deref(),
            comment: args.comment.as_deref(),
        };
        send(&conn.client, ns, &run, &decision, signer.as_ref()).await
    }
    .await;
    conn.close().await;
    match outcome? {
        Ok(text) => {
            if target.json {
                println!("{}", json!({"recorded": true, "message": text}));
            } else {
                println!("{text}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => refuse(why),
    }
}

/// Why a decision on `node` of `run` cannot be taken now, if it cannot.
fn not_waiting(run: &FoundRun, node: &str) -> Option<String> {
    let state = &run.record.state;
    if state.status.is_terminal() {
        return Some(format!(
            "run {} already ended ({})",
            run.execution,
            state.status.as_str()
        ));
    }
    // A node the run never reached may not be an approval node at all: the workflow's
    // node says which.
    let status = state.nodes.get(node)?.status;
    (status != NodeStatus::Waiting).then(|| {
        format!(
            "node '{node}' of run {} is not waiting for a decision (it is {})",
            run.execution,
            status.as_str()
        )
    })
}

/// A decision on an approval gate, as [`send`] takes it.
pub(crate) struct Decided<'a> {
    /// The approval node.
    pub(crate) node: &'a str,
    /// Approve (else reject).
    pub(crate) approve: bool,
    /// Who decides (checked against the signing key when the node binds names to keys).
    pub(crate) by: Option<&'a str>,
    /// Why.
    pub(crate) comment: Option<&'a str>,
}

/// Sends `decision` on `run` to its workflow's nodes, signed by `signer`: the node's
/// answer, or why the decision cannot be taken (not waiting, refused, nothing serving).
pub(crate) async fn send(
    client: &async_nats::Client,
    ns: &str,
    run: &FoundRun,
    decision: &Decided<'_>,
    signer: Option<&agent_sdk::Signer>,
) -> Result<std::result::Result<String, String>> {
    if let Some(why) = not_waiting(run, decision.node) {
        return Ok(Err(why));
    }
    let message = WorkflowApprovalDecision {
        execution_id: run.execution.0.clone(),
        node_id: decision.node.to_owned(),
        decision: if decision.approve {
            Decision::Approve
        } else {
            Decision::Reject
        },
        by: decision.by.map(str::to_owned),
        comment: decision.comment.map(str::to_owned),
    };
    let id = format!("decision-{}", uuid::Uuid::new_v4().simple());
    let message = Message::new(id.clone(), Role::User, vec![Part::data_part(&message)]);
    let request = Request::message_send(id.as_str(), message);
    Ok(
        match runs::ask(client, ns, &run.workflow, &request, signer).await? {
            Err(why) => Err(why),
            Ok(Outcome::Error(e)) => Err(e.message),
            Ok(Outcome::Result(reply)) => match *reply {
                AgentReply::Task(t) => {
                    let text = runs::task_text(&t).unwrap_or_default();
                    if t.status.state == TaskState::Completed {
                        Ok(text)
                    } else {
                        Err(text)
                    }
                }
                _ => Err(format!(
                    "{} sent an answer that is not a task",
                    run.workflow
                )),
            },
        },
    )
}
