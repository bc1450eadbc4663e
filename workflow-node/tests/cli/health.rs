//! `workflow-node serve --health-addr`: liveness and readiness probes of a real `serve`
//! process against a real nats-server. Ready once started; unready while cut off from the
//! server and while draining after SIGTERM (held by `--shutdown-delay` until a second
//! signal), then a clean exit. `workflow-node health` (the image's `HEALTHCHECK`) says the
//! same in its exit code.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use test_harness::http::{get, readiness_becomes};

use crate::support::process::{self, Child};

const TIMEOUT: Duration = Duration::from_secs(30);

const WORKFLOW: &str = r#"
name: Probed
workflow:
  description: one agent
  nodes:
    - {id: a, type: agent, agent_name: Echo}
  output_mapping: {a: "{{a.output}}"}
"#;

/// `workflow-node serve` on `file` with a health address, a long shutdown delay, a
/// quick card interval and one runtime thread (`--threads`).
fn spawn_serve(file: &std::path::Path, url: &str) -> Child {
    Child::spawn(
        process::workflow_node()
            .arg("serve")
            .arg(file)
            .args([
                "--nats-url",
                url,
                "--health-addr",
                "127.0.0.1:0",
                "--threads",
                "1",
            ])
            .args(["--shutdown-delay", "60s", "--card-interval", "1"])
            .env("RUST_LOG", "warn"),
    )
}

/// `workflow-node health --addr ADDR [--live]`: its exit code and stdout.
fn health(addr: SocketAddr, live: bool) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_workflow-node"));
    command.args(["health", "--addr", &addr.to_string()]);
    if live {
        command.arg("--live");
    }
    let out = command.output().expect("running workflow-node health");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn readiness_follows_start_the_server_and_the_drain() {
    let mut server = test_harness::nats();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probed.yaml");
    std::fs::write(&file, WORKFLOW).unwrap();
    let mut serve = spawn_serve(&file, &server.url());
    let addr: SocketAddr = serve
        .line("health at http://")
        .await
        .trim_end_matches("/livez and /readyz")
        .parse()
        .expect("an address");
    assert_eq!(readiness_becomes(addr, 200, TIMEOUT).await.trim(), "ready");
    let live = get(addr, "/livez").await;
    assert_eq!((live.status, live.body), (200, "ok\n".into()));
    assert_eq!(health(addr, false), (Some(0), "ready\n".into()));
    // Asked on the unspecified address it listens on, `health` goes to loopback.
    let any = SocketAddr::from(([0, 0, 0, 0], addr.port()));
    assert_eq!(health(any, true), (Some(0), "ok\n".into()));

    // Cut off from NATS: unready, and ready again once the server is back.
    server.stop().expect("stop nats-server");
    let why = readiness_becomes(addr, 503, TIMEOUT).await;
    assert!(why.contains("NATS connection"), "{why}");
    assert_eq!(get(addr, "/livez").await.status, 200, "alive all the same");
    server.restart().expect("restart nats-server");
    readiness_becomes(addr, 200, TIMEOUT).await;

    // SIGTERM: unready at once, still answering probes while the shutdown delay holds it.
    serve.terminate();
    let why = readiness_becomes(addr, 503, TIMEOUT).await;
    assert!(why.contains("draining"), "{why}");
    serve.line("unready; draining in").await;
    assert_eq!(health(addr, false).0, Some(1), "not ready while draining");
    assert_eq!(health(addr, true).0, Some(0), "yet alive");
    // A second signal ends the delay: the drain runs and the process exits cleanly.
    serve.terminate();
    let status = serve.exited().await;
    assert!(status.success(), "{status:?}");
}

#[test]
fn serve_refuses_zero_runtime_threads_before_it_starts() {
    let out = Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .args(["serve", "examples/workflows/echo.json", "--threads", "0"])
        .output()
        .expect("running workflow-node serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--threads") && stderr.contains("0"),
        "{stderr}"
    );
}

/// A server whose JetStream store cannot hold the byte limits of the node's streams and
/// buckets (nats-server reserves each one's limit when it is made): `serve` exits naming
/// the stream it could not make and both ways out; taking the first one, it serves.
#[tokio::test]
async fn serve_on_a_store_too_small_for_its_limits_names_the_way_out_and_serves_once_lowered() {
    let server = test_harness::nats_with(test_harness::Options {
        max_file_store: Some(256 << 20),
        ..test_harness::Options::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probed.yaml");
    std::fs::write(&file, WORKFLOW).unwrap();
    let serve = |limits: &[String]| {
        let mut command = process::workflow_node();
        command
            .arg("serve")
            .arg(&file)
            .args(["--nats-url", &server.url(), "--namespace", "small"])
            .args(limits)
            .env("RUST_LOG", "warn");
        Child::spawn(&mut command)
    };

    let mut refused = serve(&[]);
    let status = refused.exited().await;
    let stderr = refused.lines().join("\n");
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("setting up "), "{stderr}");
    assert!(
        stderr.contains("cannot reserve this store's byte limit")
            && stderr.contains("--store-limit NAME=BYTES")
            && stderr.contains("max_file_store"),
        "{stderr}"
    );

    // 12 stores and one event stream of 8 MiB each fit in 256 MiB.
    let limits: Vec<String> = workflow_node::limits::StoreLimits::NAMES
        .iter()
        .flat_map(|name| ["--store-limit".to_string(), format!("{name}={}", 8 << 20)])
        .collect();
    let mut lowered = serve(&limits);
    lowered
        .line_where("'serving'", |l| l.contains("serving Probed"))
        .await;
}
