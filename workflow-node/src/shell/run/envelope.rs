//! What travels in a workflow's event stream: the core event, and what the shell needs
//! beside it (the caller of a start, a pinned definition, the wake that fired). Plain
//! serde data: the stream's bytes are this, and replaying them must give the same run.

use serde::{Deserialize, Serialize};

use crate::core::Event;
use crate::shell::run::record::Caller;
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
