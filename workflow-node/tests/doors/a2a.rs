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

/// A nats-server with the Talker agent and a workflow node serving Greet and Gate.
struct Greeting {
    client: async_nats::Client,
    operator: Signer,
    _node: WorkflowNode,
    _talker: (agent_sdk::AgentHandle, tokio::task::JoinHandle<()>),
    _server: test_harness::NatsServer,
}

impl Greeting {
    async fn start() -> Greeting {
        let server = test_harness::nats();
        let operator = Signer::generate();
        let client = async_nats::connect(server.url()).await.unwrap();
        let talker = talker(&client).await;
        let node = node(&client, &[GREET, GATE], &operator).await;
        Greeting {
            client,
            operator,
            _node: node,
            _talker: talker,
            _server: server,
        }
    }
}

/// A workflow node on `client` serving `workflows` (YAML), with `operator` among its
/// operators.
pub(crate) async fn node(
    client: &async_nats::Client,
    workflows: &[&str],
    operator: &Signer,
) -> WorkflowNode {
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let workflows = workflows
        .iter()
        .map(|y| workflow_node::definition::parse_str(y, "t.yaml").unwrap())
        .collect();
    WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap()
}

/// The web door on a port of its own, on `client`, signing as `operator`, letting in
/// the tokens of `tokens`.
pub(crate) async fn door(
    client: &async_nats::Client,
    operator: &Signer,
    tokens: &AccessArgs,
) -> Web {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let access = Access::new(tokens).unwrap();
    Web::start(client.clone(), "mesh", Some(operator.clone()), access, addr)
        .await
        .unwrap()
}

/// Runs the client script `name` of this folder with `python` and `args` (four minutes at
/// most) and checks that it succeeded and printed `ok <check>` for every one of `checks`
/// (the script asserts; this says it ran every check). `what` names it in a failure.
pub(crate) async fn script_passes(
    python: impl AsRef<std::ffi::OsStr>,
    name: &str,
    args: &[String],
    what: &str,
    checks: &[&str],
) {
    let out = tokio::process::Command::new(python)
        .arg(script(name))
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(240), out)
        .await
        .unwrap_or_else(|_| panic!("{what} finished in time"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    for check in checks {
        assert!(
            stdout.lines().any(|l| l == format!("ok {check}")),
            "check {check:?} did not pass:\n{stdout}\n{stderr}"
        );
    }
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
    let mesh = Greeting::start().await;
    let (client, operator) = (&mesh.client, &mesh.operator);
    let tokens = AccessArgs {
        read_tokens: vec!["reader-secret".into()],
        operator_tokens: vec!["operator-secret".into()],
        push_allow_private: true,
        ..AccessArgs::default()
    };
    // Two replicas of the door: a stream is rejoined at the other one, and both send
    // push notifications.
    let webs = [
        door(client, operator, &tokens).await,
        door(client, operator, &tokens).await,
    ];
    for (web, name) in webs
        .iter()
        .flat_map(|w| ["Greet", "Gate", "Talker"].map(|n| (w, n)))
    {
        card_seen(web.addr(), name).await;
    }
    let args = [
        format!("http://{}", webs[0].addr()),
        "reader-secret".into(),
        "operator-secret".into(),
        format!("http://{}", webs[1].addr()),
    ];
    let checks = [
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
    ];
    let what = "the A2A client script";
    script_passes(
        test_harness::python(),
        "a2a_client.py",
        &args,
        what,
        &checks,
    )
    .await;
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
    let mesh = Greeting::start().await;
    let (client, operator) = (&mesh.client, &mesh.operator);
    let tokens = AccessArgs {
        operator_tokens: vec!["operator-secret".into()],
        push_allow_private: true,
        ..AccessArgs::default()
    };
    let web = door(client, operator, &tokens).await;
    for name in ["Greet", "Gate"] {
        card_seen(web.addr(), name).await;
    }
    let args = [format!("http://{}", web.addr()), "operator-secret".into()];
    let checks = [
        "v0.3 card",
        "v0.3 send",
        "v0.3 get",
        "v0.3 stream",
        "v0.3 push",
        "v0.3 resubscribe and cancel",
    ];
    let what = "the 0.3 client script";
    script_passes(python, "a2a_client_v03.py", &args, what, &checks).await;
}
