//! Approval gates: the ones waiting across runs (read from the runs bucket), and a decision
//! on one, sent to the workflow's nodes as a `workflow_approval_decision`. The node checks
//! the signer against the gate's approvers and refuses with a failed task and no code; the
//! checks the run's record allows (it ended, the node is not waiting) are made here first,
//! so that what the node refuses of a waiting gate is about who decides.

use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::workflow::{Decision, WorkflowApprovalDecision};

use crate::core::{Millis, NodeStatus};
use crate::shell::FoundRun;

use super::ask::{ask, completed};
use super::refusal::{Refusal, RefusalKind};
use super::runs::Runs;

/// A gate waiting for a decision.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// Its run.
    pub run: FoundRun,
    /// The approval node.
    pub node: String,
    /// Since when it waits.
    pub since: Option<Millis>,
}

/// Every gate waiting (in runs of `workflow`, when given), the longest waiting first.
pub async fn waiting(runs: &Runs, workflow: Option<&str>) -> Result<Vec<Waiting>, Refusal> {
    let mut waiting = Vec::new();
    for run in runs.all(workflow).await? {
        if run.record.state.status.is_terminal() {
            continue;
        }
        let nodes: Vec<(String, Option<Millis>)> = run
            .record
            .state
            .nodes
            .iter()
            .filter(|(_, n)| n.status == NodeStatus::Waiting)
            // A wait node waits for a signal, not a decision (see `signals`).
            .filter(|(_, n)| !matches!(n.detail, Some(crate::core::Detail::Wait(_))))
            .map(|(id, n)| (id.clone(), n.started_at))
            .collect();
        for (node, since) in nodes {
            waiting.push(Waiting {
                run: run.clone(),
                node,
                since,
            });
        }
    }
    waiting.sort_by_key(|w| w.since);
    Ok(waiting)
}

/// A decision on an approval gate.
#[derive(Debug, Clone, Copy)]
pub struct Decided<'a> {
    /// The approval node.
    pub node: &'a str,
    /// Approve (else reject).
    pub approve: bool,
    /// Who decides (checked against the signing key when the node binds names to keys).
    pub by: Option<&'a str>,
    /// Why.
    pub comment: Option<&'a str>,
}

/// Why a decision on `node` of `run` cannot be taken now, from its record, if it cannot.
fn may_decide(run: &FoundRun, node: &str) -> Result<(), Refusal> {
    let state = &run.record.state;
    if state.status.is_terminal() {
        return Err(Refusal::conflict(format!(
            "run {} already ended ({})",
            run.execution,
            state.status.as_str()
        )));
    }
    // A node the run never reached may not be an approval node at all: the workflow's
    // node says which.
    let Some(n) = state.nodes.get(node) else {
        return Ok(());
    };
    if n.status == NodeStatus::Waiting {
        return Ok(());
    }
    Err(Refusal::conflict(format!(
        "node '{node}' of run {} is not waiting for a decision (it is {})",
        run.execution,
        n.status.as_str()
    )))
}

/// The `message/send` (message id `id`) carrying `decision` on run `execution`.
pub fn decision_request(id: &str, execution: &str, decision: Decided<'_>) -> Request {
    let message = WorkflowApprovalDecision {
        execution_id: execution.to_owned(),
        node_id: decision.node.to_owned(),
        decision: if decision.approve {
            Decision::Approve
        } else {
            Decision::Reject
        },
        by: decision.by.map(str::to_owned),
        comment: decision.comment.map(str::to_owned),
    };
    let message = Message::new(id.to_owned(), Role::User, vec![Part::data_part(&message)]);
    Request::message_send(id, message)
}

/// Sends `decision` on `run` to its workflow's nodes, signed by `signer`: the node's
/// answer.
pub async fn decide(
    runs: &Runs,
    run: &FoundRun,
    decision: Decided<'_>,
    signer: Option<&agent_sdk::Signer>,
) -> Result<String, Refusal> {
    may_decide(run, decision.node)?;
    // A gate the run reached and waits on is refused by who decides; a node it never
    // reached, by what it is (not an approval node, or not waiting yet).
    let refused_as = if run.record.state.nodes.contains_key(decision.node) {
        RefusalKind::NotPermitted
    } else {
        RefusalKind::Conflict
    };
    let id = format!("decision-{}", uuid::Uuid::new_v4().simple());
    let request = decision_request(&id, &run.execution.0, decision);
    let (client, ns) = (runs.client(), runs.namespace());
    let answer = ask(client, ns, &run.workflow, &request, signer).await?;
    completed(answer, refused_as, || {
        format!("{} sent an answer that is not a task", run.workflow)
    })
}
