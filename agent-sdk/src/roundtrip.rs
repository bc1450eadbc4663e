//! Waiting until the server has taken everything a client sent.
//!
//! `Client::flush` only writes the client's buffer to the socket: it does not wait for the
//! server. A subscription made and flushed on one connection can still be unknown to the
//! server when another connection publishes a moment later, which then meets "no
//! responders" (seen in about a quarter of tries on one machine). A server handles each
//! connection's messages in order, so once a message this client sends to itself comes
//! back, everything sent before it, subscriptions included, has been taken.

use std::time::Duration;

use async_nats::Client;
use futures::StreamExt;

/// How long [`roundtrip`] waits for its message to come back.
pub const ROUNDTRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why [`roundtrip`] could not confirm that the server has taken what was sent.
#[derive(Debug, thiserror::Error)]
pub enum RoundtripError {
    /// The inbox for the message could not be subscribed to.
    #[error("subscribing to an inbox")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// The message could not be published.
    #[error("publishing to the server")]
    Publish(#[source] async_nats::PublishError),
    /// The message did not come back within [`ROUNDTRIP_TIMEOUT`].
    #[error("the server did not answer within {} s", ROUNDTRIP_TIMEOUT.as_secs())]
    TimedOut,
}

/// Returns once the server has taken every message and subscription `client` sent
/// before the call (see the module doc).
pub async fn roundtrip(client: &Client) -> Result<(), RoundtripError> {
    let inbox = client.new_inbox();
    let mut echo = client
        .subscribe(inbox.clone())
        .await
        .map_err(RoundtripError::Subscribe)?;
    client
        .publish(inbox, bytes::Bytes::new())
        .await
        .map_err(RoundtripError::Publish)?;
    match tokio::time::timeout(ROUNDTRIP_TIMEOUT, echo.next()).await {
        Ok(Some(_)) => Ok(()),
        _ => Err(RoundtripError::TimedOut),
    }
}
