//! Sending a signal to a run's wait nodes (`workflow_signal`), for every face: the CLI's
//! `runs signal`, the web view's form, the A2A door. The run is named (a run found in the
//! runs bucket, whose record is checked first: one that ended is refused here) or found by
//! the key a wait node's `correlation` gave it (the workflow's nodes find it). The nodes
//! check the rest and answer with a JSON-RPC error whose code keeps the refusal's kind.

use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::signal::WorkflowSignal;
use serde_json::Value;

use crate::shell::FoundRun;

use super::ask::{ask, completed};
use super::refusal::{Refusal, RefusalKind};
use super::runs::Runs;

/// Which run a signal goes to.
#[derive(Debug, Clone, Copy)]
pub enum To<'a> {
    /// A run found by its id.
    Run(&'a FoundRun),
    /// The run of `workflow` whose wait node for the signal waits under `key`.
    Key {
        /// The workflow.
        workflow: &'a str,
        /// The key its wait node's `correlation` resolved to.
        key: &'a str,
    },
}

/// A signal to send.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// Its name (a wait node's `signal`).
    pub name: String,
    /// Its payload.
    pub data: Value,
    /// The sender's id for it: sent twice, it is applied once. `None`: the node makes one.
    pub signal_id: Option<String>,
    /// Who sends it (checked against the signing key when the node lists signers).
    pub by: Option<String>,
}

/// The `message/send` (message id `id`) carrying `signal` to `to`.
pub fn signal_request(id: &str, to: To<'_>, signal: &Outgoing) -> Request {
    let (execution_id, key) = match to {
        To::Run(run) => (Some(run.execution.0.clone()), None),
        To::Key { key, .. } => (None, Some(key.to_owned())),
    };
    let part = WorkflowSignal {
        execution_id,
        key,
        signal: signal.name.clone(),
        data: signal.data.clone(),
        signal_id: signal.signal_id.clone(),
        by: signal.by.clone(),
    };
    let message = Message::new(id.to_owned(), Role::User, vec![Part::data_part(&part)]);
    Request::message_send(id, message)
}

/// Sends `signal` to `to`, signed by `signer`: the node's answer (delivered, or kept until
/// the node waits), or why not.
pub async fn send(
    runs: &Runs,
    to: To<'_>,
    signal: &Outgoing,
    signer: Option<&agent_sdk::Signer>,
) -> Result<String, Refusal> {
    let workflow = match to {
        To::Run(run) => {
            let status = run.record.state.status;
            if status.is_terminal() {
                return Err(Refusal::conflict(format!(
                    "run {} already ended ({}): signal '{}' is not delivered",
                    run.execution,
                    status.as_str(),
                    signal.name
                )));
            }
            run.workflow.as_str()
        }
        To::Key { workflow, .. } => workflow,
    };
    let id = format!("signal-{}", uuid::Uuid::new_v4().simple());
    let request = signal_request(&id, to, signal);
    let answer = ask(runs.client(), runs.namespace(), workflow, &request, signer).await?;
    completed(answer, RefusalKind::Failed, || {
        format!("{workflow} sent an answer that is not a task")
    })
}

/// A wait node waiting for a signal, as every face shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Waiting {
    /// The wait node.
    pub node: String,
    /// The signal it waits for.
    pub signal: String,
    /// The key a signal sent by key finds the run by, if the node has a `correlation`.
    pub key: Option<String>,
    /// Since when it waits (RFC 3339).
    pub since: String,
    /// When it times out (RFC 3339), if it has a timeout.
    pub deadline: Option<String>,
}

/// The wait nodes of `state` waiting for a signal, in node order.
pub fn waiting(state: &crate::core::Execution) -> Vec<Waiting> {
    state
        .nodes
        .iter()
        .filter(|(_, n)| n.status == crate::core::NodeStatus::Waiting)
        .filter_map(|(id, n)| match &n.detail {
            Some(crate::core::Detail::Wait(w)) => Some(Waiting {
                node: id.clone(),
                signal: w.signal.clone(),
                key: w.key.clone(),
                since: w.since.rfc3339(),
                deadline: w.deadline.map(|d| d.rfc3339()),
            }),
            _ => None,
        })
        .collect()
}

impl Waiting {
    /// One line for people: `w waits for signal 'paid' (key o-1) since …, until …`.
    pub fn line(&self) -> String {
        let key = self
            .key
            .as_deref()
            .map(|k| format!(" (key {k})"))
            .unwrap_or_default();
        let until = self
            .deadline
            .as_deref()
            .map(|d| format!(", until {d}"))
            .unwrap_or_default();
        format!(
            "{} waits for signal '{}'{key} since {}{until}",
            self.node, self.signal, self.since
        )
    }
}
