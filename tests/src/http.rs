//! Plain HTTP/1.1 requests to a process under test (its probes, say), without a client
//! library: what a kubelet or a load balancer sends.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr` (`Connection: close`): the status code (0 if the answer is not
/// HTTP) and the body. Panics if nothing listens there.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// Polls `/readyz` on `addr` until it answers `status` (the body then); fails the test
/// if it does not within `timeout`.
pub async fn readiness_becomes(addr: SocketAddr, status: u16, timeout: Duration) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (got, body) = get(addr, "/readyz").await;
        if got == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never answered {status} (last: {got} {body})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
