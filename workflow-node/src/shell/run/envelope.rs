//! What travels in a workflow's event stream: the core event, and what the shell needs
//! beside it (the caller of a start, a pinned definition, the wake that fired). Plain
//! serde data: the stream's bytes are this, and replaying them must give the same run.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::Event;
use crate::shell::run::wake;

/// An event as it travels in a workflow's stream: the core event, and for a start, who
/// asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// The core event, applied to the run named by the subject the envelope was published
    /// on (`{ns}.wf.{workflow}.events.{execution}`).
    pub event: Event,
    /// The caller (on `Started`); on a `CancelRequested` sent for a run not found yet,
    /// its sender (see `identity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Caller>,
    /// A `Started` sent again by a caller: it joins the run (or, if the run has ended, is
    /// answered from its record) instead of starting one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attach: bool,
    /// On a start: the content hash of the definition the run is to use (the one the
    /// replica that took the request serves, or the version the caller pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// On a `TimerFired` published by a run's wake entry: that wake. The run's worker then
    /// fires every pending timer due by it (see `wake`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<wake::Wake>,
}

impl Envelope {
    /// An event that carries no caller.
    pub fn event(event: Event) -> Envelope {
        Envelope {
            event,
            caller: None,
            attach: false,
            definition: None,
            wake: None,
        }
    }
}

/// Who started a run and where its answers go.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Caller {
    /// Where the final reply goes (the request's reply subject).
    pub reply_to: Option<String>,
    /// Where status updates go (`Mesh-Status-To`).
    pub status_to: Option<String>,
    /// The JSON-RPC id of the request, echoed in every answer.
    pub request_id: Value,
    /// The request message's A2A `contextId`, echoed in status updates and replies;
    /// `None` when the request had none, and then the execution id stands in.
    pub context_id: Option<String>,
    /// The call depth of the request (`Mesh-Call-Depth`).
    pub call_depth: u32,
    /// W3C trace context, passed on to agents.
    pub traceparent: Option<String>,
    /// Whether the caller is a workflow (it wants a `workflow_node_result`).
    pub workflow_caller: bool,
    /// The caller's sub-task id, when the caller is a workflow (dedupes our reply).
    pub sub_task_id: Option<String>,
    /// Whether it joined a run already started (a resent request from another reply
    /// address): it gets a final-reply claim of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attached: bool,
    /// The caller's name (`Mesh-Caller`), when the request carried one: shown by
    /// `workflow-node runs`, and the scope of the run's task id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The NKey user public key that signed the request (see `agent_sdk::signing`), when
    /// it was signed: only that key (or an operator) may then cancel the run. On a cancel
    /// kept for a run not started yet, the key that signed the cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// The call token the request carried (`Mesh-Call-Token`), wrapped under the deployment
    /// secret (see `seal`): readers of the runs bucket and the event stream never learn it,
    /// and any replica proves the run's answers to this caller with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_token: Option<String>,
    /// Who holds the call token, without revealing it (an HMAC of it under the deployment
    /// secret, see `seal`): on a run a calling workflow started, and on a cancel kept for a
    /// run not started yet, so that the kept cancel ends the run only if it came with the
    /// same token (the sub-task id that names the run is no secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// The run's priority under its workflow's flow control, when the request's
    /// `metadata.priority` gave one (1 first to 5 last); the workflow's `priority` else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
}
