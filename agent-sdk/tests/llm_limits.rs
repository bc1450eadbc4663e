//! Limits on model calls shared by two `mesh-agents` processes on one key: with
//! `max_concurrency: 1`, a call in the second process waits (and says so to its caller)
//! while the first process's call holds the slot, and goes on when it is given back; with
//! `tokens_per_minute`, a call waits while the first one's reservation fills the minute,
//! and goes on when the first answer's usage gives the unused tokens back; with
//! `requests_per_minute: 1`, the second call of the minute waits and is not sent.

mod common;

use agent_sdk::{Mesh, Progress};
use common::*;
use futures::StreamExt;
use serde_json::json;
use test_harness::openai::{chunk, stream_end, Gate, Piece, Provider, Reply};
use tokio::io::AsyncBufReadExt;

/// Starts `mesh-agents` on `file` and waits until it serves `name`; returns it and the
/// address of its health probes and metrics.
async fn start(
    url: &str,
    file: &std::path::Path,
    name: &str,
) -> (tokio::process::Child, std::net::SocketAddr) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh-agents"))
        .arg(file)
        .args(["--nats-url", url, "--health-addr", "127.0.0.1:0"])
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut health = None;
    loop {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("mesh-agents says something")
            .unwrap()
            .expect("mesh-agents starts serving");
        if let Some(rest) = line.split("health at http://").nth(1) {
            health = rest.split('/').next().and_then(|a| a.parse().ok());
        }
        if line.contains(&format!("serving {name}")) {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (
        child,
        health.expect("mesh-agents prints its health address"),
    )
}

/// The value of the sample `line` (`name{labels}`) in a Prometheus text, if present.
fn sample(text: &str, line: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
}

/// An agents file `{name}.yaml` in `dir` with one streamed LLM agent on `provider` and
/// `limits` on the key `shared-account`.
fn agents_file(
    dir: &std::path::Path,
    provider: &Provider,
    name: &str,
    limits: &str,
) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let yaml = format!(
        r#"
agents:
  - name: {name}
    model: {{base_url: "{}", name: test-model, stream: true, max_tokens: 900}}
    limits: {{key: shared-account, {limits}}}
"#,
        provider.base_url()
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The first status update of `call` that contains `needle`.
async fn status_with(call: &mut agent_sdk::Call, needle: &str) -> String {
    let mut progress = call.progress();
    tokio::time::timeout(WAIT, async {
        while let Some(p) = progress.next().await {
            if let Progress::Status { text, .. } = p {
                if text.contains(needle) {
                    return text;
                }
            }
        }
        panic!("the call ended without a status saying {needle:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("no status saying {needle:?}"))
}

/// A streamed answer held at `gate` after its first piece.
fn gated(gate: &Gate, text: &str) -> Reply {
    let mut pieces = vec![
        Piece::Event(chunk(json!({"content": text}), None)),
        Piece::Wait(gate.clone()),
    ];
    pieces.extend(stream_end("stop"));
    Reply::Stream(pieces)
}

#[tokio::test]
async fn two_processes_share_a_tokens_per_minute_quota() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let provider = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Each call reserves its request's bytes / 4 plus max_tokens (900): over 9/10 of
    // 1000 tokens a minute, so the second would wait most of a minute (far past WAIT)
    // without the first's correction.
    let limits = "tokens_per_minute: 1000";
    let (_a, _) = start(
        &server.url(),
        &agents_file(dir.path(), &provider, "TokensA", limits),
        "TokensA",
    )
    .await;
    let (_b, _) = start(
        &server.url(),
        &agents_file(dir.path(), &provider, "TokensB", limits),
        "TokensB",
    )
    .await;
    let gate = Gate::new();
    provider.push(gated(&gate, "one"));
    provider.push(Reply::streamed(&["two"]));

    let mesh = Mesh::new(client.clone());
    let a = mesh.agent("TokensA").timeout(WAIT).call(json!({}));
    provider.wait_requests(1).await;
    let mut b = mesh.agent("TokensB").timeout(WAIT).call(json!({}));
    let said = status_with(&mut b, "waiting for the model's tokens quota").await;
    assert!(said.contains("shared-account: 1000 per minute"), "{said}");
    assert_eq!(provider.requests().len(), 1);
    // A's answer used 15 tokens (the scripted usage): the rest goes back, and B goes on.
    gate.open();
    assert_eq!(a.await.unwrap(), json!({"text": "one"}));
    assert_eq!(b.await.unwrap(), json!({"text": "two"}));
    assert_eq!(provider.wait_requests(2).await.len(), 2);
}

#[tokio::test]
async fn two_processes_share_a_requests_per_minute_quota() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let provider = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let limits = "requests_per_minute: 1";
    let (_a, _) = start(
        &server.url(),
        &agents_file(dir.path(), &provider, "RequestsA", limits),
        "RequestsA",
    )
    .await;
    let (_b, _) = start(
        &server.url(),
        &agents_file(dir.path(), &provider, "RequestsB", limits),
        "RequestsB",
    )
    .await;
    provider.push(Reply::streamed(&["one"]));

    let mesh = Mesh::new(client.clone());
    let a = mesh.agent("RequestsA").timeout(WAIT).call(json!({}));
    assert_eq!(a.await.unwrap(), json!({"text": "one"}));
    let mut b = mesh.agent("RequestsB").timeout(WAIT).call(json!({}));
    let said = status_with(&mut b, "waiting for the model's requests quota").await;
    assert!(said.contains("shared-account: 1 per minute"), "{said}");
    // The minute's one request is spent: B's is not sent.
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test]
async fn two_processes_share_one_concurrency_limit() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let provider = Provider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| {
        let path = dir.path().join(format!("{name}.yaml"));
        let yaml = format!(
            r#"
agents:
  - name: {name}
    model: {{base_url: "{}", name: test-model, stream: true}}
    limits: {{key: shared-account, max_concurrency: 1}}
"#,
            provider.base_url()
        );
        std::fs::write(&path, yaml).unwrap();
        path
    };
    let _a = start(&server.url(), &file("WriterA"), "WriterA").await;
    let (_b, b_metrics) = start(&server.url(), &file("WriterB"), "WriterB").await;

    let gate = Gate::new();
    let mut first = vec![
        Piece::Event(chunk(json!({"content": "one"}), None)),
        Piece::Wait(gate.clone()),
    ];
    first.extend(stream_end("stop"));
    provider.push(Reply::Stream(first));
    provider.push(Reply::streamed(&["two"]));

    let mesh = Mesh::new(client.clone());
    let a = mesh.agent("WriterA").timeout(WAIT).call(json!({}));
    // A holds the only slot, its answer held back at the gate.
    provider.wait_requests(1).await;
    let mut b = mesh.agent("WriterB").timeout(WAIT).call(json!({}));
    let mut progress = b.progress();
    let said = tokio::time::timeout(WAIT, async {
        while let Some(p) = progress.next().await {
            if let Progress::Status { text, .. } = p {
                if text.contains("waiting for a model slot") {
                    return text;
                }
            }
        }
        panic!("B ended without waiting for a slot");
    })
    .await
    .expect("B waits for the slot");
    assert!(said.contains("shared-account"), "{said}");
    // B waits: it has not reached the provider.
    assert_eq!(provider.requests().len(), 1);
    gate.open();
    assert_eq!(a.await.unwrap(), json!({"text": "one"}));
    assert_eq!(b.await.unwrap(), json!({"text": "two"}));
    assert_eq!(provider.wait_requests(2).await.len(), 2);

    // B's metrics: its call, the tokens the provider reported, the wait; then a 429.
    provider.push(Reply::rate_limited(7));
    let refused = mesh.agent("WriterB").timeout(WAIT).call(json!({})).await;
    assert!(refused.is_err(), "{refused:?}");
    let scraped = test_harness::http::get(b_metrics, "/metrics").await;
    assert_eq!(scraped.status, 200, "{}", scraped.body);
    assert!(scraped
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    let text = scraped.body;
    let calls = r#"mesh_llm_calls_total{agent="WriterB",model="test-model",outcome="#;
    assert_eq!(
        sample(&text, &format!(r#"{calls}"ok"}}"#)),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!(r#"{calls}"429"}}"#)),
        Some(1.0),
        "{text}"
    );
    let tokens = r#"mesh_llm_tokens_total{agent="WriterB",model="test-model",outcome="ok",type="#;
    assert_eq!(
        sample(&text, &format!(r#"{tokens}"input"}}"#)),
        Some(10.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!(r#"{tokens}"output"}}"#)),
        Some(5.0),
        "{text}"
    );
    let wait = r#"mesh_llm_limit_wait_seconds_count{agent="WriterB",limit="concurrency"}"#;
    assert_eq!(sample(&text, wait), Some(2.0), "{text}");
    let waited = r#"mesh_llm_limit_wait_seconds_sum{agent="WriterB",limit="concurrency"}"#;
    assert!(sample(&text, waited).is_some_and(|s| s > 0.0), "{text}");
    // WriterA is another process: none of its calls here.
    assert!(!text.contains(r#"agent="WriterA""#), "{text}");
}
