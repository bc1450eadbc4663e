//! Headless Chromium (Debian's `chromium` and `chromium-driver`, which `.ci/run` installs)
//! driven over WebDriver: a chromedriver process per test and a session on it, to load
//! pages, run script in them and click. Used by the web view's browser test and by the
//! security tests that attack the view from another page.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use test_harness::http::{request, TIMEOUT};

/// A chromedriver process, stopped when dropped.
pub(crate) struct Driver {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts chromedriver and waits until it is ready.
pub(crate) async fn driver() -> Driver {
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
pub(crate) struct Browser {
    driver: SocketAddr,
    session: String,
}

impl Browser {
    pub(crate) async fn open(driver: &Driver) -> Browser {
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

    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let body = body.map(|b| b.to_string());
        let a = request(self.driver, method, &path, body.as_deref(), &[]).await;
        let v = a.json();
        assert_eq!(a.status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    pub(crate) async fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    /// Runs `script` in the page; its result.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits until `script` returns true in the page; fails the test after [`TIMEOUT`].
    pub(crate) async fn until(&self, what: &str, script: &str) {
        let give_up = tokio::time::Instant::now() + TIMEOUT;
        while self.eval(script).await != json!(true) {
            let page = self
                // The view's main area, or the whole page of one that has none.
                .eval("return (document.getElementById('main') || document.body || {}).innerText")
                .await;
            assert!(
                tokio::time::Instant::now() < give_up,
                "{what} never happened; the page: {page}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The element `css` selects.
    pub(crate) async fn element(&self, css: &str) -> String {
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

    pub(crate) async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})))
            .await;
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Saves a screenshot of the page as `name`.png; its path.
    pub(crate) async fn screenshot(&self, name: &str) -> PathBuf {
        let v = self.call("GET", "/screenshot", None).await;
        let png = base64_decode(v.as_str().expect("base64 PNG"));
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    pub(crate) async fn close(self) {
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
