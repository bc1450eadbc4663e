//! The web view without tokens, attacked from the same browser: a page from another local
//! origin submits a plain HTML form and a `text/plain` fetch at the view's API (both
//! "simple" requests a browser sends without asking), and a request names a host the view
//! is not served under (what a page that rebinds its DNS name to 127.0.0.1 sends). None
//! starts a run; the view's own page still does.

use std::net::SocketAddr;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest, Signer};
use axum::response::Html;
use serde_json::json;
use test_harness::http::request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use workflow_node::ops::runs::Runs;
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, Web};

use crate::support::browser::{driver, Browser};

const HELLO: &str = r#"
name: Hello
workflow:
  description: echoes its input
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {text: "{{workflow.input.text}}"}}
  output_mapping: {text: "{{echo.output.text}}"}
"#;

/// The attacker's page: a form posting `text/plain` into a frame, and a `no-cors` fetch
/// with a `text/plain` body; each sets a flag when the browser has its answer.
fn attack_page(view: SocketAddr) -> String {
    let target = format!("http://{view}/api/workflows/Hello/runs");
    format!(
        r#"<!doctype html><html><body>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" action="{target}" enctype="text/plain" target="sink">
<input name='{{"input":{{"text":"from a form"}},"pad":"' value='"}}'>
</form>
<script>
window.formDone = false; window.fetchDone = false;
document.getElementById("sink").addEventListener("load", () => {{ window.formDone = true; }});
document.getElementById("f").submit();
fetch("{target}", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
  body: JSON.stringify({{input: {{text: "from a fetch"}}}})}})
  .then(() => {{ window.fetchDone = true; }}, (e) => {{ window.fetchDone = "failed: " + e; }});
</script></body></html>"#
    )
}

/// Serves `page` at `/` on a loopback port of its own: another origin than the view's.
async fn serve_page(page: String) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/", axum::routing::get(move || async { Html(page) }));
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

/// The status line of a raw request, sent with exactly these header lines.
async fn raw_status(addr: SocketAddr, head: &str) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or("").to_owned()
}

async fn runs_of_hello(client: &async_nats::Client) -> usize {
    let runs = Runs::open(client.clone(), "mesh").await.expect("the runs");
    runs.all(Some("Hello"))
        .await
        .expect("the runs of Hello")
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_origins_and_other_host_names_cannot_start_runs() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let echo = AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let _echo = echo.serve(client.clone()).await.unwrap();
    let workflows = vec![workflow_node::definition::parse_str(HELLO, "h.yaml").unwrap()];
    let _node = WorkflowNode::start(client.clone(), workflows, Config::default())
        .await
        .unwrap();
    // No token: the open view on loopback, signing with the operator's key.
    let operator = Signer::generate();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(
        client.clone(),
        "mesh",
        Some(operator),
        Access::default(),
        addr,
    )
    .await
    .unwrap();
    let view = web.addr();

    // Another local origin's page fires a form and a text/plain fetch at the view.
    let (evil, _page) = serve_page(attack_page(view)).await;
    let driver = driver().await;
    let browser = Browser::open(&driver).await;
    browser.go(&format!("http://{evil}/")).await;
    browser
        .until(
            "the browser's answers to the form and the fetch",
            "return window.formDone === true && window.fetchDone !== false",
        )
        .await;
    assert_eq!(browser.eval("return window.fetchDone").await, json!(true));
    // The view answered both before the flags were set: a run they started is recorded.
    assert_eq!(
        runs_of_hello(&client).await,
        0,
        "a page of {evil} started a run"
    );

    // DNS rebinding: the view's address under another name is not the view.
    let rebound = raw_status(
        view,
        "GET /api/runs HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(rebound.contains(" 421 "), "{rebound}");
    let body = r#"{"input": {"text": "rebound"}}"#;
    let rebound = raw_status(
        view,
        &format!(
            "POST /api/workflows/Hello/runs HTTP/1.1\r\nHost: evil.example:{}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            view.port(),
            body.len()
        ),
    )
    .await;
    assert!(rebound.contains(" 421 "), "{rebound}");
    // A text/plain POST from a client that is no browser is refused too, with its reason.
    let plain = raw_status(
        view,
        &format!(
            "POST /api/workflows/Hello/runs HTTP/1.1\r\nHost: {view}\r\n\
             Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(plain.contains(" 415 "), "{plain}");
    assert_eq!(runs_of_hello(&client).await, 0);

    // The view's own page still starts a run (same origin, JSON), and so does a JSON client.
    browser.go(&format!("http://{view}/#/mesh")).await;
    let started = browser
        .eval(
            "\
             return fetch('/api/workflows/Hello/runs', {method: 'POST', \
               headers: {'Content-Type': 'application/json'}, \
               body: JSON.stringify({input: {text: 'from the view'}})}).then(r => r.status);",
        )
        .await;
    assert!(
        started.as_u64().is_some_and(|s| (200..300).contains(&s)),
        "the view's own page: {started}"
    );
    let json_client = request(view, "POST", "/api/workflows/Hello/runs", Some(body), &[]).await;
    assert!((200..300).contains(&json_client.status), "{json_client:?}");
    assert_eq!(runs_of_hello(&client).await, 2);
    browser.close().await;
}
