//! `workflow-node runs signal` as a user runs it: the real binary against a real
//! nats-server. `runs show` says what a run waits for; a payload the wait node's schema
//! refuses exits 1 with the schema's words and the run goes on waiting; a signal by key
//! (`--key --workflow`, `--data @FILE`) signed by an operator is delivered and the run
//! ends with it; a signal to the ended run exits 1; a malformed command exits 2.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use agent_sdk::workflow::{invoke_as, new_task_id};
use serde_json::{json, Value};
use workflow_node::shell::{run::names, Config, WorkflowNode};

const PAID: &str = r#"
name: Paid
workflow:
  description: waits for the payment of an order
  nodes:
    - id: paid
      type: wait
      signal: payment
      correlation: "{{workflow.input.order}}"
      schema: {type: object, required: [amount], properties: {amount: {type: number}}}
      timeout: 1h
  output_mapping: {amount: "{{paid.output.data.amount}}"}
"#;

fn run(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .env_remove("NATS_URL")
        .env_remove("MESH_NKEY_SEED_FILE")
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .args(args)
        .args(["--nats-url", url])
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn runs_signal_delivers_by_run_or_key_and_refuses_what_the_node_refuses() {
    let server = test_harness::nats();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let operator = agent_sdk::Signer::generate();
    let seed = dir.path().join("operator");
    std::fs::write(&seed, operator.seed()).unwrap();
    let seed = seed.display().to_string();
    let mut config = Config::default();
    config.operators.push(operator.public_key().to_string());
    let url = server.url();
    let (client, _node) = rt.block_on(async {
        let client = async_nats::connect(&url).await.unwrap();
        let wf = vec![workflow_node::definition::parse_str(PAID, "t.yaml").unwrap()];
        let node = WorkflowNode::start(client.clone(), wf, config)
            .await
            .unwrap();
        (client, node)
    });
    let task = new_task_id();
    let id = names::execution_id("Paid", &task).0;
    let result = rt.spawn(async move {
        let input = json!({"order": "o-9"});
        let timeout = Duration::from_secs(60);
        invoke_as(
            &client,
            "mesh",
            "Paid",
            &input,
            timeout,
            task.as_str(),
            |_| {},
        )
        .await
        .expect("a final reply")
    });
    // Until `runs show` says the run waits (bounded).
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    let shown = loop {
        let out = run(&url, &["runs", "show", &id]);
        if out.status.success() && text(&out).contains("waits for signal") {
            break text(&out);
        }
        assert!(
            std::time::Instant::now() < give_up,
            "never waiting: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        shown.contains("paid waits for signal 'payment' (key o-9) since"),
        "{shown}"
    );
    let sign = ["--nkey-seed-file", seed.as_str()];
    let bad = run(
        &url,
        &[
            &[
                "runs",
                "signal",
                &id,
                "payment",
                "--data",
                r#"{"amount": "x"}"#,
            ][..],
            &sign,
        ]
        .concat(),
    );
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains("does not match its schema"),
        "{}",
        text(&bad)
    );
    let usage = run(&url, &["runs", "signal", "--key", "o-9", "payment"]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage));
    assert!(
        text(&usage).contains("--key needs --workflow"),
        "{}",
        text(&usage)
    );

    let data = dir.path().join("payment.json");
    std::fs::write(&data, r#"{"amount": 12}"#).unwrap();
    let data = format!("@{}", data.display());
    let args = [
        "runs",
        "signal",
        "--key",
        "o-9",
        "--workflow",
        "Paid",
        "payment",
    ];
    let args = [&args[..], &["--data", &data, "--json"], &sign].concat();
    let sent = run(&url, &args);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent));
    let v: Value = serde_json::from_slice(&sent.stdout).unwrap();
    assert_eq!(v["signal"], "recorded", "{v}");
    let result = rt.block_on(result).unwrap();
    assert_eq!(result.status, "success", "{result:?}");
    assert_eq!(result.output, Some(json!({"amount": 12})));

    let late = run(
        &url,
        &[
            &[
                "runs",
                "signal",
                &id,
                "payment",
                "--data",
                r#"{"amount": 1}"#,
            ][..],
            &sign,
        ]
        .concat(),
    );
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));
    assert!(
        text(&late).contains("already ended (success)"),
        "{}",
        text(&late)
    );
}
