//! Remote agents: an agent outside NATS, served over A2A HTTP by the official A2A SDK's
//! server side (`remote_agent.py` beside this file, a2a-sdk 1.3.0 with its 0.3 layer on),
//! declared in the agents file and called by a workflow on a real nats-server and node: an
//! answer, a failure, a cancel (the remote task is cancelled), a timeout, the trace context
//! passed on, and the checks at start (the card's name, the SSRF rule). Over https too:
//! the agent served by uvicorn with a certificate of a CA made for the test, called with
//! that CA as the declaration's `ca_file`, and refused at start with another CA's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_sdk::{CallError, Mesh};
use serde_json::json;
use tokio::io::AsyncBufReadExt as _;
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

const TOKEN: &str = "remote-secret-token";

const SHOUT: &str = r#"
name: Shout
workflow:
  description: asks a remote agent to shout
  input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
  nodes:
    - {id: shout, type: agent, agent_name: Shouter, input: {text: "{{workflow.input.text}}"}}
  output_mapping: {shouted: "{{shout.output.shouted}}"}
"#;

/// The remote agent process, and the lines it printed.
struct Remote {
    _child: tokio::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    port: u16,
    scheme: &'static str,
}

impl Remote {
    /// The agent over plain http.
    async fn start() -> Remote {
        Remote::start_serving(None).await
    }

    /// The agent over https, with the server certificate of `ca_dir`
    /// ([`test_harness::tls::local_ca`]).
    async fn start_tls(ca_dir: &Path) -> Remote {
        Remote::start_serving(Some(ca_dir)).await
    }

    async fn start_serving(tls: Option<&Path>) -> Remote {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/doors/remote_agent.py");
        let mut command = tokio::process::Command::new(test_harness::python());
        command.arg(script).env("REMOTE_TOKEN", TOKEN);
        if let Some(dir) = tls {
            command
                .env("REMOTE_TLS_CERT", dir.join("server-cert.pem"))
                .env("REMOTE_TLS_KEY", dir.join("server-key.pem"));
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the remote agent runs");
        let mut out = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = out.next_line().await {
                let _ = tx.send(line);
            }
        });
        let mut remote = Remote {
            _child: child,
            lines,
            port: 0,
            scheme: if tls.is_some() { "https" } else { "http" },
        };
        let ready = remote.line("ready ").await;
        remote.port = ready.parse().expect("a port");
        remote
    }

    /// The rest of the next line starting with `prefix` (others skipped).
    async fn line(&mut self, prefix: &str) -> String {
        let wait = async {
            loop {
                let line = self
                    .lines
                    .recv()
                    .await
                    .expect("the remote agent is running");
                if let Some(rest) = line.strip_prefix(prefix) {
                    return rest.to_owned();
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("the remote agent printed no {prefix:?} line"))
    }

    /// The agents file declaring it as `Shouter`, with `extra` lines in its `remote:`.
    fn agents_file(&self, token_file: &Path, extra: &str) -> String {
        format!(
            "agents:\n  - name: Shouter\n    output_schema: {{type: object, required: [shouted]}}\n    remote:\n      url: {}://127.0.0.1:{}/\n      token_file: {}\n      allow_private: true\n{extra}",
            self.scheme,
            self.port,
            token_file.display()
        )
    }
}

/// A server, the remote agent, its proxy from `agents` (with `extra` in `remote:`) and a
/// node serving `Shout`.
struct Setup {
    _server: test_harness::NatsServer,
    mesh: Mesh,
    remote: Remote,
    _proxy: Vec<agent_sdk::AgentHandle>,
    _node: WorkflowNode,
    _dir: tempfile::TempDir,
}

async fn setup(extra: &str) -> Setup {
    setup_with(Remote::start().await, extra).await
}

/// [`setup`] with `remote` as the remote agent.
async fn setup_with(remote: Remote, extra: &str) -> Setup {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let text = remote.agents_file(&token_file, extra);
    let agents =
        agent_sdk::StubFile::parse(&text, "agents.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    let proxy = agent_sdk::serve_stubs(client.clone(), "mesh", agents)
        .await
        .expect("the remote agent's proxy serves");
    let wf = parse_str(SHOUT, "shout.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    let node = WorkflowNode::start(client.clone(), vec![wf], Config::default())
        .await
        .expect("node");
    Setup {
        _server: server,
        mesh: Mesh::new(client).timeout(Duration::from_secs(60)),
        remote,
        _proxy: proxy,
        _node: node,
        _dir: dir,
    }
}

#[tokio::test]
async fn a_workflow_calls_a_remote_a2a_agent_and_passes_its_trace_on() {
    let mut s = setup("").await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let out = s
        .mesh
        .agent("Shout")
        .header("traceparent", tp)
        .call(json!({"text": "hi"}))
        .await
        .expect("Shout ran");
    assert_eq!(out, json!({"shouted": "HI"}));
    let seen = s.remote.line("traceparent ").await;
    assert!(
        seen.contains("4bf92f3577b34da6a3ce929d0e0e4736"),
        "the remote agent saw the caller's trace: {seen}"
    );
}

#[tokio::test]
async fn a_failed_remote_task_fails_the_node_with_its_message() {
    let s = setup("").await;
    let e = s
        .mesh
        .agent("Shout")
        .call(json!({"text": "fail"}))
        .await
        .expect_err("the run fails");
    let CallError::Failed { message, node, .. } = &e else {
        panic!("a failure, not {e:?}");
    };
    assert_eq!(node.as_deref(), Some("shout"), "{e:?}");
    assert!(message.contains("asked to fail"), "{message}");
}

#[tokio::test]
async fn cancelling_the_run_cancels_the_remote_task() {
    let mut s = setup("").await;
    let call = s.mesh.agent("Shout").call(json!({"text": "wait"}));
    let task = s.remote.line("waiting ").await;
    let ended = call.cancel().await;
    assert!(
        matches!(ended, Err(CallError::Canceled { .. })),
        "{ended:?}"
    );
    assert_eq!(s.remote.line("cancelled ").await, task);
}

#[tokio::test]
async fn a_remote_call_past_its_timeout_fails_as_such_and_is_cancelled() {
    let mut s = setup("      timeout: 1s\n").await;
    let call = s.mesh.agent("Shout").call(json!({"text": "wait"}));
    let task = s.remote.line("waiting ").await;
    let e = call.await.expect_err("the run fails");
    let CallError::Failed { message, .. } = &e else {
        panic!("a failure, not {e:?}");
    };
    assert!(message.contains("did not finish in time"), "{message}");
    assert_eq!(s.remote.line("cancelled ").await, task);
}

#[tokio::test]
async fn a_remote_agent_is_checked_before_it_is_served() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let remote = Remote::start().await;
    let serve = |text: String| {
        let client = client.clone();
        async move {
            let agents = agent_sdk::StubFile::parse(&text, "agents.yaml")
                .unwrap_or_else(|p| panic!("{p:?}"));
            agent_sdk::serve_stubs(client, "mesh", agents)
                .await
                .map(drop)
                .expect_err("refused")
                .to_string()
        }
    };
    let url = format!("http://127.0.0.1:{}/", remote.port);
    // Loopback is kept from calls unless the file allows it.
    let e = serve(format!(
        "agents:\n  - name: Shouter\n    remote: {{url: \"{url}\"}}\n"
    ))
    .await;
    assert!(e.contains("allow_private"), "{e}");
    // The card must bear the declared name.
    let e = serve(format!(
        "agents:\n  - name: Whisperer\n    remote: {{url: \"{url}\", allow_private: true}}\n"
    ))
    .await;
    assert!(e.contains("not \"Whisperer\""), "{e}");
    // A token from a variable that is not set stops the start, naming the variable only.
    let e = serve(format!(
        "agents:\n  - name: Shouter\n    remote: {{url: \"{url}\", allow_private: true, token_env: MESH_TEST_UNSET_TOKEN}}\n"
    ))
    .await;
    assert!(e.contains("MESH_TEST_UNSET_TOKEN is not set"), "{e}");
    // A CA file is for https only: an http URL with one is a problem of the file.
    let problems = agent_sdk::StubFile::parse(
        &format!("agents:\n  - name: Shouter\n    remote: {{url: \"{url}\", ca_file: ca.pem}}\n"),
        "agents.yaml",
    )
    .map(drop)
    .expect_err("refused at load");
    let problems = format!("{problems:?}");
    assert!(
        problems.contains("agents[0].remote.ca_file: a CA file is for an https:// url"),
        "{problems}"
    );
    // Credentials in the URL are refused.
    let e = serve(format!(
        "agents:\n  - name: Shouter\n    remote: {{url: \"http://u:p@127.0.0.1:{}/\", allow_private: true}}\n",
        remote.port
    ))
    .await;
    assert!(e.contains("credentials in the URL"), "{e}");
}

#[tokio::test]
async fn a_wrong_token_fails_the_call_as_permanent_and_is_never_printed() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let remote = Remote::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "the-wrong-secret").expect("token file");
    let text = remote.agents_file(&token_file, "");
    let agents =
        agent_sdk::StubFile::parse(&text, "agents.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    let _proxy = agent_sdk::serve_stubs(client.clone(), "mesh", agents)
        .await
        .expect("served: the card needs no token");
    let e = Mesh::new(client)
        .agent("Shouter")
        .call(json!({"text": "hi"}))
        .await
        .expect_err("refused");
    let text = format!("{e:?}");
    assert!(text.contains("401"), "{text}");
    assert!(text.contains("permanent"), "{text}");
    assert!(!text.contains("the-wrong-secret"), "{text}");
}

#[tokio::test]
async fn a_remote_agent_over_https_is_called_with_its_ca_and_refused_with_another() {
    let dirs = tempfile::tempdir().expect("dir");
    let ours = test_harness::tls::local_ca(&dirs.path().join("ours"));
    let other = test_harness::tls::local_ca(&dirs.path().join("other"));
    let remote = Remote::start_tls(&ours).await;
    let ca = |dir: &Path| format!("      ca_file: {}\n", dir.join("ca.pem").display());
    let mut s = setup_with(remote, &ca(&ours)).await;
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let out = s
        .mesh
        .agent("Shout")
        .header("traceparent", tp)
        .call(json!({"text": "over tls"}))
        .await
        .expect("Shout ran over https");
    assert_eq!(out, json!({"shouted": "OVER TLS"}));
    let seen = s.remote.line("traceparent ").await;
    assert!(seen.contains("0af7651916cd43dd8448eb211c80319c"), "{seen}");

    // Another CA's file, and the system's roots: the certificate is refused at start,
    // saying so, before any token is sent.
    let client = async_nats::connect(s._server.url()).await.expect("connect");
    let token_file = s._dir.path().join("token");
    for extra in [ca(&other), String::new()] {
        let text = s.remote.agents_file(&token_file, &extra);
        let agents =
            agent_sdk::StubFile::parse(&text, "agents.yaml").unwrap_or_else(|p| panic!("{p:?}"));
        let e = agent_sdk::serve_stubs(client.clone(), "other", agents)
            .await
            .map(drop)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("TLS certificate was refused") && e.contains("invalid peer certificate"),
            "{extra}: {e}"
        );
        assert!(e.contains("ca_file"), "the error says what to check: {e}");
    }
}
