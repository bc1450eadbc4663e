//! Agents' status updates on a workflow's calls (`{ns}.a2a.v1.agent.status.{workflow}.
//! {sub_task_id}`, where a dispatch's `Mesh-Status-To` points), forwarded to the run's
//! callers as progress: a `workflow_agent_status` DataPart in a `working` status update.
//!
//! Any replica takes any update (queue group): the sub-task id names the run and the call,
//! and the run's record its callers. Only updates that say something are forwarded: a bare
//! sign of life (the `working` heartbeat agents send while a handler runs) is dropped
//! before any read, and so is an update of a call that is no longer running (a late one of
//! an earlier attempt), of a run that has ended or is gone, or one that cannot be read
//! (logged). Forwarding is best effort, like every status update: nothing is stored, and
//! the updates of one run keep their order on one replica (not across replicas, which
//! share the updates of one call as they come).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use messages::a2a::{AgentReply, Part};
use messages::jsonrpc::{Outcome, Response};
use messages::workflow::WorkflowAgentStatus;
use messages::{call_proof, subjects};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::core::{ExecutionId, TaskKey};
use crate::definition::Workflow;
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::names;
use crate::shell::run::reply::PROGRESS_VALUE_MAX;
use crate::shell::store::runs;
use crate::shell::worker::effects::RunContext;

/// Tasks forwarding updates, per workflow and replica: a run's updates all go to one of
/// them, so they reach its callers in the order this replica got them.
const LANES: usize = 8;

/// Subscribes to the status updates of the workflow's calls (in its queue group).
pub(in crate::shell) async fn subscribe(
    shared: &Shared,
    workflow: &Workflow,
) -> Result<async_nats::Subscriber> {
    let subject = subjects::agent_status_all(&shared.ns, &workflow.name);
    shared.queue_subscribe(subject, &workflow.name).await
}

/// Forwards the workflow's agents' status updates until the subscription ends.
pub(in crate::shell) async fn serve(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    mut sub: async_nats::Subscriber,
) {
    let lanes: Vec<mpsc::Sender<AgentUpdate>> = (0..LANES)
        .map(|_| {
            let (tx, mut rx) = mpsc::channel::<AgentUpdate>(256);
            let (shared, workflow) = (shared.clone(), workflow.clone());
            tokio::spawn(async move {
                while let Some(update) = rx.recv().await {
                    if let Err(e) = forward(&shared, &workflow, update).await {
                        tracing::debug!("forwarding an agent's status update failed: {e}");
                    }
                }
            });
            tx
        })
        .collect();
    while let Some(msg) = sub.next().await {
        // Only whoever received the call knows its token, which proves the update.
        let sub_task_id = subjects::last_token(&msg.subject);
        let mac = msg
            .headers
            .as_ref()
            .and_then(|h| h.get(call_proof::CALL_MAC));
        if let Err(e) = shared.seal.check_call(
            &workflow.name,
            sub_task_id,
            &msg.subject,
            &msg.payload,
            mac.map(|v| v.as_str()),
        ) {
            tracing::warn!("dropping a status update on {}: {e}", msg.subject);
            shared.metrics.unproven(&workflow.name, "status");
            continue;
        }
        // A sign of life of the call, heartbeat or not (see `run::check`).
        shared.signs.note(sub_task_id);
        let Some(update) = interpret(&msg.subject, &msg.payload) else {
            continue;
        };
        let mut h = DefaultHasher::new();
        update.execution.hash(&mut h);
        let lane = &lanes[(h.finish() % LANES as u64) as usize];
        if lane.send(update).await.is_err() {
            break;
        }
    }
}

/// A status update worth forwarding, read from its subject and payload.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentUpdate {
    /// The run whose call it is about.
    pub execution: ExecutionId,
    /// The call.
    pub task: TaskKey,
    /// The call's attempt the agent works on.
    pub attempt: u32,
    /// The sub-task id (the last token of the subject).
    pub sub_task_id: String,
    /// The agent's A2A task state, as written on the wire (`working`, ...).
    pub state: String,
    /// The text parts of the update's message, joined by newlines.
    pub text: Option<String>,
    /// The first DataPart of the update's message, when small enough to pass on.
    pub data: Option<Value>,
}

/// The update on `subject` (an agent status subject of a workflow), when it is a status
/// update of one of a run's calls that carries a message; `None` for a bare sign of life,
/// and for anything unreadable (logged).
pub fn interpret(subject: &str, payload: &[u8]) -> Option<AgentUpdate> {
    let sub_task_id = subjects::last_token(subject);
    let Some((execution, task, attempt)) = TaskKey::parse_sub_task_id(sub_task_id) else {
        tracing::warn!("dropping a status update on {subject}: not a sub-task id of ours");
        return None;
    };
    // Heartbeats carry no message: skip them without parsing.
    if !contains(payload, b"\"parts\"") {
        return None;
    }
    let update = match serde_json::from_slice::<Response>(payload).map(|r| r.outcome) {
        Ok(Outcome::Result(reply)) => match *reply {
            AgentReply::StatusUpdate(update) => update,
            _ => return None,
        },
        Ok(Outcome::Error(_)) => return None,
        Err(e) => {
            tracing::warn!("dropping a malformed status update on {subject}: {e}");
            return None;
        }
    };
    let parts = update.status.message.map(|m| m.parts).unwrap_or_default();
    let text: Vec<&str> = parts.iter().filter_map(Part::as_text).collect();
    let data = parts
        .iter()
        .find_map(Part::as_data)
        .map(|d| Value::Object(d.clone()))
        .filter(|d| serde_json::to_vec(d).is_ok_and(|b| b.len() <= PROGRESS_VALUE_MAX));
    if text.is_empty() && data.is_none() {
        return None;
    }
    let state = serde_json::to_value(update.status.state)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    Some(AgentUpdate {
        execution,
        task,
        attempt,
        sub_task_id: sub_task_id.to_string(),
        state,
        text: (!text.is_empty()).then(|| text.join("\n")),
        data,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Tells the run's callers of `update`, if its run still runs that call.
async fn forward(shared: &Arc<Shared>, workflow: &Workflow, update: AgentUpdate) -> Result<()> {
    let key = names::run_key(&workflow.name, &update.execution);
    let Some((_, record)) = runs::read_record(shared, &key).await? else {
        tracing::debug!("a status update for run {key}, which has no record, dropped");
        return Ok(());
    };
    let running = record.state.calls.get(&update.task).map(|c| c.attempt);
    if record.state.status.is_terminal() || running != Some(update.attempt) {
        tracing::debug!(
            "a status update of {} dropped: the call no longer runs",
            update.sub_task_id
        );
        return Ok(());
    }
    let part = Part::data_part(&WorkflowAgentStatus {
        workflow_name: workflow.name.clone(),
        execution_id: update.execution.0.clone(),
        node_id: update.task.node.clone(),
        sub_task_id: update.sub_task_id,
        state: update.state,
        text: update.text,
        data: update.data,
    });
    let callers = record.callers();
    let ctx = RunContext {
        shared,
        workflow,
        execution: &update.execution,
        callers: &callers,
    };
    ctx.tell_callers(vec![part]).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use messages::a2a::{Message, Role, TaskState, TaskStatus, TaskStatusUpdateEvent};
    use serde_json::json;

    fn update(parts: Option<Vec<Part>>) -> Vec<u8> {
        let mut status = TaskStatus::new(TaskState::Working);
        status.message = parts.map(|p| Message::new("m", Role::Agent, p));
        let event = TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status,
            is_final: false,
            metadata: None,
        };
        let r = Response::result("t".into(), AgentReply::StatusUpdate(event));
        serde_json::to_vec(&r).unwrap()
    }

    const SUBJECT: &str = "mesh.a2a.v1.agent.status.Wf.e1_check_x_2";

    #[test]
    fn an_update_with_a_message_names_its_run_and_call() {
        let bytes = update(Some(vec![
            Part::text("half way"),
            Part::data(json!({"p": 50}).as_object().unwrap().clone()),
        ]));
        let u = interpret(SUBJECT, &bytes).expect("forwarded");
        assert_eq!(u.execution.0, "e1");
        assert_eq!(u.task, TaskKey::single("check"));
        assert_eq!(u.attempt, 2);
        assert_eq!(u.state, "working");
        assert_eq!(u.text.as_deref(), Some("half way"));
        assert_eq!(u.data, Some(json!({"p": 50})));
    }

    #[test]
    fn heartbeats_and_garbage_are_dropped() {
        assert_eq!(interpret(SUBJECT, &update(None)), None, "a bare heartbeat");
        assert_eq!(interpret(SUBJECT, b"{\"parts\": nonsense"), None);
        let good = update(Some(vec![Part::text("x")]));
        assert_eq!(
            interpret("mesh.a2a.v1.agent.status.Wf.garbage", &good),
            None
        );
        assert_eq!(
            interpret("mesh.a2a.v1.agent.status.Wf.e1_a_q1_1", &good),
            None
        );
    }
}
