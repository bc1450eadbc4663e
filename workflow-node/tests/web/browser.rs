//! The web view in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, which `.ci/run` installs) driven over WebDriver, against a real
//! nats-server. It opens the workflow page, starts a run from the form, watches the nodes
//! turn green, approves the waiting approval with a click, and checks the final output;
//! then finds the cards on the mesh page and the run on the runs page, filtered by status.
//! Screenshots of the workflow and run pages go to `$CARGO_TARGET_TMPDIR/screenshots`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest, Signer};
use serde_json::{json, Value};
use test_harness::http::{request, TIMEOUT};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, Web};

const GATE: &str = r#"
name: Gate
workflow:
  description: an agent, an approval, then an agent
  input_schema:
    type: object
    properties: {text: {type: string, description: what to echo}}
    required: [text]
  nodes:
    - {id: first, type: agent, agent_name: Echo, input: {text: "{{workflow.input.text}}"}}
    - {id: gate, type: approval, depends_on: [first], approvers: [alice], message: "ok to go?", timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: "{{first.output.text}}"}}
  output_mapping: {went: "{{go.output.went}}"}
"#;

/// A chromedriver process, stopped when dropped.
struct Driver {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts chromedriver and waits until it is ready.
async fn driver() -> Driver {
    let bin = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    let port = free_port();
    let child = Command::new(&bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{bin} cannot start ({e}): install chromium and chromium-driver (bash .ci/run does)")
        });
    let driver = Driver {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let give_up = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if tokio::net::TcpStream::connect(driver.addr).await.is_ok() {
            let a = request(driver.addr, "GET", "/status", None, &[]).await;
            if a.json()["value"]["ready"] == true {
                return driver;
            }
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "chromedriver never got ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A WebDriver session.
struct Browser {
    driver: SocketAddr,
    session: String,
}

impl Browser {
    async fn open(driver: &Driver) -> Browser {
        let binary = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": binary, "args": ["--headless=new", "--no-sandbox",
                "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1100"]}}}});
        let a = request(
            driver.addr,
            "POST",
            "/session",
            Some(&caps.to_string()),
            &[],
        )
        .await;
        let v = a.json();
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        Browser {
            driver: driver.addr,
            session,
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let body = body.map(|b| b.to_string());
        let a = request(self.driver, method, &path, body.as_deref(), &[]).await;
        let v = a.json();
        assert_eq!(a.status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    /// Runs `script` in the page; its result.
    async fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits until `script` returns true in the page; fails the test after [`TIMEOUT`].
    async fn until(&self, what: &str, script: &str) {
        let give_up = tokio::time::Instant::now() + TIMEOUT;
        while self.eval(script).await != json!(true) {
            let page = self
                .eval("return document.getElementById('main').innerText")
                .await;
            assert!(
                tokio::time::Instant::now() < give_up,
                "{what} never happened; the page: {page}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The element `css` selects.
    async fn element(&self, css: &str) -> String {
        let v = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})))
            .await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Saves a screenshot of the page as `name`.png; its path.
    async fn screenshot(&self, name: &str) -> PathBuf {
        let v = self.call("GET", "/screenshot", None).await;
        let png = base64_decode(v.as_str().expect("base64 PNG"));
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    async fn close(self) {
        let path = format!("/session/{}", self.session);
        request(self.driver, "DELETE", &path, None, &[]).await;
    }
}

/// Standard base64 (what WebDriver's screenshots are in).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk.iter().fold(0u32, |acc, c| (acc << 6) | value(*c)) << (6 * (4 - chunk.len()));
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..chunk.len()]);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_started_watched_and_approved_in_a_browser() {
    let server = test_harness::nats();
    let alice = Signer::generate();
    let mut config = Config::default();
    config
        .approvers
        .insert("alice".into(), alice.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let echo = AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let _echo = echo.serve(client.clone()).await.unwrap();
    let workflows = vec![workflow_node::definition::parse_str(GATE, "t.yaml").unwrap()];
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(client.clone(), "mesh", Some(alice), Access::default(), addr)
        .await
        .unwrap();

    let driver = driver().await;
    let browser = Browser::open(&driver).await;
    let base = format!("http://{}", web.addr());
    browser.go(&format!("{base}/#/workflow/Gate")).await;
    browser
        .until(
            "the workflow's diagram",
            "return !!document.querySelector('#diagram svg g.node')",
        )
        .await;
    browser
        .until(
            "the start form",
            "return !!document.querySelector('#start-form input[name=text]')",
        )
        .await;
    browser.screenshot("workflow").await;

    browser
        .type_into("#start-form input[name=text]", "hello from the browser")
        .await;
    browser.click("#start").await;
    browser
        .until("the run page", "return location.hash.startsWith('#/run/')")
        .await;
    browser
        .until(
            "the gate waiting, after the first node went green",
            "return !!document.querySelector('[data-node=first][data-status=success]') && \
             !!document.querySelector('[data-waiting=gate]') && \
             !!document.querySelector('#diagram svg g.node.success')",
        )
        .await;
    browser.screenshot("run-waiting").await;

    browser.type_into("#comment-gate", "fine by me").await;
    browser.click("#approve-gate").await;
    browser
        .until(
            "the run's success",
            "return !!document.querySelector('#run-status[data-status=success]')",
        )
        .await;
    let run_id = browser
        .eval("return location.hash.slice('#/run/'.length)")
        .await;
    let run_id = run_id.as_str().expect("the run's id").to_string();
    let statuses = browser
        .eval("return [...document.querySelectorAll('[data-node]')].map(e => e.dataset.status)")
        .await;
    assert_eq!(statuses, json!(["success", "success", "success"]));
    browser
        .until(
            "every node green in the diagram",
            "return document.querySelectorAll('#diagram svg g.node.success').length >= 3",
        )
        .await;
    let output = browser
        .eval("return document.getElementById('output').textContent")
        .await;
    let output: Value = serde_json::from_str(output.as_str().unwrap()).unwrap();
    assert_eq!(output, json!({"went": "hello from the browser"}));
    let path = browser.screenshot("run").await;

    // The mesh page lists the cards; the runs page finds the run by its status.
    browser.go(&format!("{base}/#/mesh")).await;
    browser
        .until(
            "the cards of Gate and Echo",
            "return !!document.querySelector('[data-card=Gate] a') && \
             !!document.querySelector('[data-card=Echo]')",
        )
        .await;
    browser.go(&format!("{base}/#/runs?status=success")).await;
    browser
        .until(
            "the run in the list of successes",
            &format!("return !!document.querySelector('a[href=\"#/run/{run_id}\"]')"),
        )
        .await;
    eprintln!("screenshots in {}", path.parent().unwrap().display());
    browser.close().await;
}
