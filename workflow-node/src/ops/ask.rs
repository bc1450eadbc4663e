//! One request to the nodes serving a workflow, and its answer read as an operation's
//! outcome: a JSON-RPC error becomes a refusal that keeps the node's code, no responder
//! becomes [`RefusalKind::NoResponder`], a failed task becomes the refusal the caller
//! names (the node sends no code with it: what the operation checked before asking tells
//! what is left).

use messages::a2a::TaskState;
use messages::jsonrpc::{Outcome, Request, Response};
use messages::{subjects, AgentReply};

use super::refusal::{Refusal, RefusalKind};

/// Sends `request` to the nodes serving `workflow`, signed by `signer` if given, and reads
/// the answer.
pub async fn ask(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    request: &Request,
    signer: Option<&agent_sdk::Signer>,
) -> Result<Outcome, Refusal> {
    let body = serde_json::to_vec(request)
        .map_err(|e| Refusal::failed(format!("encoding the request: {e}")))?;
    let subject = subjects::agent_request(ns, workflow);
    let headers = async_nats::HeaderMap::new();
    let reply =
        match agent_sdk::signing::request(client, subject, headers, body.into(), signer).await {
            Ok(r) => r,
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                return Err(Refusal::new(
                    RefusalKind::NoResponder,
                    format!(
                    "no workflow node serves {workflow} in namespace '{ns}' now: nothing was sent"
                ),
                ))
            }
            Err(e) => return Err(Refusal::unavailable(format!("asking {workflow}: {e}"))),
        };
    let response: Response = serde_json::from_slice(&reply.payload).map_err(|e| {
        Refusal::failed(format!(
            "{workflow} sent an answer that cannot be read: {e}"
        ))
    })?;
    Ok(response.outcome)
}

/// The text of a task answer the node completed; a failed one is a refusal of kind
/// `failed_as`, a JSON-RPC error one that keeps the node's code. `not_task` words an
/// answer that is not a task.
pub fn completed(
    outcome: Outcome,
    failed_as: RefusalKind,
    not_task: impl FnOnce() -> String,
) -> Result<String, Refusal> {
    match outcome {
        Outcome::Error(e) => Err(Refusal::from_node(&e)),
        Outcome::Result(r) => match *r {
            AgentReply::Task(t) => {
                let text = task_text(&t).unwrap_or_default();
                if t.status.state == TaskState::Completed {
                    Ok(text)
                } else {
                    Err(Refusal::new(failed_as, text))
                }
            }
            _ => Err(Refusal::failed(not_task())),
        },
    }
}

/// The text parts of a task's status message, joined.
pub fn task_text(task: &messages::Task) -> Option<String> {
    let parts = &task.status.message.as_ref()?.parts;
    let text: Vec<&str> = parts.iter().filter_map(messages::Part::as_text).collect();
    (!text.is_empty()).then(|| text.join("\n"))
}
