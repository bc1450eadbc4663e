//! Webhook triggers over HTTP against a real nats-server: deliveries signed as GitHub
//! and Stripe sign theirs, sent by a real HTTP client (reqwest, and Python's `urllib`),
//! start one run each, whatever the number of times they are sent; every bad delivery
//! gets its status and reason, and no answer carries the secret.

use std::net::SocketAddr;
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use test_harness::http::{get, TIMEOUT};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, Web};

const SECRET: &str = "It's a Secret to Everybody";
const STRIPE_SECRET: &str = "whsec_abc123";

fn workflow(dir: &std::path::Path) -> String {
    format!(
        r#"
name: Pushes
workflow:
  description: a run per push to main, and per paid invoice
  input_schema:
    type: object
    required: [repo]
    properties: {{repo: {{type: string}}, by: {{type: string}}}}
  triggers:
    - name: gh-push
      webhook: github
      secret_file: {gh}
      condition: "{{{{event.payload.ref}}}} == 'refs/heads/main'"
      input: {{repo: "{{{{event.payload.repository.full_name}}}}", by: "{{{{event.headers.x-github-event}}}}"}}
      dedup_key: "{{{{event.headers.x-github-delivery}}}}"
    - name: paid
      webhook: stripe
      secret_file: {stripe}
      input: {{repo: "{{{{event.payload.id}}}}"}}
      dedup_key: "{{{{event.payload.id}}}}"
  nodes:
    - {{id: echo, type: agent, agent_name: Echo, input: {{repo: "{{{{workflow.input.repo}}}}"}}}}
  output_mapping: {{repo: "{{{{echo.output.repo}}}}"}}
"#,
        gh = dir.join("gh").display(),
        stripe = dir.join("stripe").display(),
    )
}

/// A server, an Echo agent, a node serving `Pushes` and a web view.
struct Hooks {
    _server: test_harness::NatsServer,
    _node: WorkflowNode,
    _agents: Vec<agent_sdk::AgentHandle>,
    _dir: tempfile::TempDir,
    web: Web,
}

async fn hooks() -> Hooks {
    let dir = tempfile::tempdir().unwrap();
    // A file's final newline is not part of the secret.
    std::fs::write(dir.path().join("gh"), format!("{SECRET}\n")).unwrap();
    std::fs::write(dir.path().join("stripe"), STRIPE_SECRET).unwrap();
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let echo = AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let agents = vec![echo.serve(client.clone()).await.unwrap()];
    let text = workflow(dir.path());
    let workflows = vec![workflow_node::definition::parse_str(&text, "t.yaml").unwrap()];
    let node = WorkflowNode::start(client.clone(), workflows, Config::default())
        .await
        .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(client, "mesh", None, Access::default(), addr)
        .await
        .unwrap();
    Hooks {
        _server: server,
        _node: node,
        _agents: agents,
        _dir: dir,
        web,
    }
}

fn hmac_hex(key: &str, data: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(data);
    hex::encode(mac.finalize().into_bytes())
}

/// An answer: its status and JSON body.
async fn send(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    assert!(
        !text.contains(SECRET) && !text.contains(STRIPE_SECRET),
        "{text}"
    );
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, v)
}

/// GitHub's headers for `body`, delivery `id`, signed with `secret`.
fn github(body: &[u8], id: &str, secret: &str) -> Vec<(&'static str, String)> {
    vec![
        ("content-type", "application/json".into()),
        ("x-github-event", "push".into()),
        ("x-github-delivery", id.into()),
        (
            "x-hub-signature-256",
            format!("sha256={}", hmac_hex(secret, body)),
        ),
    ]
}

/// Reads run `id` until it has ended; its JSON.
async fn ended(addr: SocketAddr, id: &str) -> Value {
    let give_up = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let a = get(addr, &format!("/api/runs/{id}")).await;
        let ended = ["success", "failure", "cancelled", "timed_out"];
        if a.status == 200 && ended.iter().any(|s| a.json()["status"] == *s) {
            return a.json();
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "run {id}: {}",
            a.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_github_delivery_starts_one_run_however_often_it_is_sent() {
    let h = hooks().await;
    let addr = h.web.addr();
    let body = br#"{"ref": "refs/heads/main", "repository": {"full_name": "acme/app"}}"#;
    let (status, first) = send(addr, "/hooks/gh-push", &github(body, "d-1", SECRET), body).await;
    assert_eq!(status, 202, "{first}");
    let run = first["run_id"].as_str().expect("a run id").to_string();
    assert_eq!(first["workflow"], "Pushes");
    // GitHub's "redeliver": the same delivery id starts nothing new.
    let (status, again) = send(addr, "/hooks/gh-push", &github(body, "d-1", SECRET), body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["run_id"], run.as_str());
    assert_eq!(again["duplicate"], true);
    let done = ended(addr, &run).await;
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["output"]["repo"], "acme/app", "{done}");
    // Another delivery id is another run.
    let (status, other) = send(addr, "/hooks/gh-push", &github(body, "d-2", SECRET), body).await;
    assert_eq!(status, 202, "{other}");
    assert_ne!(other["run_id"], run.as_str());
}

/// A bad delivery: what it is, its headers and body, the status and a word of the reason.
type Case = (
    &'static str,
    Vec<(&'static str, String)>,
    Vec<u8>,
    u16,
    &'static str,
);

#[tokio::test]
async fn each_bad_delivery_gets_its_status_and_reason() {
    let h = hooks().await;
    let addr = h.web.addr();
    let body = br#"{"ref": "refs/heads/main", "repository": {"full_name": "acme/app"}}"#;
    let cases: Vec<Case> = vec![
        (
            "wrong secret",
            github(body, "b-1", "guess"),
            body.to_vec(),
            401,
            "does not match",
        ),
        (
            "unsigned",
            github(body, "b-2", SECRET)[..3].to_vec(),
            body.to_vec(),
            401,
            "missing",
        ),
        (
            "signed for another body",
            github(b"{}", "b-3", SECRET),
            body.to_vec(),
            401,
            "does not match",
        ),
        (
            "not JSON",
            github(b"{\"ref\": ", "b-4", SECRET),
            b"{\"ref\": ".to_vec(),
            400,
            "not JSON",
        ),
        (
            // Signed, but without the header its key is read from.
            "key missing",
            vec![
                github(body, "b-6", SECRET)[0].clone(),
                github(body, "b-6", SECRET)[3].clone(),
            ],
            body.to_vec(),
            422,
            "dedup_key is null",
        ),
        (
            "input refused",
            github(br#"{"ref": "refs/heads/main"}"#, "b-7", SECRET),
            br#"{"ref": "refs/heads/main"}"#.to_vec(),
            422,
            "input_schema",
        ),
    ];
    for (what, headers, body, want, reason) in cases {
        let (status, v) = send(addr, "/hooks/gh-push", &headers, &body).await;
        assert_eq!(status, want, "{what}: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains(reason), "{what}: {v}");
        assert!(v.get("run_id").is_none(), "{what}: {v}");
    }
    // A form-encoded delivery (GitHub's other content type), signed: 415.
    let form = b"payload=%7B%7D";
    let mut headers = github(form, "b-5", SECRET);
    headers[0].1 = "application/x-www-form-urlencoded".into();
    let (status, v) = send(addr, "/hooks/gh-push", &headers, form).await;
    assert_eq!(status, 415, "{v}");
    // A push to another branch starts nothing, and says so.
    let side = br#"{"ref": "refs/heads/dev", "repository": {"full_name": "acme/app"}}"#;
    let (status, v) = send(addr, "/hooks/gh-push", &github(side, "b-8", SECRET), side).await;
    assert_eq!(status, 200, "{v}");
    assert!(v.get("run_id").is_none(), "{v}");
    let (status, v) = send(addr, "/hooks/nobody", &github(body, "b-9", SECRET), body).await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = send(addr, "/hooks/a.b", &github(body, "b-9", SECRET), body).await;
    assert_eq!(status, 404, "{v}");
    let big = vec![b' '; messages::hooks::MAX_BODY + 1];
    let (status, v) = send(addr, "/hooks/gh-push", &github(&big, "b-10", SECRET), &big).await;
    assert_eq!(status, 413, "{v}");
    // None of them started a run.
    let runs = get(addr, "/api/runs?workflow=Pushes").await.json();
    assert_eq!(runs.as_array().map(Vec::len), Some(0), "{runs}");
}

#[tokio::test]
async fn a_stripe_delivery_is_checked_against_the_servers_clock() {
    let h = hooks().await;
    let addr = h.web.addr();
    let body = br#"{"id": "evt_1", "type": "invoice.paid"}"#;
    let stripe = |t: u64| {
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(body);
        let sig = hmac_hex(STRIPE_SECRET, &signed);
        vec![
            (
                "content-type",
                "application/json; charset=utf-8".to_string(),
            ),
            ("stripe-signature", format!("t={t},v1={sig}")),
        ]
    };
    let now = workflow_node::shell::now().0 / 1000;
    let (status, v) = send(addr, "/hooks/paid", &stripe(now - 1000), body).await;
    assert_eq!(status, 401, "{v}");
    assert!(v["error"].as_str().unwrap().contains("timestamp"), "{v}");
    let (status, v) = send(addr, "/hooks/paid", &stripe(now), body).await;
    assert_eq!(status, 202, "{v}");
    let done = ended(addr, v["run_id"].as_str().unwrap()).await;
    assert_eq!(done["output"]["repo"], "evt_1", "{done}");
}

/// GitHub's own recipe, in Python's standard library: `hmac.new(secret, body,
/// hashlib.sha256).hexdigest()` over the bytes sent, posted with `urllib.request`.
const PYTHON_SENDER: &str = r#"
import hashlib, hmac, json, sys, urllib.error, urllib.request
url, secret = sys.argv[1], sys.argv[2].encode()
body = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "py/app"}}).encode()
signature = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
request = urllib.request.Request(url, data=body, method="POST", headers={
    "Content-Type": "application/json",
    "X-GitHub-Event": "push",
    "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    "X-Hub-Signature-256": signature,
})
try:
    with urllib.request.urlopen(request, timeout=60) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"#;

#[tokio::test]
async fn python_urllib_signing_as_github_does_starts_a_run() {
    let h = hooks().await;
    let addr = h.web.addr();
    let url = format!("http://{addr}/hooks/gh-push");
    let out = tokio::process::Command::new(test_harness::python())
        .args(["-c", PYTHON_SENDER, &url, SECRET])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, body) = stdout.trim().split_once(' ').unwrap();
    assert_eq!(status, "202", "{stdout}");
    let v: Value = serde_json::from_str(body).unwrap();
    let done = ended(addr, v["run_id"].as_str().unwrap()).await;
    assert_eq!(done["output"]["repo"], "py/app", "{done}");
    assert_eq!(
        done["input"],
        json!({"repo": "py/app", "by": "push"}),
        "{done}"
    );
}
