//! A scripted OpenAI-compatible chat-completions server for tests of LLM agents: real HTTP
//! on a loopback port, the real wire format (a `chat.completion` JSON body, or server-sent
//! events of `chat.completion.chunk`s ending with `data: [DONE]`, tool calls, usage), and
//! the ways providers fail (429 with `Retry-After`, 5xx, bodies that are not JSON, streams
//! that stall or break).
//!
//! Each test scripts the answers in order ([`Provider::push`]); a request with nothing left
//! in the script gets a 500 saying so, so a test that sends more than it expected fails
//! loudly. Every request is recorded ([`Provider::requests`]) with its headers and body, so
//! a test can assert on what was sent — and that a key appears only in `Authorization`.
//!
//! Waiting is bounded and wakes on each event (no polling sleeps): [`Provider::wait_requests`]
//! and [`Provider::wait_aborted`] (a client that dropped a stream before its end, as a
//! cancelled call must).
//!
//! ```no_run
//! # async fn f() {
//! use test_harness::openai::{Provider, Reply};
//! let provider = Provider::start().await;
//! provider.push(Reply::text("hello"));
//! // base_url = provider.base_url() for the agent under test ...
//! let sent = provider.wait_requests(1).await;
//! assert_eq!(sent[0].body["model"], "test-model");
//! # }
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Notify};

/// How long a test waits for the provider to see something.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A whole answer: status, extra headers and a JSON body.
    Json {
        /// The HTTP status.
        status: u16,
        /// Extra headers (`Retry-After`, ...).
        headers: Vec<(String, String)>,
        /// The body.
        body: Value,
    },
    /// A whole answer with any content type and body (a proxy's HTML error page, ...).
    Raw {
        /// The HTTP status.
        status: u16,
        /// Its `Content-Type`.
        content_type: String,
        /// The body, as sent.
        body: String,
    },
    /// A `200 text/event-stream` answer, written piece by piece.
    Stream(Vec<Piece>),
}

/// One piece of a streamed answer.
#[derive(Debug, Clone)]
pub enum Piece {
    /// An event `data: {json}` followed by a blank line.
    Event(Value),
    /// Bytes as they are (`data: [DONE]\n\n`, a comment, a broken line).
    Raw(String),
    /// Waits until the test calls [`Gate::open`] before writing on.
    Wait(Gate),
    /// Never writes again and keeps the connection open: a stalled stream. The client's
    /// drop of it is recorded ([`Provider::wait_aborted`]).
    Stall,
}

/// A point a scripted stream waits at until the test opens it.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<Notify>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Gate::default()
    }

    /// Lets the stream waiting at it (or the next one to reach it) go on.
    pub fn open(&self) {
        self.0.notify_one();
    }
}

/// The model name the builders below answer with.
pub const MODEL: &str = "test-model";

impl Reply {
    /// A completed answer with `content` and a usage of 10 prompt and 5 completion tokens.
    pub fn text(content: &str) -> Reply {
        Reply::message(json!({"role": "assistant", "content": content}), "stop")
    }

    /// A completed answer asking for tool calls: `(id, name, arguments as JSON text)`.
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Reply {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function",
                       "function": {"name": name, "arguments": args}})
            })
            .collect();
        Reply::message(
            json!({"role": "assistant", "content": null, "tool_calls": calls}),
            "tool_calls",
        )
    }

    fn message(message: Value, finish_reason: &str) -> Reply {
        Reply::Json {
            status: 200,
            headers: Vec::new(),
            body: json!({
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 1_700_000_000u64,
                "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason,
                             "logprobs": null}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }),
        }
    }

    /// An error in OpenAI's shape: `{"error": {message, type, param, code}}`.
    pub fn error(status: u16, message: &str, code: &str) -> Reply {
        Reply::Json {
            status,
            headers: Vec::new(),
            body: json!({"error": {"message": message, "type": "invalid_request_error",
                                   "param": null, "code": code}}),
        }
    }

    /// A 429 `rate_limit_exceeded` with `Retry-After: {seconds}`.
    pub fn rate_limited(seconds: u64) -> Reply {
        let mut reply = Reply::error(
            429,
            "Rate limit reached for requests",
            "rate_limit_exceeded",
        );
        if let Reply::Json { headers, .. } = &mut reply {
            headers.push(("retry-after".into(), seconds.to_string()));
        }
        reply
    }

    /// A streamed answer: one chunk with the role, one per piece of `content`, one with
    /// `finish_reason: stop`, the usage chunk (`choices: []`), then `data: [DONE]`.
    pub fn streamed(content: &[&str]) -> Reply {
        let mut pieces = vec![Piece::Event(chunk(
            json!({"role": "assistant", "content": ""}),
            None,
        ))];
        pieces.extend(
            content
                .iter()
                .map(|c| Piece::Event(chunk(json!({"content": c}), None))),
        );
        pieces.extend(stream_end("stop"));
        Reply::Stream(pieces)
    }
}

/// A `chat.completion.chunk` with one choice carrying `delta`.
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1_700_000_000u64,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        "usage": null,
    })
}

/// The end of a stream: the finishing chunk, the usage chunk and `data: [DONE]`.
pub fn stream_end(finish_reason: &str) -> Vec<Piece> {
    vec![
        Piece::Event(chunk(json!({}), Some(finish_reason))),
        Piece::Event(json!({
            "id": "chatcmpl-test", "object": "chat.completion.chunk",
            "created": 1_700_000_000u64, "model": MODEL, "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })),
        Piece::Raw("data: [DONE]\n\n".into()),
    ]
}

/// One request the provider received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, ...
    pub method: String,
    /// The path and query (`/v1/chat/completions`).
    pub path: String,
    /// The headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body as sent.
    pub raw_body: String,
    /// The body as JSON (`null` when it is not JSON).
    pub body: Value,
}

impl Recorded {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Everything of the request except its `Authorization` header, as text: where a
    /// secret that belongs only in that header must not appear.
    pub fn all_but_authorization(&self) -> String {
        let mut out = format!("{} {}\n", self.method, self.path);
        for (k, v) in self.headers.iter().filter(|(k, _)| k != "authorization") {
            out.push_str(&format!("{k}: {v}\n"));
        }
        out.push_str(&self.raw_body);
        out
    }
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    aborted: Mutex<u64>,
    /// Bumped on every request and every abort.
    changed: watch::Sender<u64>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            script: Mutex::default(),
            requests: Mutex::default(),
            aborted: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Shared {
    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A running scripted provider; stops when dropped.
pub struct Provider {
    addr: SocketAddr,
    scheme: &'static str,
    shared: Arc<Shared>,
    changed: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Provider {
    /// Starts a provider on a free loopback port, over plain HTTP.
    pub async fn start() -> Provider {
        let (listener, shared, app) = Provider::parts().await;
        let addr = listener.local_addr().expect("the bound address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Provider::with(addr, "http", shared, task)
    }

    /// Starts a provider over HTTPS with a certificate and its key (PEM files; the
    /// certificate should name `127.0.0.1`), as hosted APIs are served. A client that
    /// refuses the certificate is not recorded as a request.
    pub async fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Provider {
        let acceptor = crate::tls::acceptor(cert, key);
        let (listener, shared, app) = Provider::parts().await;
        let addr = listener.local_addr().expect("the bound address");
        let task = crate::tls::serve(listener, acceptor, app);
        Provider::with(addr, "https", shared, task)
    }

    async fn parts() -> (tokio::net::TcpListener, Arc<Shared>, Router) {
        let shared = Arc::new(Shared::default());
        let app = Router::new().fallback(answer).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback port");
        (listener, shared, app)
    }

    fn with(
        addr: SocketAddr,
        scheme: &'static str,
        shared: Arc<Shared>,
        task: tokio::task::JoinHandle<()>,
    ) -> Provider {
        let changed = shared.changed.subscribe();
        Provider {
            addr,
            scheme,
            shared,
            changed,
            task,
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `base_url` to configure a client with: `http://127.0.0.1:PORT/v1` (`https://`
    /// when started with [`Provider::start_tls`]).
    pub fn base_url(&self) -> String {
        format!("{}://{}/v1", self.scheme, self.addr)
    }

    /// Adds an answer at the end of the script.
    pub fn push(&self, reply: Reply) {
        self.shared
            .script
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(reply);
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many streams a client dropped before their end.
    pub fn aborted(&self) -> u64 {
        *self
            .shared
            .aborted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until at least `n` requests came (the requests then); fails the test after
    /// [`TIMEOUT`].
    pub async fn wait_requests(&self, n: usize) -> Vec<Recorded> {
        self.wait(&format!("{n} requests"), || {
            let r = self.requests();
            (r.len() >= n).then_some(r)
        })
        .await
    }

    /// Waits until a client dropped a stream before its end; fails the test after
    /// [`TIMEOUT`].
    pub async fn wait_aborted(&self) {
        self.wait("a dropped stream", || (self.aborted() > 0).then_some(()))
            .await
    }

    async fn wait<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let mut changed = self.changed.clone();
        let wait = async {
            loop {
                if let Some(v) = check() {
                    return v;
                }
                changed.changed().await.expect("the provider runs");
            }
        };
        tokio::time::timeout(TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| panic!("the provider did not see {what} within {TIMEOUT:?}"))
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let recorded = Recorded {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
        raw_body,
    };
    shared
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(recorded);
    let next = shared
        .script
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front();
    shared.bump();
    let reply = next.unwrap_or_else(|| {
        Reply::error(
            500,
            "the test provider's script is exhausted",
            "script_exhausted",
        )
    });
    match reply {
        Reply::Json {
            status,
            headers,
            body,
        } => {
            let mut builder = Response::builder()
                .status(status)
                .header("content-type", "application/json");
            for (k, v) in headers {
                builder = builder.header(k, v);
            }
            builder
                .body(Body::from(body.to_string()))
                .expect("a valid response")
        }
        Reply::Raw {
            status,
            content_type,
            body,
        } => Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Body::from(body))
            .expect("a valid response"),
        Reply::Stream(pieces) => {
            let (tx, rx) = mpsc::channel::<Bytes>(1);
            tokio::spawn(write_stream(shared.clone(), pieces, tx));
            let stream = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
            });
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(Body::from_stream(stream))
                .expect("a valid response")
        }
    }
}

/// Writes a scripted stream; records a client that dropped it before its end.
async fn write_stream(shared: Arc<Shared>, pieces: Vec<Piece>, tx: mpsc::Sender<Bytes>) {
    let abort = |shared: &Shared| {
        *shared.aborted.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        shared.bump();
    };
    for piece in pieces {
        let bytes = match piece {
            Piece::Event(v) => format!("data: {v}\n\n"),
            Piece::Raw(s) => s,
            Piece::Wait(gate) => {
                tokio::select! {
                    _ = gate.0.notified() => continue,
                    _ = tx.closed() => return abort(&shared),
                }
            }
            Piece::Stall => {
                tx.closed().await;
                return abort(&shared);
            }
        };
        if tx.send(Bytes::from(bytes)).await.is_err() {
            return abort(&shared);
        }
    }
}
