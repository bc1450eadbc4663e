//! One request and its final reply, resent while the callee is silent: the one exchange
//! under [`crate::Mesh`]'s calls and [`crate::workflow`]'s runs.
//!
//! NATS core delivers at most once, so a request (or its reply) can be lost while a server
//! restarts or a workflow replica dies before its stream stored the request. The caller
//! asks for status updates (`Mesh-Status-To`) and resends the same bytes (same task id,
//! same message id) when it hears nothing for [`Timing::resend_interval`]: no status update
//! within the interval after a send, or no final reply within the interval after the last
//! sign of life. A workflow starts one run per task id and an agent runs a task id once, so
//! resending is safe; the first final reply with the request's JSON-RPC id wins and later
//! copies are ignored.
//!
//! "No responders" ends the exchange only while the callee has never shown a sign of life:
//! once it has (a status update, such as a workflow's `submitted`), the request is known to
//! be taken, and no responders means every replica is restarting (a rolling upgrade, a
//! crash), so the caller goes on resending until the timeout.
//!
//! The timeout bounds the whole exchange, sends included: with the server gone, a flush
//! waits for a reconnect that may never come. A timeout while the client is not connected
//! is reported as [`ConnectionError::Lost`], not as a silent callee.

use std::time::Duration;

use async_nats::connection::State;
use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use messages::headers::STATUS_TO;
use messages::jsonrpc::{ErrorObject, Outcome, RequestId, Response};
use messages::{AgentReply, TaskStatusUpdateEvent};
use tokio::time::Instant;

use crate::error::{ConnectionError, MalformedReply};

/// How long a caller waits for a sign of life before resending, unless told otherwise.
pub const DEFAULT_RESEND_INTERVAL: Duration = Duration::from_secs(3);

/// How long to wait in all, and how long to wait for a sign of life before resending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The time from the call after which the caller gives up, sends included.
    pub timeout: Duration,
    /// Silence after which the request is sent again (at least 1 ms).
    pub resend_interval: Duration,
}

impl Timing {
    /// Gives up after `timeout`, resending after [`DEFAULT_RESEND_INTERVAL`] of silence.
    pub fn new(timeout: Duration) -> Self {
        Timing {
            timeout,
            resend_interval: DEFAULT_RESEND_INTERVAL,
        }
    }
}

impl From<Duration> for Timing {
    /// [`Timing::new`]: the default resend interval.
    fn from(timeout: Duration) -> Self {
        Timing::new(timeout)
    }
}

/// A request ready to go out (and out again).
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// The callee's request subject.
    pub(crate) subject: String,
    /// The JSON-RPC id in `body`: replies and status updates with another id are ignored.
    pub(crate) id: RequestId,
    /// Headers to send (trace context, call depth); `Mesh-Status-To` is added.
    pub(crate) headers: HeaderMap,
    /// The JSON-RPC request.
    pub(crate) body: Bytes,
    /// Who signs it (see [`crate::signing`]): signed again at every send, so a resend
    /// long after the first is not refused as stale.
    pub(crate) signer: Option<crate::signing::Signer>,
}

/// Why [`send_until_answered`] returned no final reply.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// Subscribing, publishing or flushing failed.
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// Nothing subscribes to the subject (the server answered "no responders").
    #[error("no responders")]
    NoResponders,
    /// No final reply within the timeout, after `sends` sends.
    #[error("no final reply after {sends} sends")]
    TimedOut {
        /// How often the request went out.
        sends: u32,
    },
    /// The callee answered with a JSON-RPC error: it refused or could not parse the
    /// request.
    #[error("JSON-RPC error {}: {}", .0.code, .0.message)]
    Refused(ErrorObject),
    /// The reply could not be read.
    #[error(transparent)]
    Malformed(#[from] MalformedReply),
}

/// Sends `request` and returns its final reply (a Task, or a bare Message), resending
/// while the callee is silent (see the module doc). `on_status` sees each status update
/// for the request, in order, including those queued before the final reply.
pub(crate) async fn send_until_answered(
    client: &Client,
    request: Outgoing,
    timing: Timing,
    on_status: impl FnMut(&TaskStatusUpdateEvent),
) -> Result<AgentReply, ExchangeError> {
    let mut sends = 0;
    let exchange = exchange(client, request, timing, on_status, &mut sends);
    match tokio::time::timeout(timing.timeout, exchange).await {
        Ok(result) => result,
        Err(_) if client.connection_state() != State::Connected => Err(ConnectionError::Lost {
            timeout: timing.timeout,
        }
        .into()),
        Err(_) => Err(ExchangeError::TimedOut { sends }),
    }
}

/// [`send_until_answered`] without the timeout; counts the sends in `sends`.
async fn exchange(
    client: &Client,
    request: Outgoing,
    timing: Timing,
    mut on_status: impl FnMut(&TaskStatusUpdateEvent),
    sends: &mut u32,
) -> Result<AgentReply, ExchangeError> {
    let reply_inbox = client.new_inbox();
    let status_inbox = client.new_inbox();
    let mut replies = client
        .subscribe(reply_inbox.clone())
        .await
        .map_err(ConnectionError::Subscribe)?;
    let mut statuses = client
        .subscribe(status_inbox.clone())
        .await
        .map_err(ConnectionError::Subscribe)?;
    let mut headers = request.headers.clone();
    headers.insert(STATUS_TO, status_inbox.as_str());
    let send = || async {
        let mut headers = headers.clone();
        if let Some(signer) = &request.signer {
            let now = std::time::SystemTime::now();
            signer.sign_into(
                &mut headers,
                &request.subject,
                Some(&reply_inbox),
                &request.body,
                now,
            );
        }
        client
            .publish_with_reply_and_headers(
                request.subject.clone(),
                reply_inbox.clone(),
                headers,
                request.body.clone(),
            )
            .await
            .map_err(ConnectionError::Publish)?;
        client.flush().await.map_err(ConnectionError::Flush)
    };
    let interval = timing.resend_interval.max(Duration::from_millis(1));
    *sends = 1;
    send().await?;
    let mut resend_at = Instant::now() + interval;
    // Whether the callee has answered anything yet: see the module doc.
    let mut heard = false;
    loop {
        tokio::select! {
            biased;
            Some(msg) = statuses.next() => {
                if let Some(update) = status_update(&msg.payload, &request.id) {
                    on_status(&update);
                    heard = true;
                    resend_at = Instant::now() + interval;
                }
            }
            Some(msg) = replies.next() => {
                if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                    if heard {
                        tracing::debug!(subject = %request.subject, id = %request.id, "no responders after the request was taken: resending later");
                        continue;
                    }
                    return Err(ExchangeError::NoResponders);
                }
                // Updates published before the reply are already queued: take them first.
                while let Some(Some(msg)) = statuses.next().now_or_never() {
                    if let Some(update) = status_update(&msg.payload, &request.id) {
                        on_status(&update);
                    }
                }
                let response: Response = serde_json::from_slice(&msg.payload)
                    .map_err(MalformedReply::NotJsonRpc)?;
                if response.id.as_ref().is_some_and(|id| *id != request.id) {
                    continue;
                }
                match response.outcome {
                    Outcome::Error(e) => return Err(ExchangeError::Refused(e)),
                    Outcome::Result(reply) => match *reply {
                        AgentReply::StatusUpdate(update) => {
                            on_status(&update);
                            heard = true;
                            resend_at = Instant::now() + interval;
                        }
                        reply => return Ok(reply),
                    },
                }
            }
            _ = tokio::time::sleep_until(resend_at) => {
                tracing::debug!(subject = %request.subject, id = %request.id, sends = *sends, "no sign of life: resending");
                *sends += 1;
                send().await?;
                resend_at = Instant::now() + interval;
            }
        }
    }
}

/// The status update in a message on the status inbox, when it is one for request `id`.
fn status_update(payload: &[u8], id: &RequestId) -> Option<TaskStatusUpdateEvent> {
    let response: Response = serde_json::from_slice(payload).ok()?;
    if response.id.as_ref().is_some_and(|i| i != id) {
        return None;
    }
    match response.outcome {
        Outcome::Result(reply) => match *reply {
            AgentReply::StatusUpdate(update) => Some(update),
            _ => None,
        },
        Outcome::Error(_) => None,
    }
}
