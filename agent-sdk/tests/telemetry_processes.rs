//! The `stub-agents` binary's traces, to a real OTLP receiver: over HTTP and over gRPC,
//! flushed when it stops on SIGTERM (the batch delay is ten minutes, so only the shutdown
//! sends them), and none at all when export is turned off.

use std::time::Duration;

use agent_sdk::{CallOptions, Mesh};
use async_nats::HeaderMap;
use serde_json::json;
use test_harness::otlp::Receiver;
use tokio::io::{AsyncBufReadExt, BufReader};

const STUBS: &str = r#"
agents:
  - name: Echo
    rules: [{output: "{{input}}"}]
"#;

const WAIT: Duration = Duration::from_secs(20);

/// Starts `stub-agents` with `env`, calls Echo with `traceparent`, stops it with SIGTERM
/// and waits for it to exit.
async fn call_then_terminate(url: &str, env: &[(&str, String)], traceparent: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stubs.yaml");
    std::fs::write(&path, STUBS).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_stub-agents"));
    command
        .arg(&path)
        .args(["--nats-url", url])
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")) {
        command.env_remove(k);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("stub-agents says something")
            .unwrap()
            .expect("stub-agents starts serving");
        if line.contains("serving Echo") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let client = async_nats::connect(url).await.unwrap();
    let mut options = CallOptions::new(WAIT);
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", traceparent);
    options.headers = headers;
    let out = Mesh::new(client.clone())
        .defaults(options)
        .agent("Echo")
        .call(json!({"a": 1}))
        .await
        .unwrap();
    assert_eq!(out, json!({"a": 1}));
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("stub-agents stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn spans_go_out_over_http_and_grpc_when_the_process_stops() {
    let server = test_harness::nats();
    let receiver = Receiver::start().await;
    for (protocol, endpoint, trace) in [
        (
            "http/protobuf",
            receiver.endpoint(),
            "0af7651916cd43dd8448eb211c80319c",
        ),
        (
            "grpc",
            receiver.grpc_endpoint(),
            "1bf7651916cd43dd8448eb211c80319d",
        ),
    ] {
        let traceparent = format!("00-{trace}-b7ad6b7169203331-01");
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
            ("OTEL_SERVICE_NAME", format!("stubs-{protocol}")),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000".to_owned()),
        ];
        call_then_terminate(&server.url(), &env, &traceparent).await;
        let span = receiver
            .wait_for_spans(WAIT, |spans| {
                spans
                    .iter()
                    .find(|s| s.trace_id == trace && s.name == "agent.handle")
                    .cloned()
            })
            .await
            .unwrap_or_else(|spans| panic!("no span over {protocol}: {spans:#?}"));
        assert_eq!(span.parent_span_id.as_deref(), Some("b7ad6b7169203331"));
        assert_eq!(span.service_name, format!("stubs-{protocol}"));
        assert_eq!(span.attr("agent.name"), Some("Echo"));
    }
    assert!(receiver.requests("/v1/traces") >= 1);
    assert!(receiver.requests("grpc:traces") >= 1);
}

#[tokio::test]
async fn nothing_is_exported_when_export_is_turned_off() {
    let server = test_harness::nats();
    let receiver = Receiver::start().await;
    let tp = "00-2af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    for off in [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_TRACES_EXPORTER", "none"),
    ] {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
            (off.0, off.1.to_owned()),
        ];
        call_then_terminate(&server.url(), &env, tp).await;
    }
    // The processes have exited: whatever they would have sent is in.
    assert_eq!(receiver.requests("/v1/traces"), 0);
    assert!(receiver.spans().is_empty());
}
