//! The Schedules & triggers page and a run's waits, in a real browser (headless Chromium
//! over WebDriver) against a real nats-server: a schedule's next fire times in its zone, a
//! paused one with its note, an event trigger with its lag and dead letters, a webhook
//! with its URL; markup in a pause note and in a trigger's subject shows as text and runs
//! nothing; a run's page says it waits for an approval.

use std::net::SocketAddr;

use agent_sdk::{handler_fn, AgentBuilder, NodeRequest, Signer};
use messages::control::{ScheduleControl, WorkflowScheduleControl};
use serde_json::{json, Value};
use workflow_node::shell::{Config, WorkflowNode};
use workflow_node::web::{Access, Web};

use crate::support::browser::{driver, Browser};

/// What a pause note and a trigger's subject carry: markup that would run if inserted as
/// HTML.
const NOTE: &str = r#"<img src=x onerror="window.pwned=1">holiday"#;
const SUBJECT: &str = "<svg/onload=window.pwned=2";

fn timed(secret: &std::path::Path) -> String {
    format!(
        r#"
name: Timed
workflow:
  description: runs on a clock, on events and on webhooks
  schedules:
    - {{name: morning, cron: "0 8 * * *", timezone: Europe/Paris}}
    - {{name: hourly, every: 1h}}
  triggers:
    - {{name: orders, subject: "{SUBJECT}"}}
    - {{name: gh, webhook: github, secret_file: {}}}
  nodes:
    - {{id: echo, type: agent, agent_name: Echo, input: {{x: 1}}}}
  output_mapping: {{x: "{{{{echo.output.x}}}}"}}
"#,
        secret.display()
    )
}

const GATE: &str = r#"
name: Gate
workflow:
  description: waits for a decision
  nodes:
    - {id: gate, type: approval, approvers: [alice], message: "ok?", timeout: 1h}
  output_mapping: {ok: "{{gate.output}}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_triggers_and_a_runs_waits_are_shown_and_escaped() {
    let server = test_harness::nats();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("gh");
    std::fs::write(&secret, "s3cret").unwrap();
    let operator = Signer::generate();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    config
        .approvers
        .insert("alice".into(), operator.public_key().to_string());
    let client = async_nats::connect(server.url()).await.unwrap();
    let echo = AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let _echo = echo.serve(client.clone()).await.unwrap();
    let parse = |text: &str| workflow_node::definition::parse_str(text, "t.yaml").unwrap();
    let workflows = vec![parse(&timed(&secret)), parse(GATE)];
    let _node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .unwrap();
    let pause = WorkflowScheduleControl {
        schedule: "hourly".into(),
        action: ScheduleControl::Pause,
        note: Some(NOTE.into()),
        spec: None,
    };
    let ops = workflow_node::ops::schedules::control;
    ops(&client, "mesh", "Timed", &pause, Some(&operator))
        .await
        .expect("paused");
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(client.clone(), "mesh", None, Access::default(), addr)
        .await
        .unwrap();
    let base = format!("http://{}", web.addr());

    let driver = driver().await;
    let browser = Browser::open(&driver).await;
    browser.go(&format!("{base}/#/mesh")).await;
    browser
        .until(
            "the index's link",
            "return !!document.querySelector('a[href=\"#/schedules\"]')",
        )
        .await;
    browser.click("a[href=\"#/schedules\"]").await;
    browser
        .until(
            "both schedules and both triggers",
            "return document.querySelectorAll('[data-schedule]').length === 2 && \
             document.querySelectorAll('[data-trigger]').length === 2 && \
             !!document.querySelector('[data-schedule=\"Timed/hourly\"] q')",
        )
        .await;
    browser.screenshot("schedules").await;
    // The morning schedule: its next three fire times at 08:00 in Paris (+01:00 in
    // winter, +02:00 in summer).
    let morning = row(&browser, "[data-schedule=\"Timed/morning\"]").await;
    let next = morning[5].as_str().unwrap();
    assert!(
        next.matches("T08:00:00+0").count() == 3,
        "next fire times in Paris: {morning}"
    );
    // The paused one: its note as text.
    let hourly = row(&browser, "[data-schedule=\"Timed/hourly\"]").await;
    assert_eq!(hourly[4], json!(format!("paused · {NOTE}")), "{hourly}");
    let orders = row(&browser, "[data-trigger=\"Timed/orders\"]").await;
    assert_eq!(orders[2], "subject", "{orders}");
    assert_eq!(orders[3], SUBJECT, "{orders}");
    assert_eq!(
        (&orders[4], &orders[6]),
        (&json!("0"), &json!("0")),
        "{orders}"
    );
    let hook = browser
        .eval("return document.querySelector('[data-trigger=\"Timed/gh\"] .hook-url').textContent")
        .await;
    assert_eq!(hook, json!(format!("{base}/hooks/gh")));
    let pwned = browser.eval("return window.pwned === undefined").await;
    assert_eq!(pwned, Value::Bool(true), "markup in a note or subject ran");
    let images = browser
        .eval("return document.querySelectorAll('main img, main svg').length")
        .await;
    assert_eq!(images, json!(0));

    // A run waiting for a decision says so.
    let started = test_harness::http::post(
        web.addr(),
        "/api/workflows/Gate/runs",
        &json!({"input": {}}),
    )
    .await;
    assert_eq!(started.status, 201, "{}", started.body);
    let id = started.json()["execution_id"].as_str().unwrap().to_string();
    browser.go(&format!("{base}/#/run/{id}")).await;
    browser
        .until(
            "the run's wait for a decision",
            "return !!document.querySelector('#waits-for [data-wait=approval]')",
        )
        .await;
    let wait = browser
        .eval("return document.querySelector('#waits-for [data-wait=approval]').textContent")
        .await;
    assert!(
        wait.as_str().unwrap().contains("a decision by alice"),
        "{wait}"
    );
    browser.close().await;
}

/// The cells' texts of the row `css` finds.
async fn row(browser: &Browser, css: &str) -> Value {
    let script =
        format!("return [...document.querySelector('{css}').children].map(c => c.textContent)");
    browser.eval(&script).await
}
