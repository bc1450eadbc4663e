//! Calling a workflow or an agent of the live catalog by name, as the doors to the mesh (A2A
//! over HTTP, MCP) do: a card names a callee, [`send`] carries a caller's `message/send`
//! onto the mesh unchanged (through the one exchange of `agent_sdk`, resent while the
//! callee is silent, signed by the door's key) with each status update seen on the way,
//! and [`get`] and [`cancel_agent`] ask after a task. A workflow's run is followed with
//! [`super::follow`] and cancelled with [`super::steer`], as every face does.

use agent_sdk::workflow::{self, InvokeError};
use agent_sdk::Timing;
use messages::card::AgentCard;
use messages::jsonrpc::{ErrorObject, Outcome, Request};
use messages::{AgentReply, Task, TaskStatusUpdateEvent};

use super::ask::ask;
use super::refusal::{Refusal, RefusalKind};

/// What a card of the catalog names: a workflow (its runs are kept and can be followed) or
/// an agent (its tasks live only with the replica running them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callee {
    /// A workflow, by name.
    Workflow(String),
    /// An agent, by name.
    Agent(String),
}

impl Callee {
    /// The callee `card` describes.
    pub fn of(card: &AgentCard) -> Callee {
        if card.is_workflow() {
            Callee::Workflow(card.name.clone())
        } else {
            Callee::Agent(card.name.clone())
        }
    }

    /// Its name on the mesh.
    pub fn name(&self) -> &str {
        match self {
            Callee::Workflow(n) | Callee::Agent(n) => n,
        }
    }

    /// Whether it is a workflow.
    pub fn is_workflow(&self) -> bool {
        matches!(self, Callee::Workflow(_))
    }
}

/// Sends `request` (a `message/send`) to `name`, signed by `signer`, within `timing`;
/// `on_status` sees each status update. The final reply, or why there is none.
pub async fn send(
    client: &async_nats::Client,
    ns: &str,
    name: &str,
    request: &Request,
    signer: Option<agent_sdk::Signer>,
    timing: Timing,
    on_status: impl FnMut(&TaskStatusUpdateEvent),
) -> Result<AgentReply, Refusal> {
    workflow::relay(client, ns, name, request, signer, timing, on_status)
        .await
        .map_err(|e| refusal_of(&e))
}

/// An exchange's failure as an operation's refusal, keeping a node's JSON-RPC code.
fn refusal_of(e: &InvokeError) -> Refusal {
    match e {
        InvokeError::NoResponders { .. } => Refusal::new(RefusalKind::NoResponder, e.to_string()),
        InvokeError::Refused { code, message, .. } => {
            Refusal::from_node(&ErrorObject::new(*code, message.clone()))
        }
        InvokeError::TimedOut { .. } | InvokeError::Connection { .. } => {
            Refusal::unavailable(e.to_string())
        }
        _ => Refusal::failed(e.to_string()),
    }
}

/// The task `task_id` of `name` as its workflow node or agent reports it (`tasks/get`),
/// asked with `signer`'s signature (a run started signed is read only so).
pub async fn get(
    client: &async_nats::Client,
    ns: &str,
    name: &str,
    task_id: &str,
    signer: Option<&agent_sdk::Signer>,
) -> Result<Task, Refusal> {
    let request = Request::tasks_get(task_id, task_id);
    task_of(ask(client, ns, name, &request, signer).await?, name)
}

/// Asks agent `name` to cancel its task `task_id`, signed by `signer`: the task as it
/// answers.
pub async fn cancel_agent(
    client: &async_nats::Client,
    ns: &str,
    name: &str,
    task_id: &str,
    signer: Option<&agent_sdk::Signer>,
) -> Result<Task, Refusal> {
    let request = Request::tasks_cancel(task_id, task_id);
    task_of(ask(client, ns, name, &request, signer).await?, name)
}

/// The Task an answer carries; a JSON-RPC error is a refusal with the node's code.
fn task_of(outcome: Outcome, name: &str) -> Result<Task, Refusal> {
    match outcome {
        Outcome::Error(e) => Err(Refusal::from_node(&e)),
        Outcome::Result(r) => match *r {
            AgentReply::Task(t) => Ok(t),
            _ => Err(Refusal::failed(format!("{name} answered with no task"))),
        },
    }
}
