//! Webhook deliveries forwarded over NATS: an HTTP door (`serve --http`, `ui`) takes
//! `POST /hooks/{name}` and sends the raw body, with the HTTP headers it forwards, as a
//! request on [`crate::subjects::hook`]; a workflow node that declares the hook checks
//! its signature, starts the run and answers a [`HookAnswer`], which the door turns into
//! the HTTP answer. The door holds no secret: only the node that declares the hook can
//! tell an authentic delivery.

use serde::{Deserialize, Serialize};

/// The largest body a delivery may have, in bytes (GitHub caps its payloads at 25 MB, but
/// what a workflow starts from fits well under this; a larger delivery is answered 413).
pub const MAX_BODY: usize = 256 * 1024;

/// The most headers forwarded with a delivery.
pub const MAX_HEADERS: usize = 64;

/// The longest header value forwarded, in bytes.
pub const MAX_HEADER_VALUE: usize = 1024;

/// Headers a door never forwards: the view's own credentials.
pub const NOT_FORWARDED: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// What a node answers to a delivery: the HTTP status the door answers, and the run or
/// the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookAnswer {
    /// 202 (run started), 200 (a duplicate delivery, or the condition is false), 400, 401,
    /// 413, 415 or 422.
    pub status: u16,
    /// The workflow the hook belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The run's execution id (202 and duplicate 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// With 200: whether the delivery was a duplicate of one that started `run_id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// What is wrong (every status but 202 and a duplicate's 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl HookAnswer {
    /// A refusal with `status` and why.
    pub fn refused(status: u16, error: impl Into<String>) -> HookAnswer {
        HookAnswer {
            status,
            workflow: None,
            run_id: None,
            duplicate: false,
            error: Some(error.into()),
        }
    }
}
