//! `workflow_signal` (ours): data sent into a running run, for its `wait` nodes. It travels
//! in a `message/send` to the workflow's request subject, as a steering request does, and
//! is answered at once: a completed task when the run recorded it (delivered to the node
//! waiting, or kept until one waits), a failed one saying why not (unknown run or key, run
//! ended, no wait node for it, payload refused by the node's schema, sender not allowed,
//! too many kept).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::a2a::DataPartType;

/// The longest `signal_id` accepted (bytes).
pub const MAX_SIGNAL_ID: usize = 128;

/// The longest correlation key accepted (bytes).
pub const MAX_SIGNAL_KEY: usize = 256;

/// `workflow_signal`: a named signal with a payload, for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "workflow_signal")]
pub struct WorkflowSignal {
    /// The run: its execution id, or the task id its caller started it with (under the
    /// request's `Mesh-Caller`). Exactly one of this and `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// The key a wait node's `correlation` resolved to: the run waiting for this signal
    /// under this key. Exactly one of this and `execution_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The signal's name (a wait node's `signal`).
    pub signal: String,
    /// The payload, checked against the wait node's `schema`.
    #[serde(default)]
    pub data: Value,
    /// The sender's id for this signal (letters, digits, `_` and `-`, at most
    /// [`MAX_SIGNAL_ID`]): the same id sent twice is applied once. Absent: the node makes
    /// one, and a signal sent again is a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_id: Option<String>,
    /// Who sends it, when the node lists `signers`: must name the key that signed the
    /// request (or be absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl DataPartType for WorkflowSignal {
    const TYPE: &'static str = "workflow_signal";
}

/// Whether `id` is a valid `signal_id`.
pub fn valid_signal_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SIGNAL_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}
