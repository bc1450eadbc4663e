//! The web view in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, which `.ci/run` installs) driven over WebDriver, against a real
//! nats-server. It opens the workflow page, starts a run from the form, watches the nodes
//! turn green, approves the waiting approval with a click, and checks the final output;
//! then finds the cards on the mesh page and the run on the runs page, filtered by status.
//! Screenshots of the workflow and run pages go to `$CARGO_TARGET_TMPDIR/screenshots`.

use std::net::SocketAddr;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest, Signer};
use serde_json::{json, Value};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, Web};

use crate::support::browser::{driver, Browser};

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
