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

use crate::error::RoundtripError;

/// How long [`roundtrip`] waits for its message to come back.
pub(crate) const ROUNDTRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// Returns once the server has taken every message and subscription `client` sent
/// before the call (see the module doc).
pub(crate) async fn roundtrip(client: &Client) -> Result<(), RoundtripError> {
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
