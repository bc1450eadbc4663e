//! Plain HTTP/1.1 to a process under test, without a client library: probes as a kubelet
//! or a load balancer sends them, the web view's API as a script or a browser sees it, and
//! a reader of server-sent events. One client for every test that speaks HTTP.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long a test waits for anything.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// An answer: status, headers (names lower-cased) and body.
#[derive(Debug)]
pub struct Answer {
    /// The status code (0 when the answer was not HTTP).
    pub status: u16,
    /// The headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: String,
}

impl Answer {
    /// The body as JSON; fails the test if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` with `body` (JSON when given) and reads the whole answer.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Answer {
    let mut conn = TcpStream::connect(addr).await.expect("connecting");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).await.expect("request");
    conn.write_all(body.as_bytes()).await.expect("body");
    // Read to the end of the answer: its Content-Length, else the connection's end (some
    // servers, chromedriver among them, keep the connection open despite `close`).
    let read = async {
        let mut raw = Vec::new();
        let mut buf = [0u8; 16384];
        loop {
            if let Some(at) = find(&raw, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..at]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if length.is_some_and(|n| raw.len() >= at + 4 + n) {
                    return raw;
                }
            }
            let n = conn.read(&mut buf).await.expect("an answer");
            if n == 0 {
                return raw;
            }
            raw.extend_from_slice(&buf[..n]);
        }
    };
    let raw = tokio::time::timeout(TIMEOUT, read)
        .await
        .expect("an answer in time");
    let raw = String::from_utf8(raw).expect("UTF-8");
    // Not HTTP (a connection closed before an answer): status 0, as a probe counts it.
    let Some((head, body)) = raw.split_once("\r\n\r\n") else {
        return Answer {
            status: 0,
            headers: Vec::new(),
            body: String::new(),
        };
    };
    let (status, headers) = parse_head(head);
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `GET path`.
pub async fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, None, &[]).await
}

/// Waits until the A2A door at `addr` serves the card of `name` (the door learns the
/// mesh's cards as they are announced), for at most [`TIMEOUT`].
pub async fn card_seen(addr: SocketAddr, name: &str) {
    let path = format!("/a2a/{name}/.well-known/agent-card.json");
    let give_up = tokio::time::Instant::now() + TIMEOUT;
    while get(addr, &path).await.status != 200 {
        assert!(tokio::time::Instant::now() < give_up, "no card of {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `POST path` with a JSON body.
pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Answer {
    request(addr, "POST", path, Some(&body.to_string()), &[]).await
}

fn parse_head(head: &str) -> (u16, Vec<(String, String)>) {
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Sse {
    /// Its `event:` name.
    pub event: String,
    /// Its data, as JSON.
    pub data: Value,
}

/// A stream of server-sent events being read.
pub struct Events {
    conn: BufReader<TcpStream>,
    pending: String,
    /// The status of the answer that opened the stream.
    pub status: u16,
    /// Its content type.
    pub content_type: String,
}

impl Events {
    /// Opens `GET path` as an event stream.
    pub async fn open(addr: SocketAddr, path: &str) -> Events {
        let mut conn = TcpStream::connect(addr).await.expect("connecting");
        let head =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
        conn.write_all(head.as_bytes()).await.expect("request");
        let mut conn = BufReader::new(conn);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            conn.read_line(&mut line).await.expect("a header line");
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let (status, headers) = parse_head(&head);
        let content_type = headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        Events {
            conn,
            pending: String::new(),
            status,
            content_type,
        }
    }

    /// The next event (comments and keep-alives skipped); `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(at) = self.pending.find("\n\n") {
                let frame: String = self.pending.drain(..at + 2).collect();
                let mut event = String::from("message");
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(e) = line.strip_prefix("event:") {
                        event = e.trim().to_string();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.strip_prefix(' ').unwrap_or(d));
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {data}"));
                return Some(Sse { event, data });
            }
            // A chunk: its size line, its bytes, CRLF.
            let mut size = String::new();
            let read = tokio::time::timeout(TIMEOUT, self.conn.read_line(&mut size))
                .await
                .expect("an event in time")
                .expect("reading the stream");
            if read == 0 {
                return None;
            }
            let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
            if size == 0 {
                return None;
            }
            let mut chunk = vec![0; size + 2];
            self.conn.read_exact(&mut chunk).await.expect("a chunk");
            chunk.truncate(size);
            self.pending
                .push_str(&String::from_utf8(chunk).expect("UTF-8 events"));
        }
    }

    /// Reads events until one satisfies `want`, which it returns; fails the test if the
    /// stream ends first.
    pub async fn until(&mut self, what: &str, want: impl Fn(&Sse) -> bool) -> Sse {
        let wait = async {
            while let Some(e) = self.next().await {
                if want(&e) {
                    return e;
                }
                eprintln!("passed over: {} {}", e.event, e.data);
            }
            panic!("the event stream ended before {what}");
        };
        tokio::time::timeout(TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| panic!("no event within {TIMEOUT:?} showed {what}"))
    }
}

/// Polls `/readyz` on `addr` until it answers `status` (the body then); fails the test
/// if it does not within `timeout`.
pub async fn readiness_becomes(addr: SocketAddr, status: u16, timeout: Duration) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let answer = get(addr, "/readyz").await;
        if answer.status == status {
            return answer.body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never answered {status} (last: {} {})",
            answer.status,
            answer.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
