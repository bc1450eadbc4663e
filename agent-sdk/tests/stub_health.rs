//! `stub-agents --health-addr`: liveness and readiness probes of the real binary against a
//! real nats-server (the same `agent_sdk::health` as `workflow-node serve`). Ready once its
//! agents are up; unready while cut off from the server; on SIGTERM unready at once but
//! still answering calls while `--shutdown-delay` holds it, then a clean exit at a second
//! signal.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use agent_sdk::Mesh;
use anyhow::{Context, Result};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use test_harness::http::{get, readiness_becomes};

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = r#"
agents:
  - name: Echo
    output: "{{input}}"
"#;

fn signal(child: &tokio::process::Child) -> Result<()> {
    let pid = child.id().context("running")?.to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()?;
    anyhow::ensure!(sent.success(), "kill -TERM {pid}");
    Ok(())
}

#[tokio::test]
async fn readiness_follows_the_agents_the_server_and_the_drain() -> Result<()> {
    let mut server = test_harness::nats();
    let client = async_nats::connect(server.url()).await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("stubs.yaml");
    std::fs::write(&path, STUBS)?;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stub-agents"))
        .arg(&path)
        .args(["--nats-url", &server.url(), "--health-addr", "127.0.0.1:0"])
        .args(["--shutdown-delay", "60s"])
        .kill_on_drop(true)
        .stderr(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut addr = None;
    while let Some(line) = tokio::time::timeout(TIMEOUT, lines.next_line()).await?? {
        if let Some(rest) = line.strip_prefix("stub-agents: health at http://") {
            addr = Some(
                rest.trim_end_matches("/livez and /readyz")
                    .parse::<SocketAddr>()?,
            );
            break;
        }
    }
    let addr = addr.context("stub-agents never said where its probes are")?;
    // The rest of stderr is drained so that the child never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    assert_eq!(readiness_becomes(addr, 200, TIMEOUT).await.trim(), "ready");
    let live = get(addr, "/livez").await;
    assert_eq!((live.status, live.body), (200, "ok\n".into()));
    let out = Mesh::new(client.clone())
        .agent("Echo")
        .timeout(TIMEOUT)
        .call(json!({"a": 1}))
        .await?;
    assert_eq!(out, json!({"a": 1}));

    // Cut off from NATS: unready, alive, and ready again once the server is back.
    server.stop()?;
    let why = readiness_becomes(addr, 503, TIMEOUT).await;
    assert!(why.contains("NATS connection"), "{why}");
    assert_eq!(get(addr, "/livez").await.status, 200);
    server.restart()?;
    readiness_becomes(addr, 200, TIMEOUT).await;

    // SIGTERM: unready at once, yet the agents still answer while the delay holds.
    signal(&child)?;
    let why = readiness_becomes(addr, 503, TIMEOUT).await;
    assert!(why.contains("draining"), "{why}");
    let client = async_nats::connect(server.url()).await?;
    let out = Mesh::new(client.clone())
        .agent("Echo")
        .timeout(TIMEOUT)
        .call(json!({"b": 2}))
        .await?;
    assert_eq!(out, json!({"b": 2}), "still serving while unready");

    // A second signal ends the delay: the agents stop and the process exits cleanly.
    signal(&child)?;
    let status = tokio::time::timeout(TIMEOUT, child.wait()).await??;
    assert!(status.success(), "{status:?}");
    Ok(())
}
