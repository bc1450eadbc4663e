//! The web view's JSON API and event stream (`docs/http.md`) against a real nats-server:
//! cards, a run started over HTTP, followed live, approved and ended; cancels; and the
//! errors, each JSON with its status. Starts, cancels and decisions are signed by the web
//! view's key, and the node checks them as it checks the CLI's.

use std::net::SocketAddr;
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest, Signer};
use serde_json::{json, Value};
use test_harness::http::{get, post, Events, TIMEOUT};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, AccessArgs, Web};

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
    - {id: gate, type: approval, depends_on: [first], approvers: [alice], message: "ok to go?", timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: "{{first.output.text}}"}}
  output_mapping: {went: "{{go.output.went}}"}
"#;

/// A server, an agent, a node serving `Gate`, and the keys: `alice` (Gate's approver) and
/// an operator.
struct Mesh {
    _server: test_harness::NatsServer,
    client: async_nats::Client,
    _node: WorkflowNode,
    _agents: Vec<agent_sdk::AgentHandle>,
    alice: Signer,
    operator: Signer,
}

async fn mesh() -> Mesh {
    let server = test_harness::nats();
    let (alice, operator) = (Signer::generate(), Signer::generate());
    let mut config = Config::default();
    config
        .approvers
        .insert("alice".into(), alice.public_key().to_string());
    config.operators.push(operator.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let echo = AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let agents = vec![echo.serve(client.clone()).await.unwrap()];
    let workflows = vec![workflow_node::definition::parse_str(GATE, "t.yaml").unwrap()];
    let node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    Mesh {
        _server: server,
        client,
        _node: node,
        _agents: agents,
        alice,
        operator,
    }
}

impl Mesh {
    /// A web view on this mesh, signing with `signer`.
    async fn web(&self, signer: Option<&Signer>) -> Web {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        Web::start(
            self.client.clone(),
            "mesh",
            signer.cloned(),
            Access::default(),
            addr,
        )
        .await
        .unwrap()
    }
}

/// Asks `GET path` until `done` holds of its JSON; fails after [`TIMEOUT`].
async fn get_until(addr: SocketAddr, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let give_up = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let a = get(addr, path).await;
        assert_eq!(a.status, 200, "GET {path}: {}", a.body);
        let v = a.json();
        if done(&v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "GET {path} never got there: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts a run of `Gate` over HTTP; its execution id.
async fn start(addr: SocketAddr, text: &str) -> String {
    let a = post(
        addr,
        "/api/workflows/Gate/runs",
        &json!({"input": {"text": text}}),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let v = a.json();
    assert!(v["task_id"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    v["execution_id"]
        .as_str()
        .expect("an execution id")
        .to_string()
}

fn node_status(run: &Value, node: &str) -> String {
    run["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["id"] == node))
        .map(|n| n["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_list_workflows_and_agents_with_schemas_and_diagram() {
    let mesh = mesh().await;
    let web = mesh.web(None).await;
    let addr = web.addr();
    let cards = get_until(addr, "/api/cards", |v| {
        let names: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        names.contains(&"Gate") && names.contains(&"Echo")
    })
    .await;
    let by_name = |n: &str| {
        cards
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == n)
            .cloned()
            .unwrap()
    };
    let gate = by_name("Gate");
    assert_eq!(gate["kind"], "workflow");
    assert_eq!(gate["description"], "an agent, an approval, then an agent");
    assert_eq!(gate["input_schema"]["required"], json!(["text"]));
    assert!(
        gate["last_seen"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{gate}"
    );
    assert_eq!(by_name("Echo")["kind"], "agent");

    let a = get(addr, "/api/cards/Gate").await;
    assert_eq!(a.status, 200, "{}", a.body);
    let card = a.json();
    let mermaid = card["mermaid"].as_str().expect("the diagram");
    assert!(
        mermaid.contains("gate") && mermaid.contains("first"),
        "{mermaid}"
    );
    assert!(card["workflow_config"]["nodes"].is_array(), "{card}");

    let a = get(addr, "/api/cards/Nobody").await;
    assert_eq!(a.status, 404);
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert!(
        a.json()["error"].as_str().unwrap().contains("Nobody"),
        "{}",
        a.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_over_http_is_followed_live_approved_and_ends_with_its_output() {
    let mesh = mesh().await;
    let web = mesh.web(Some(&mesh.alice)).await;
    let addr = web.addr();
    let id = start(addr, "hello").await;

    let mut events = Events::open(addr, &format!("/api/runs/{id}/events")).await;
    assert_eq!(events.status, 200);
    assert!(
        events.content_type.starts_with("text/event-stream"),
        "{}",
        events.content_type
    );
    let first = events.next().await.expect("the run");
    assert_eq!(first.event, "run");
    assert_eq!(first.data["execution_id"], id.as_str());
    assert_eq!(first.data["workflow"], "Gate");
    assert!(
        first.data["mermaid"]
            .as_str()
            .is_some_and(|m| m.contains("classDef")),
        "{}",
        first.data
    );

    let waiting = if node_status(&first.data, "gate") == "waiting" {
        first
    } else {
        events
            .until("the gate waits", |e| {
                e.event == "run" && node_status(&e.data, "gate") == "waiting"
            })
            .await
    };
    assert_eq!(node_status(&waiting.data, "first"), "success");
    assert_eq!(
        waiting.data["waiting"]["gate"]["message"], "ok to go?",
        "{}",
        waiting.data
    );

    // Deciding on a node that is not waiting is refused, saying why.
    let a = post(
        addr,
        &format!("/api/runs/{id}/approve"),
        &json!({"node": "first"}),
    )
    .await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(
        a.json()["error"].as_str().unwrap().contains("not waiting"),
        "{}",
        a.body
    );

    let a = post(
        addr,
        &format!("/api/runs/{id}/approve"),
        &json!({"node": "gate", "comment": "looks fine"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["recorded"], true);

    let end = events.until("the end", |e| e.event == "end").await;
    assert_eq!(end.data["status"], "success", "{}", end.data);
    assert!(
        events.next().await.is_none(),
        "the stream closes after its end"
    );

    let a = get(addr, &format!("/api/runs/{id}")).await;
    assert_eq!(a.status, 200);
    let run = a.json();
    assert_eq!(run["status"], "success");
    assert_eq!(run["output"], json!({"went": "hello"}));
    assert_eq!(run["input"], json!({"text": "hello"}));
    for node in ["first", "gate", "go"] {
        assert_eq!(node_status(&run, node), "success", "{run}");
    }

    let history = get(addr, &format!("/api/runs/{id}/history")).await.json();
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(kinds.len() >= 4, "{history}");
    assert!(
        history
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["node"] == "gate"),
        "{history}"
    );

    let list = get(addr, "/api/runs?workflow=Gate&status=success")
        .await
        .json();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|r| r["execution_id"] == id.as_str()),
        "{list}"
    );
    // `timed_out` is a status the filter takes (no run here has one).
    let timed_out = get(addr, "/api/runs?workflow=Gate&status=timed_out")
        .await
        .json();
    assert_eq!(timed_out, serde_json::json!([]));
    let none = get(addr, "/api/runs?workflow=Gate&status=running")
        .await
        .json();
    assert!(
        !none
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["execution_id"] == id.as_str()),
        "{none}"
    );

    // An ended run cannot be approved or cancelled again.
    let a = post(addr, &format!("/api/runs/{id}/cancel"), &json!({})).await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(
        a.json()["error"]
            .as_str()
            .unwrap()
            .contains("already ended"),
        "{}",
        a.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_fails_the_run_and_a_cancel_stops_one() {
    let mesh = mesh().await;
    let web = mesh.web(Some(&mesh.alice)).await;
    let addr = web.addr();

    let rejected = start(addr, "no").await;
    get_until(addr, &format!("/api/runs/{rejected}"), |r| {
        node_status(r, "gate") == "waiting"
    })
    .await;
    let a = post(
        addr,
        &format!("/api/runs/{rejected}/reject"),
        &json!({"node": "gate", "comment": "not today"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let run = get_until(addr, &format!("/api/runs/{rejected}"), |r| {
        r["status"] != "running"
    })
    .await;
    assert_eq!(run["status"], "failure", "{run}");

    let cancelled = start(addr, "stop").await;
    get_until(addr, &format!("/api/runs/{cancelled}"), |r| {
        node_status(r, "gate") == "waiting"
    })
    .await;
    let mut events = Events::open(addr, &format!("/api/runs/{cancelled}/events")).await;
    let first = events.next().await.expect("the run");
    assert_eq!(
        node_status(&first.data, "gate"),
        "waiting",
        "{}",
        first.data
    );
    let a = post(
        addr,
        &format!("/api/runs/{cancelled}/cancel"),
        &json!({"reason": "changed my mind"}),
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.body);
    let end = events.until("the end", |e| e.event == "end").await;
    assert_eq!(end.data["status"], "cancelled", "{}", end.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_and_cancels_are_checked_against_the_web_views_key() {
    let mesh = mesh().await;
    let alice = mesh.web(Some(&mesh.alice)).await;
    let operator = mesh.web(Some(&mesh.operator)).await;
    let unsigned = mesh.web(None).await;
    let id = start(alice.addr(), "keys").await;
    get_until(alice.addr(), &format!("/api/runs/{id}"), |r| {
        node_status(r, "gate") == "waiting"
    })
    .await;

    // Gate lists alice: the operator's key may not decide, and an unsigned decision is
    // refused.
    for web in [&operator, &unsigned] {
        let a = post(
            web.addr(),
            &format!("/api/runs/{id}/approve"),
            &json!({"node": "gate"}),
        )
        .await;
        assert_eq!(a.status, 403, "{}", a.body);
        assert!(a.json()["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    // Alice started it: an unsigned cancel is refused; the operator's goes through.
    let a = post(
        unsigned.addr(),
        &format!("/api/runs/{id}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.body);
    let a = post(
        operator.addr(),
        &format!("/api/runs/{id}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.body);
    let run = get_until(alice.addr(), &format!("/api/runs/{id}"), |r| {
        r["status"] != "running"
    })
    .await;
    assert_eq!(run["status"], "cancelled", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_json_error_naming_what_is_wrong() {
    let mesh = mesh().await;
    let web = mesh.web(Some(&mesh.alice)).await;
    let addr = web.addr();
    let expect = |a: test_harness::http::Answer, status: u16, words: &str| {
        assert_eq!(a.status, status, "{}", a.body);
        assert_eq!(a.header("content-type"), Some("application/json"));
        let error = a.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains(words), "'{error}' does not say '{words}'");
    };
    expect(
        get(addr, "/api/runs?status=sleeping").await,
        400,
        "sleeping",
    );
    expect(get(addr, "/api/runs?colour=red").await, 400, "colour");
    expect(get(addr, "/api/runs?limit=many").await, 400, "many");
    expect(get(addr, "/api/runs/wf-nothing").await, 404, "wf-nothing");
    expect(
        get(addr, "/api/runs/wf-nothing/events").await,
        404,
        "wf-nothing",
    );
    expect(get(addr, "/api/nothing").await, 404, "no such");
    let a = test_harness::http::request(
        addr,
        "POST",
        "/api/workflows/Gate/runs",
        Some("{not json"),
        &[],
    )
    .await;
    expect(a, 400, "not valid JSON");
    expect(
        post(addr, "/api/workflows/Gate/runs", &json!({"inptu": {}})).await,
        400,
        "inptu",
    );
    expect(
        post(
            addr,
            "/api/workflows/Gate/runs",
            &json!({"input": {"txt": 1}}),
        )
        .await,
        400,
        "text",
    );
    expect(
        post(addr, "/api/workflows/Nowhere/runs", &json!({"input": {}})).await,
        404,
        "Nowhere",
    );
    let id = start(addr, "x").await;
    expect(
        post(addr, &format!("/api/runs/{id}/approve"), &json!({})).await,
        400,
        "node",
    );
    expect(
        post(
            addr,
            &format!("/api/runs/{id}/approve"),
            &json!({"node": 3}),
        )
        .await,
        400,
        "node",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_and_the_vendored_mermaid_are_served_from_the_binary() {
    let mesh = mesh().await;
    let web = mesh.web(None).await;
    let addr = web.addr();
    let index = get(addr, "/").await;
    assert_eq!(index.status, 200);
    assert!(index
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(index.body.contains("/vendor/mermaid.min.js") && index.body.contains("/app.js"));
    assert!(!index.body.contains("https://"), "no CDN: {}", index.body);
    let app = get(addr, "/app.js").await;
    assert_eq!(app.status, 200);
    assert!(app.body.contains("/api/runs/"), "the pages use the API");
    let mermaid = get(addr, "/vendor/mermaid.min.js").await;
    assert_eq!(mermaid.status, 200);
    assert!(mermaid
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    assert!(mermaid.body.len() > 1_000_000 && mermaid.body.contains("mermaid"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_give_read_or_operator_access_and_an_open_api_stays_on_loopback() {
    let mesh = mesh().await;
    let tokens = AccessArgs {
        read_tokens: vec!["reader-secret".into()],
        operator_tokens: vec!["operator-secret".into()],
        ..AccessArgs::default()
    };
    let access = Access::new(&tokens).unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(
        mesh.client.clone(),
        "mesh",
        Some(mesh.alice.clone()),
        access,
        addr,
    )
    .await
    .unwrap();
    let addr = web.addr();
    let bearer = |t: &str| format!("Bearer {t}");
    let call = |method: &'static str, path: String, token: Option<String>| async move {
        let body = (method == "POST").then(|| json!({"input": {"text": "t"}}).to_string());
        let headers: Vec<(&str, &str)> = match &token {
            Some(t) => vec![("Authorization", t.as_str())],
            None => vec![],
        };
        test_harness::http::request(addr, method, &path, body.as_deref(), &headers).await
    };

    // The pages hold no data: always served.
    assert_eq!(get(addr, "/").await.status, 200);
    // No token, or an unknown one: 401, saying what is needed.
    for token in [None, Some(bearer("guess"))] {
        let a = call("GET", "/api/runs".into(), token).await;
        assert_eq!(a.status, 401, "{}", a.body);
        assert_eq!(a.header("www-authenticate"), Some("Bearer"));
        assert!(a.json()["error"].as_str().unwrap().contains("token"));
    }
    // A read token reads, but may not start a run.
    let a = call("GET", "/api/runs".into(), Some(bearer("reader-secret"))).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = call(
        "POST",
        "/api/workflows/Gate/runs".into(),
        Some(bearer("reader-secret")),
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.json()["error"]
        .as_str()
        .unwrap()
        .contains("operator token"));
    // An operator token does both.
    let a = call(
        "POST",
        "/api/workflows/Gate/runs".into(),
        Some(bearer("operator-secret")),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let id = a.json()["execution_id"].as_str().unwrap().to_string();
    // An event stream takes the token in its query (EventSource sends no headers).
    let events = Events::open(addr, &format!("/api/runs/{id}/events")).await;
    assert_eq!(events.status, 401);
    let mut events = Events::open(
        addr,
        &format!("/api/runs/{id}/events?access_token=reader-secret"),
    )
    .await;
    assert_eq!(events.status, 200);
    assert_eq!(
        events.next().await.expect("the run").data["execution_id"],
        id.as_str()
    );

    // Without tokens, only a loopback address is served.
    let open = Web::start(
        mesh.client.clone(),
        "mesh",
        None,
        Access::default(),
        "0.0.0.0:0".parse().unwrap(),
    )
    .await;
    let e = open
        .expect_err("an open API on all addresses is refused")
        .to_string();
    assert!(
        e.contains("--http-operator-token") && e.contains("loopback"),
        "{e}"
    );
    let empty = AccessArgs {
        read_tokens: vec![" ".into()],
        ..AccessArgs::default()
    };
    let e = Access::new(&empty).expect_err("an empty token").to_string();
    assert!(e.contains("--http-read-token"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_paused_resumed_and_retried_over_http() {
    let mesh = mesh().await;
    let web = mesh.web(Some(&mesh.alice)).await;
    let addr = web.addr();
    let id = start(addr, "again").await;
    let path = format!("/api/runs/{id}");
    get_until(addr, &path, |r| node_status(r, "gate") == "waiting").await;

    let a = post(addr, &format!("{path}/pause"), &json!({"reason": "lunch"})).await;
    assert_eq!(a.status, 202, "{}", a.body);
    get_until(addr, &path, |r| r["status"] == "paused").await;
    // The list filters on it, as `runs list --status paused` does.
    let listed = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .any(|r| r["execution_id"] == json!(id))
    };
    let paused = get(addr, "/api/runs?status=paused").await.json();
    assert!(listed(&paused), "{paused}");
    let running = get(addr, "/api/runs?status=running").await.json();
    assert!(!listed(&running), "{running}");
    let a = post(addr, &format!("{path}/pause"), &json!({})).await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(a.body.contains("already paused"), "{}", a.body);
    let a = post(addr, &format!("{path}/resume"), &json!({})).await;
    assert_eq!(a.status, 202, "{}", a.body);
    get_until(addr, &path, |r| r["status"] == "running").await;

    // A run still going cannot be retried; once rejected, it can.
    let a = post(addr, &format!("{path}/retry"), &json!({})).await;
    assert_eq!(a.status, 409, "{}", a.body);
    let a = post(addr, &format!("{path}/reject"), &json!({"node": "gate"})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    get_until(addr, &path, |r| r["status"] == "failure").await;
    let a = post(addr, &format!("{path}/retry"), &json!({})).await;
    assert_eq!(a.status, 202, "{}", a.body);
    let v = a.json();
    assert_eq!(v["retry_of"], json!(id), "{v}");
    let retry = v["execution_id"].as_str().expect("the new run").to_string();
    // `first` is kept; the rejected gate asks again.
    let run = get_until(addr, &format!("/api/runs/{retry}"), |r| {
        node_status(r, "gate") == "waiting"
    })
    .await;
    assert_eq!(run["retry_of"], json!(id), "{run}");
    assert_eq!(node_status(&run, "first"), "success", "{run}");
}
