//! A concurrency limit on model calls shared by two `mesh-agents` processes: with
//! `max_concurrency: 1` on one key, a call in the second process waits (and says so to its
//! caller) while the first process's call holds the slot, and goes on when it is given
//! back.

mod common;

use agent_sdk::{Mesh, Progress};
use common::*;
use futures::StreamExt;
use serde_json::json;
use test_harness::openai::{chunk, stream_end, Gate, Piece, Provider, Reply};
use tokio::io::AsyncBufReadExt;

/// Starts `mesh-agents` on `file` and waits until it serves `name`.
async fn start(url: &str, file: &std::path::Path, name: &str) -> tokio::process::Child {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh-agents"))
        .arg(file)
        .args(["--nats-url", url])
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("mesh-agents says something")
            .unwrap()
            .expect("mesh-agents starts serving");
        if line.contains(&format!("serving {name}")) {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
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
    let _b = start(&server.url(), &file("WriterB"), "WriterB").await;

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
}
