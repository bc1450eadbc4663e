//! `workflow-node serve --http` and `workflow-node ui` as a user runs them: the real binary
//! against a real nats-server, its web view reached over HTTP; an open web view on a
//! non-loopback address is refused (exit 1).

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use test_harness::http::{get, TIMEOUT};

use crate::support::process::{self, Child};

const ECHO: &str = r#"
name: Hello
workflow:
  description: says hello
  nodes:
    - {id: say, type: agent, agent_name: Echo, input: {text: hi}}
  output_mapping: {text: "{{say.output.text}}"}
"#;

/// `workflow-node` with none of the test's own mesh settings in its environment.
fn bin() -> Command {
    let mut c = process::workflow_node();
    c.env_remove("NATS_URL")
        .env_remove("MESH_NKEY_SEED_FILE")
        .env_remove("MESH_HTTP_READ_TOKENS")
        .env_remove("MESH_HTTP_OPERATOR_TOKENS")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// The address of the `web view at http://ADDR/` line of `child`.
async fn web_addr(child: &mut Child) -> SocketAddr {
    let line = child.line("web view at http://").await;
    line.trim_end_matches('/').parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_http_and_ui_serve_the_web_view_of_the_mesh() {
    let server = test_harness::nats();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hello.yaml");
    std::fs::write(&file, ECHO).unwrap();

    let mut serve = bin();
    serve
        .arg("serve")
        .arg(&file)
        .args(["--nats-url", &server.url(), "--http", "127.0.0.1:0"]);
    let mut serve = Child::spawn(&mut serve);
    let addr = web_addr(&mut serve).await;
    assert_eq!(get(addr, "/").await.status, 200);

    let mut ui = bin();
    ui.args(["ui", "--nats-url", &server.url(), "--http", "127.0.0.1:0"]);
    let mut ui = Child::spawn(&mut ui);
    let ui_addr = web_addr(&mut ui).await;
    // Both see the workflow's card (the ui's once the node publishes it again, or at its
    // discovery ping).
    for addr in [addr, ui_addr] {
        let give_up = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let cards = get(addr, "/api/cards").await.json();
            if cards
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == "Hello")
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "no Hello card: {cards}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let runs = get(ui_addr, "/api/runs").await;
    assert_eq!(runs.status, 200, "{}", runs.body);
}

#[test]
fn an_open_web_view_on_all_addresses_is_refused() {
    let server = test_harness::nats();
    let out = bin()
        .args(["ui", "--nats-url", &server.url(), "--http", "0.0.0.0:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--http-operator-token") && stderr.contains("loopback"),
        "{stderr}"
    );
    let out = bin()
        .args(["ui", "--http", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nats-url"));
}
