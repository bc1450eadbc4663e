//! `workflow-node serve --health-addr`: liveness and readiness probes of a real `serve`
//! process against a real nats-server. Ready once started; unready while cut off from the
//! server and while draining after SIGTERM (held by `--shutdown-delay` until a second
//! signal), then a clean exit. `workflow-node health` (the image's `HEALTHCHECK`) says the
//! same in its exit code.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mesh_tests::http::{get, readiness_becomes};

const TIMEOUT: Duration = Duration::from_secs(30);

const WORKFLOW: &str = r#"
name: Probed
workflow:
  description: one agent
  nodes:
    - {id: a, type: agent, agent_name: Echo}
  output_mapping: {a: "{{a.output}}"}
"#;

/// A `workflow-node serve` child, killed on drop; its stderr lines as they come.
struct Serve {
    child: Child,
    lines: tokio::sync::watch::Receiver<Vec<String>>,
}

impl Serve {
    fn spawn(file: &std::path::Path, url: &str) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_workflow-node"))
            .arg("serve")
            .arg(file)
            .args(["--nats-url", url, "--health-addr", "127.0.0.1:0"])
            .args(["--shutdown-delay", "60s", "--card-interval", "1"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning workflow-node serve");
        let stderr = child.stderr.take().expect("piped");
        let (tx, lines) = tokio::sync::watch::channel(Vec::new());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                tx.send_modify(|lines| lines.push(line));
            }
        });
        Serve { child, lines }
    }

    /// The rest of the first stderr line starting with `prefix`, within the timeout.
    async fn line(&mut self, prefix: &str) -> String {
        let found = tokio::time::timeout(
            TIMEOUT,
            self.lines
                .wait_for(|lines| lines.iter().any(|l| l.starts_with(prefix))),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        let lines = self.lines.borrow().clone();
        assert!(
            found,
            "serve never printed '{prefix}...':\n{}",
            lines.join("\n")
        );
        let line = lines.iter().find(|l| l.starts_with(prefix)).expect("found");
        line[prefix.len()..].to_string()
    }

    fn signal(&self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("serve's stderr:\n{}", self.lines.borrow().join("\n"));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let mut server = mesh_tests::nats();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probed.yaml");
    std::fs::write(&file, WORKFLOW).unwrap();
    let mut serve = Serve::spawn(&file, &server.url());
    let addr: SocketAddr = serve
        .line("health at http://")
        .await
        .trim_end_matches("/livez and /readyz")
        .parse()
        .expect("an address");
    assert_eq!(readiness_becomes(addr, 200, TIMEOUT).await.trim(), "ready");
    assert_eq!(get(addr, "/livez").await, (200, "ok\n".into()));
    assert_eq!(health(addr, false), (Some(0), "ready\n".into()));
    // Asked on the unspecified address it listens on, `health` goes to loopback.
    let any = SocketAddr::from(([0, 0, 0, 0], addr.port()));
    assert_eq!(health(any, true), (Some(0), "ok\n".into()));

    // Cut off from NATS: unready, and ready again once the server is back.
    server.stop().expect("stop nats-server");
    let why = readiness_becomes(addr, 503, TIMEOUT).await;
    assert!(why.contains("NATS connection"), "{why}");
    assert_eq!(get(addr, "/livez").await.0, 200, "alive all the same");
    server.restart().expect("restart nats-server");
    readiness_becomes(addr, 200, TIMEOUT).await;

    // SIGTERM: unready at once, still answering probes while the shutdown delay holds it.
    serve.signal();
    let why = readiness_becomes(addr, 503, TIMEOUT).await;
    assert!(why.contains("draining"), "{why}");
    serve.line("unready; draining in").await;
    assert_eq!(health(addr, false).0, Some(1), "not ready while draining");
    assert_eq!(health(addr, true).0, Some(0), "yet alive");
    // A second signal ends the delay: the drain runs and the process exits cleanly.
    serve.signal();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = serve.child.try_wait().expect("wait") {
            break status;
        }
        assert!(tokio::time::Instant::now() < deadline, "serve did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
}
