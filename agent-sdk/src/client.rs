//! Calling agents and workflows (a workflow is called exactly like an agent): a
//! `message/send` with the input, resent while the callee is silent (see [`crate::exchange`]),
//! that returns the output or a [`CallError`].

use std::time::Duration;

use async_nats::{Client, HeaderMap};
use serde_json::Value;

use crate::error::CallError;
use crate::exchange::{ExchangeError, DEFAULT_RESEND_INTERVAL};
use crate::payload::DEFAULT_ARTIFACT_THRESHOLD;

/// Options of [`call_agent_with`].
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// How long to wait for the final reply, from the first send.
    pub timeout: Duration,
    /// Silence after which the request is sent again, with the same task id (default
    /// [`DEFAULT_RESEND_INTERVAL`]; see [`crate::exchange`]).
    pub resend_interval: Duration,
    /// An instruction sent as a TextPart before the input.
    pub instruction: Option<String>,
    /// Extra headers (trace context, call depth: see
    /// [`crate::NodeRequest::onward_headers`]). When traces are exported, the current
    /// span's context replaces a `traceparent` here (see [`crate::telemetry`]).
    pub headers: HeaderMap,
    /// Inputs whose JSON is larger go through the object store.
    pub artifact_threshold: usize,
    /// The calling agent's name, sent as `Mesh-Caller`: a workflow scopes task ids by it
    /// (see `messages::headers::CALLER`). Overrides a `Mesh-Caller` in `headers`.
    pub caller: Option<String>,
    /// Who signs the request (and its cancel): a workflow then lets only this key (or an
    /// operator) cancel the run. See [`crate::signing`].
    pub signer: Option<crate::signing::Signer>,
}

impl CallOptions {
    /// Default options with `timeout`.
    pub fn new(timeout: Duration) -> Self {
        CallOptions {
            timeout,
            resend_interval: DEFAULT_RESEND_INTERVAL,
            instruction: None,
            headers: HeaderMap::new(),
            artifact_threshold: DEFAULT_ARTIFACT_THRESHOLD,
            caller: None,
            signer: None,
        }
    }

    /// These options, calling as agent `name` (the `Mesh-Caller` header).
    pub fn with_caller(mut self, name: impl Into<String>) -> Self {
        self.caller = Some(name.into());
        self
    }

    /// These options, with requests signed by `signer`.
    pub fn with_signer(mut self, signer: crate::signing::Signer) -> Self {
        self.signer = Some(signer);
        self
    }
}

/// Calls `agent` (or a workflow) in namespace `ns` with `input` and waits up to `timeout`
/// for its output.
pub async fn call_agent(
    client: &Client,
    ns: &str,
    agent: &str,
    input: Value,
    timeout: Duration,
) -> Result<Value, CallError> {
    call_agent_with(client, ns, agent, input, CallOptions::new(timeout)).await
}

/// [`call_agent`] with options. (A thin wrapper: [`crate::Mesh::agent`] does the same with
/// builders, progress and cancel.)
pub async fn call_agent_with(
    client: &Client,
    ns: &str,
    agent: &str,
    input: Value,
    options: CallOptions,
) -> Result<Value, CallError> {
    crate::mesh::call_in_place(client, ns, agent, input, options).await
}

/// The [`CallError`] of a failed exchange with `agent`.
pub(crate) fn call_error(agent: &str, e: ExchangeError) -> CallError {
    let agent = agent.to_owned();
    match e {
        ExchangeError::Connection(source) => CallError::Connection { agent, source },
        ExchangeError::NoResponders => CallError::NoResponders(agent),
        ExchangeError::TimedOut { sends } => CallError::TimedOut { agent, sends },
        ExchangeError::Refused(e) => CallError::Rpc {
            agent,
            code: e.code,
            message: e.message,
        },
        ExchangeError::Malformed(source) => CallError::InvalidReply { agent, source },
    }
}
