//! A2A over HTTP (`docs/a2a.md`) with the official Python SDK's client (`a2a-sdk` 1.x:
//! A2A 1.0, and 0.3 through its compatibility transport) and raw JSON-RPC for what the
//! SDK would never send: discovery by card, send, stream, get, cancel, resubscribe after
//! dropping a stream, list, and hostile input (a body too large, bad JSON, an unknown
//! method, a read token that sends, no token, a task of another workflow) answered with
//! A2A's errors; push notifications to a local receiver that is down at first, signed
//! with the config's token. The script asserts; this test checks it ran every check.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
pub(crate) use test_harness::http::card_seen;

use futures::StreamExt;
use tokio::sync::Semaphore;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest, Signer};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, AccessArgs, Web};

const GREET: &str = r#"
name: Greet
workflow:
  description: says hello through an agent that talks on the way
  input_schema:
    type: object
    properties: {text: {type: string}}
    required: [text]
  nodes:
    - {id: say, type: agent, agent_name: Talker, input: {text: "{{workflow.input.text}}"}}
  output_mapping: {said: "{{say.output.text}}"}
"#;

const GATE: &str = r#"
name: Gate
workflow:
  description: an agent, then an approval that waits
  input_schema:
    type: object
    properties: {text: {type: string}}
    required: [text]
  nodes:
    - {id: first, type: agent, agent_name: Talker, input: {text: "{{workflow.input.text}}"}}
    - {id: gate, type: approval, depends_on: [first], message: "ok to go?", timeout: 1h}
  output_mapping: {went: "{{first.output.text}}"}
"#;

/// An agent that says "thinking about it" and echoes its input once its words were
/// forwarded to a caller's inbox: the words are then sure to be in the caller's stream,
/// before the answer (a workflow node drops words of a call that has ended).
async fn talker(
    client: &async_nats::Client,
) -> (agent_sdk::AgentHandle, tokio::task::JoinHandle<()>) {
    let said = Arc::new(Semaphore::new(0));
    let mut inboxes = client.subscribe("_INBOX.>").await.unwrap();
    let heard = said.clone();
    let watch = tokio::spawn(async move {
        while let Some(m) = inboxes.next().await {
            if String::from_utf8_lossy(&m.payload).contains("thinking about it") {
                heard.add_permits(1);
            }
        }
    });
    client.flush().await.unwrap();
    let talker = AgentBuilder::new("Talker")
        .description("says what it does, then echoes its input")
        .handler(handler_fn(move |req: NodeRequest| {
            let said = said.clone();
            async move {
                req.send_status("thinking about it").await.ok();
                said.acquire().await.expect("never closed").forget();
                Ok(req.input)
            }
        }));
    (talker.serve(client.clone()).await.unwrap(), watch)
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/doors")
        .join(name)
}

/// The interpreter of a venv of its own under `target/` with the official SDK's last 0.3
/// release (`doors/a2a-0.3-requirements.txt`): it cannot share the project's `.venv`.
/// Made once, then reused.
fn python_v03() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/py-a2a-0.3");
    let python = dir.join("bin/python");
    let ready = || {
        std::process::Command::new(&python)
            .args([
                "-c",
                "import importlib.metadata as m; assert m.version('a2a-sdk') == '0.3.26'",
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ready() {
        let made = std::process::Command::new(test_harness::python())
            .args(["-m", "venv"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(made.success(), "making the 0.3 venv at {}", dir.display());
        let installed = std::process::Command::new(&python)
            .args(["-m", "pip", "install", "-q", "-r"])
            .arg(script("a2a-0.3-requirements.txt"))
            .status()
            .unwrap();
        assert!(
            installed.success(),
            "installing a2a-sdk 0.3 into {}",
            dir.display()
        );
    }
    python
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_a2a_client_drives_workflows_over_http() {
    let server = test_harness::nats();
    let operator = Signer::generate();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let _talker = talker(&client).await;
    let workflows = [GREET, GATE]
        .iter()
        .map(|y| workflow_node::definition::parse_str(y, "t.yaml").unwrap())
        .collect();
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    let tokens = AccessArgs {
        read_tokens: vec!["reader-secret".into()],
        operator_tokens: vec!["operator-secret".into()],
        push_allow_private: true,
        ..AccessArgs::default()
    };
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    // Two replicas of the door: a stream is rejoined at the other one, and both send
    // push notifications.
    let mut webs = Vec::new();
    for _ in 0..2 {
        let access = Access::new(&tokens).unwrap();
        let web = Web::start(client.clone(), "mesh", Some(operator.clone()), access, addr);
        webs.push(web.await.unwrap());
    }
    for (web, name) in webs
        .iter()
        .flat_map(|w| ["Greet", "Gate", "Talker"].map(|n| (w, n)))
    {
        card_seen(web.addr(), name).await;
    }
    let out = tokio::process::Command::new(test_harness::python())
        .arg(script("a2a_client.py"))
        .arg(format!("http://{}", webs[0].addr()))
        .args(["reader-secret", "operator-secret"])
        .arg(format!("http://{}", webs[1].addr()))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(240), out)
        .await
        .expect("the A2A client script finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the A2A client script failed:\n{stdout}\n{stderr}"
    );
    for check in [
        "card",
        "send",
        "stream",
        "get",
        "resubscribe",
        "cancel",
        "list",
        "push",
        "push once",
        "v0.3 send",
        "v0.3 stream",
        "hostile",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("ok {check}")),
            "check {check:?} did not pass:\n{stdout}\n{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_notifications_go_to_public_addresses_only_unless_allowed() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let talker = AgentBuilder::new("Talker")
        .description("echoes")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let _talker = talker.serve(client.clone()).await.unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(client.clone(), "mesh", None, Access::default(), addr)
        .await
        .unwrap();
    card_seen(web.addr(), "Talker").await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/",
        "http://localhost:9/",
    ] {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1,
            "method": "tasks/pushNotificationConfig/set",
            "params": {"taskId": "t", "pushNotificationConfig": {"url": url}}});
        let a = test_harness::http::request(
            web.addr(),
            "POST",
            "/a2a/Talker",
            Some(&body.to_string()),
            &[("Content-Type", "application/json")],
        )
        .await;
        // The address is judged first, whatever the task.
        let v = a.json();
        assert_eq!(v["error"]["code"], -32602, "{url}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a public address"),
            "{url}: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_0_3_client_drives_workflows_over_http() {
    let python = tokio::task::spawn_blocking(python_v03).await.unwrap();
    let server = test_harness::nats();
    let operator = Signer::generate();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let _talker = talker(&client).await;
    let workflows = [GREET, GATE]
        .iter()
        .map(|y| workflow_node::definition::parse_str(y, "t.yaml").unwrap())
        .collect();
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    let tokens = AccessArgs {
        operator_tokens: vec!["operator-secret".into()],
        push_allow_private: true,
        ..AccessArgs::default()
    };
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let access = Access::new(&tokens).unwrap();
    let web = Web::start(client.clone(), "mesh", Some(operator), access, addr)
        .await
        .unwrap();
    for name in ["Greet", "Gate"] {
        card_seen(web.addr(), name).await;
    }
    let out = tokio::process::Command::new(python)
        .arg(script("a2a_client_v03.py"))
        .arg(format!("http://{}", web.addr()))
        .arg("operator-secret")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(240), out)
        .await
        .expect("the 0.3 client script finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the 0.3 client script failed:\n{stdout}\n{stderr}"
    );
    for check in [
        "card",
        "send",
        "get",
        "stream",
        "push",
        "resubscribe and cancel",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("ok v0.3 {check}")),
            "check {check:?} did not pass:\n{stdout}\n{stderr}"
        );
    }
}
