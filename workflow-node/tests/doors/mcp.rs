//! The MCP door, driven by the official MCP Python SDK (`mcp_client.py` beside this file, run
//! in the project's virtual environment) against a real nats-server, a real workflow node
//! and real agents: over stdio (`workflow-node mcp` as the client's subprocess) and over
//! Streamable HTTP (`/mcp` of the web view, behind its operator token), each in both eras
//! (the `initialize` handshake, and 2026-07-28's per-request metadata).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder};
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::ops::follow::Follow;
use workflow_node::ops::runs::{RunRef, Runs};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, AccessArgs, Web};

use crate::support::fixtures::{checked_doubler, echo};

const STUBS: &str = concat!(
    "agents:",
    checked_doubler!(),
    echo!(),
    r#"
  - name: Sleeper
    delay: 1h
    rules: [{output: {text: "late"}}]
"#
);

const DOUBLING: &str = r#"
name: Doubling
workflow:
  description: Doubles a number.
  input_schema:
    type: object
    properties: {value: {type: number}}
    required: [value]
  output_schema:
    type: object
    properties: {doubled: {type: number}}
    required: [doubled]
  nodes:
    - {id: one, type: agent, agent_name: Doubler, input: {value: "{{workflow.input.value}}"}}
  output_mapping:
    doubled: "{{one.output.value}}"
"#;

const GATE: &str = r#"
name: Gate
workflow:
  description: an agent, an approval, then an agent
  input_schema:
    type: object
    properties: {text: {type: string}}
    required: [text]
  nodes:
    - {id: first, type: agent, agent_name: Echo, input: {text: "{{workflow.input.text}}"}}
    - {id: gate, type: approval, depends_on: [first], message: "ok to go?", timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: "{{first.output.text}}"}}
  output_mapping: {went: "{{go.output.went}}"}
"#;

const SLOW: &str = r#"
name: Slow
workflow:
  description: waits for an agent that takes an hour
  input_schema:
    type: object
    properties: {text: {type: string}}
  nodes:
    - {id: wait, type: agent, agent_name: Sleeper, input: {text: "{{workflow.input.text}}"}}
  output_mapping: {text: "{{wait.output.text}}"}
"#;

const TOKEN: &str = "mcp-operator-token";

/// A server, the stub agents, an agent with a large output, and a node serving the three
/// workflows.
struct Mesh {
    server: test_harness::NatsServer,
    client: async_nats::Client,
    _stubs: Vec<agent_sdk::AgentHandle>,
    _big: agent_sdk::AgentHandle,
    /// The `traceparent` of each call agent `Big` received.
    traceparents: Arc<Mutex<Vec<String>>>,
    _node: WorkflowNode,
}

impl Mesh {
    async fn start() -> Mesh {
        let server = test_harness::nats();
        let client = async_nats::connect(server.url()).await.expect("connect");
        let stubs = agent_sdk::StubFile::parse(STUBS, "stubs").unwrap_or_else(|p| panic!("{p:?}"));
        let stubs = agent_sdk::serve_stubs(client.clone(), "mesh", stubs)
            .await
            .expect("stubs");
        let traceparents = Arc::new(Mutex::new(Vec::new()));
        let seen_by_big = traceparents.clone();
        let big = AgentBuilder::new("Big")
            .description("answers with a blob as large as asked")
            .input_schema(json!({"type": "object", "properties": {"size": {"type": "integer"}}}))
            .output_schema(json!({"type": "object", "properties": {"blob": {"type": "string"}}}))
            .handler(handler_fn(move |req| {
                let seen = seen_by_big.clone();
                async move {
                    let tp = req.headers.get("traceparent").map(|v| v.to_string());
                    seen.lock().expect("not poisoned").extend(tp);
                    let size = req.input["size"].as_u64().unwrap_or(1) as usize;
                    Ok(json!({"blob": "b".repeat(size)}))
                }
            }))
            .serve(client.clone())
            .await
            .expect("Big serves");
        let workflows = [DOUBLING, GATE, SLOW]
            .iter()
            .map(|text| parse_str(text, "wf.yaml").unwrap_or_else(|p| panic!("{p:?}")))
            .collect();
        let node = WorkflowNode::start(client.clone(), workflows, Config::default())
            .await
            .expect("node");
        Mesh {
            server,
            client,
            _stubs: stubs,
            _big: big,
            traceparents,
            _node: node,
        }
    }

    /// Runs `client.py` with `args`; its summary (the last line it printed). When it says
    /// it is listening for list changes, agent `Late` starts.
    async fn python(&self, args: &[&str]) -> Value {
        use tokio::io::AsyncBufReadExt as _;
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/doors/mcp_client.py");
        let mut child = tokio::process::Command::new(test_harness::python())
            .arg(script)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python runs");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut late = None;
        let mut printed = Vec::new();
        let read = async {
            while let Some(line) = lines.next_line().await.expect("a line") {
                if line == "listening" {
                    late = Some(self.late().await);
                }
                printed.push(line);
            }
            child.wait_with_output().await.expect("python ended")
        };
        let out = tokio::time::timeout(Duration::from_secs(240), read)
            .await
            .expect("the MCP client ended");
        assert!(
            out.status.success(),
            "the MCP client failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            printed.join("\n")
        );
        assert!(late.is_some(), "the client listened for list changes");
        let last = printed.last().expect("a summary");
        eprintln!("MCP client summary: {last}");
        serde_json::from_str(last).expect("the summary is JSON")
    }

    /// Starts agent `Late`, which no client has seen listed.
    async fn late(&self) -> agent_sdk::AgentHandle {
        AgentBuilder::new("Late")
            .description("came late")
            .handler(handler_fn(|req| async move { Ok(req.input) }))
            .serve(self.client.clone())
            .await
            .expect("Late serves")
    }

    /// Asserts that agent `Big` was called in the trace the MCP client gave.
    fn big_saw_the_clients_trace(&self) {
        let seen = self.traceparents.lock().expect("not poisoned").clone();
        assert!(
            seen.iter()
                .any(|tp| tp.contains("4bf92f3577b34da6a3ce929d0e0e4736")),
            "Big was called in the client's trace: {seen:?}"
        );
    }

    /// Waits until the run `summary` says was cancelled has ended, and returns its status.
    async fn slow_run_status(&self, summary: &Value) -> String {
        // "run {execution id} started"
        let line = summary["slow_run"].as_str().expect("the slow run's line");
        let execution = line
            .strip_prefix("run ")
            .and_then(|l| l.strip_suffix(" started"))
            .expect("run ID started");
        let runs = Runs::open(self.client.clone(), "mesh").await.expect("runs");
        let run = runs
            .find(RunRef::id(execution))
            .await
            .expect("the slow run");
        let mut follow = Follow::start(&runs, run).await.expect("follow");
        let ended = async { while follow.next().await.expect("follow").is_some() {} };
        tokio::time::timeout(Duration::from_secs(60), ended)
            .await
            .expect("the slow run ended after the cancel");
        let status = serde_json::to_value(follow.run().record.state.status).expect("status");
        status.as_str().unwrap_or_default().to_owned()
    }
}

fn stdio_args(mesh: &Mesh) -> String {
    let bin = env!("CARGO_BIN_EXE_workflow-node");
    json!([bin, "mcp", "--nats-url", mesh.server.url()]).to_string()
}

async fn stdio(mode: &str) {
    let mesh = Mesh::start().await;
    let argv = stdio_args(&mesh);
    let summary = mesh.python(&["--mode", mode, "--stdio", &argv]).await;
    assert_eq!(
        summary["protocol"],
        if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        }
    );
    assert_eq!(mesh.slow_run_status(&summary).await, "cancelled");
    mesh.big_saw_the_clients_trace();
}

#[tokio::test]
async fn an_mcp_client_of_the_initialize_era_uses_the_mesh_over_stdio() {
    stdio("legacy").await;
}

#[tokio::test]
async fn an_mcp_client_of_2026_uses_the_mesh_over_stdio() {
    stdio("2026-07-28").await;
}

/// The web view with an operator token, and its `/mcp` URL.
async fn web(mesh: &Mesh) -> (Web, String) {
    let access = Access::new(&AccessArgs {
        operator_tokens: vec![TOKEN.into()],
        ..AccessArgs::default()
    })
    .expect("access");
    let addr = "127.0.0.1:0".parse().expect("addr");
    let web = Web::start(mesh.client.clone(), "mesh", None, access, addr)
        .await
        .expect("web view");
    let url = format!("http://{}/mcp", web.addr());
    (web, url)
}

async fn http(mode: &str) {
    let mesh = Mesh::start().await;
    let (_web, url) = web(&mesh).await;
    let summary = mesh
        .python(&["--mode", mode, "--url", &url, "--token", TOKEN])
        .await;
    assert_eq!(mesh.slow_run_status(&summary).await, "cancelled");
    mesh.big_saw_the_clients_trace();
}

#[tokio::test]
async fn an_mcp_client_of_the_initialize_era_uses_the_mesh_over_http() {
    http("legacy").await;
}

#[tokio::test]
async fn an_mcp_client_of_2026_uses_the_mesh_over_http() {
    http("2026-07-28").await;
}

#[tokio::test]
async fn the_http_door_wants_an_operator_token_and_the_views_own_origin() {
    let mesh = Mesh::start().await;
    let (web, _url) = web(&mesh).await;
    let addr = web.addr();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}});
    let body = init.to_string();
    let ask = |headers: Vec<(&'static str, String)>| {
        let body = body.clone();
        async move {
            let mut h: Vec<(&str, &str)> = vec![("accept", "application/json, text/event-stream")];
            for (k, v) in &headers {
                h.push((k, v.as_str()));
            }
            test_harness::http::request(addr, "POST", "/mcp", Some(&body), &h).await
        }
    };
    let none = ask(vec![]).await;
    assert_eq!(none.status, 401, "{}", none.body);
    let wrong = ask(vec![("authorization", "Bearer nope".into())]).await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let bearer = format!("Bearer {TOKEN}");
    let other_page = ask(vec![
        ("authorization", bearer.clone()),
        ("origin", "http://evil.example".into()),
    ])
    .await;
    assert_eq!(other_page.status, 403, "{}", other_page.body);
    let ok = ask(vec![("authorization", bearer)]).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

/// `serve --http` counts cards on its view and `/mcp` as its node does: under
/// `--require-signed-cards`, an agent whose card is unsigned is no tool there, while one
/// signed by the key `--agent-key` binds to its name is.
#[tokio::test]
async fn serve_http_lists_only_cards_signed_as_its_agent_keys_say() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let key = agent_sdk::Signer::generate();
    let echoing = |name: &str| {
        AgentBuilder::new(name)
            .description("echoes")
            .handler(handler_fn(|req| async move { Ok(req.input) }))
    };
    // The unsigned card first, on the connection the signed one then comes by.
    let _unsigned = echoing("Unsigned").serve(client.clone()).await.unwrap();
    let _signed = echoing("Signed")
        .signer(key.clone())
        .serve(client.clone())
        .await
        .unwrap();
    let echo = crate::support::security::repo().join("examples/workflows/echo.json");
    let binding = format!("Signed={}", key.public_key());
    let mut serve = crate::support::process::Child::spawn(
        crate::support::process::workflow_node()
            .arg("serve")
            .arg(&echo)
            .args(["--nats-url", &server.url(), "--http", "127.0.0.1:0"])
            .args(["--require-signed-cards", "--agent-key", &binding]),
    );
    let addr = serve.line("web view at http://").await;
    let url = format!("http://{}mcp", addr.trim());
    let summary = mesh_python(&["--mode", "legacy", "--url", &url, "--list-until", "Signed"]).await;
    let tools = summary["tools"].as_array().expect("the tools listed");
    assert!(tools.contains(&json!("Signed")), "{summary}");
    assert!(
        !tools.contains(&json!("Unsigned")),
        "an unsigned card is no tool where signed cards are required: {summary}"
    );
}

/// Runs `mcp_client.py` with `args` to its end: its summary (the last line it printed).
async fn mesh_python(args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/doors/mcp_client.py");
    let out = tokio::process::Command::new(test_harness::python())
        .arg(script)
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("the MCP client ended")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP client failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("a summary");
    serde_json::from_str(last).expect("the summary is JSON")
}
