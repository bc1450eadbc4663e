//! Sending a signal to a workflow run's `wait` node (`workflow_signal`, see
//! `docs/protocol.md`): data for a run that waits for it, named by the run or by the key
//! its wait node's `correlation` gave it. The workflow answers at once: the text of a
//! completed task when the run recorded the signal (delivered, or kept until the node
//! waits), a JSON-RPC error saying why not.

use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::{Outcome, Request, Response};
use messages::signal::WorkflowSignal;
use messages::{headers, subjects, AgentReply, TaskState};
use serde_json::Value;

use crate::Signer;

/// Which run a signal goes to.
#[derive(Debug, Clone, Copy)]
pub enum SignalTo<'a> {
    /// The run: its execution id, or the task id its caller started it with (then give
    /// the caller's name, if it sent one).
    Run {
        /// The execution id or task id.
        id: &'a str,
        /// The caller name (`Mesh-Caller`) a task id was started with.
        caller: Option<&'a str>,
    },
    /// The run whose wait node for this signal waits under `key`.
    Key(&'a str),
}

/// Why a signal was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// The request could not be sent, or had no answer in time.
    #[error("sending signal to {workflow}")]
    Request {
        /// The workflow asked.
        workflow: String,
        /// What went wrong.
        #[source]
        source: async_nats::RequestError,
    },
    /// The workflow refused it; `code` is its JSON-RPC code (`-32001` no such run or key,
    /// `-32602` a malformed signal or a payload the schema refuses, `-32010` the sender
    /// may not, `-32011` the run ended or keeps too many signals).
    #[error("{workflow} refused the signal: {message}")]
    Refused {
        /// The workflow asked.
        workflow: String,
        /// The JSON-RPC error code.
        code: i64,
        /// Why.
        message: String,
    },
    /// The answer could not be read.
    #[error("{workflow} sent an answer that cannot be read: {detail}")]
    Malformed {
        /// The workflow asked.
        workflow: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// A signal to send.
#[derive(Debug, Clone)]
pub struct Signal<'a> {
    /// Its name: a wait node's `signal`.
    pub name: &'a str,
    /// The payload, checked against the wait node's `schema`.
    pub data: Value,
    /// The sender's id for it: the same id sent twice is applied once. `None`: the
    /// workflow makes one (and a signal sent again is a new one).
    pub id: Option<&'a str>,
}

/// Sends `signal` to a run of `workflow` (`to`), signed by `signer` when given: the
/// workflow's answer text.
pub async fn signal(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    to: SignalTo<'_>,
    signal: Signal<'_>,
    signer: Option<&Signer>,
) -> Result<String, SignalError> {
    let (execution_id, key, caller) = match to {
        SignalTo::Run { id, caller } => (Some(id.to_owned()), None, caller),
        SignalTo::Key(k) => (None, Some(k.to_owned()), None),
    };
    let part = WorkflowSignal {
        execution_id,
        key,
        signal: signal.name.to_owned(),
        data: signal.data,
        signal_id: signal.id.map(str::to_owned),
        by: None,
    };
    let id = format!("signal-{}", uuid::Uuid::new_v4().simple());
    let message = Message::new(id.clone(), Role::User, vec![Part::data_part(&part)]);
    let request = Request::message_send(id.as_str(), message);
    let body = serde_json::to_vec(&request).expect("a message/send serialises to JSON");
    let mut h = async_nats::HeaderMap::new();
    if let Some(caller) = caller {
        h.insert(headers::CALLER, caller);
    }
    let subject = subjects::agent_request(ns, workflow);
    let reply = crate::signing::request(client, subject, h, body.into(), signer)
        .await
        .map_err(|source| SignalError::Request {
            workflow: workflow.to_owned(),
            source,
        })?;
    let malformed = |detail: String| SignalError::Malformed {
        workflow: workflow.to_owned(),
        detail,
    };
    let response: Response =
        serde_json::from_slice(&reply.payload).map_err(|e| malformed(e.to_string()))?;
    let task = match response.outcome {
        Outcome::Error(e) => {
            return Err(SignalError::Refused {
                workflow: workflow.to_owned(),
                code: e.code,
                message: e.message,
            })
        }
        Outcome::Result(r) => match *r {
            AgentReply::Task(t) => t,
            _ => return Err(malformed("not a task".into())),
        },
    };
    let text: Vec<&str> = task
        .status
        .message
        .as_ref()
        .map(|m| m.parts.iter().filter_map(Part::as_text).collect())
        .unwrap_or_default();
    if task.status.state != TaskState::Completed {
        return Err(malformed(format!("a {:?} task", task.status.state)));
    }
    Ok(text.join("\n"))
}
