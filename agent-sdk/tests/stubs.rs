//! Stub agents over a real nats-server: rules, templates with arithmetic, call counting per
//! run/node/slot, `fail_first` with an error kind, delay, and the file checks (also through
//! the `stub-agents` binary).

mod common;

use std::time::{Duration, Instant};

use agent_sdk::{load_stub_file, serve_stubs, CallError, Mesh, StubFile};
use anyhow::Result;
use common::*;
use messages::{ResultStatus, TaskState};
use serde_json::json;

const STUBS: &str = r#"
agents:
  - name: ValueClassifier
    description: Classifies a number
    input_schema: {type: object, required: [value], properties: {value: {type: number}}}
    rules:
      - when: "{{input.value}} < 10"
        output: {category: small, value: "{{input.value}}", double: "{{input.value * 2 + 1}}"}
      - when: "{{input.mode}} == 'failure'"
        fail: "operation failed on {{input.value}}"
        error_kind: permanent
      - when: "{{input.value}} < 1000"
        output: {category: large, call: "{{call}}"}
  - name: Flaky
    fail_first: 2
    error: "upstream unavailable"
    error_kind: transient
    output: {ok: true, call: "{{call}}"}
  - name: Sleepy
    delay: 50ms
    output: "{{input}}"
"#;

async fn serve(client: &async_nats::Client) -> Result<Vec<agent_sdk::AgentHandle>> {
    let file = StubFile::parse(STUBS, "inline").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(serve_stubs(client.clone(), "mesh", file).await?)
}

#[tokio::test]
async fn rules_pick_the_first_match_and_templates_compute() -> Result<()> {
    let (_server, client) = setup().await?;
    let _stubs = serve(&client).await?;
    let out = Mesh::new(client.clone())
        .agent("ValueClassifier")
        .timeout(WAIT)
        .call(json!({"value": 4}))
        .await?;
    assert_eq!(out, json!({"category": "small", "value": 4, "double": 9}));

    let (_, result) = call_node(
        &client,
        "ValueClassifier",
        &node_request("e", "classify", 1),
        json!({"value": 50, "mode": "failure"}),
    )
    .await?;
    assert_eq!(result.status, ResultStatus::Failure);
    assert_eq!(
        result.error_message.as_deref(),
        Some("operation failed on 50")
    );
    assert_eq!(result.error_kind.as_deref(), Some("permanent"));

    let (_, result) = call_node(
        &client,
        "ValueClassifier",
        &node_request("e", "classify2", 1),
        json!({"value": 50}),
    )
    .await?;
    assert_eq!(result.output, Some(json!({"category": "large", "call": 1})));

    match Mesh::new(client.clone())
        .agent("ValueClassifier")
        .timeout(WAIT)
        .call(json!({"value": 5000}))
        .await
    {
        Err(CallError::Failed { message, .. }) => assert_eq!(message, "no rule matched"),
        other => panic!("expected no rule matched, got {other:?}"),
    }
    // The advertised input schema is enforced.
    match Mesh::new(client.clone())
        .agent("ValueClassifier")
        .timeout(WAIT)
        .call(json!({}))
        .await
    {
        Err(CallError::Failed {
            validation_errors, ..
        }) => assert_eq!(validation_errors.len(), 1),
        other => panic!("expected a validation failure, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn fail_first_counts_attempts_of_the_same_run_node_and_slot() -> Result<()> {
    let (_server, client) = setup().await?;
    let _stubs = serve(&client).await?;
    for attempt in 1..=2 {
        let (task, result) = call_node(
            &client,
            "Flaky",
            &node_request("run1", "fetch", attempt),
            json!({}),
        )
        .await?;
        assert_eq!(task.status.state, TaskState::Failed);
        assert_eq!(
            result.error_message.as_deref(),
            Some("upstream unavailable")
        );
        assert_eq!(result.error_kind.as_deref(), Some("transient"));
    }
    let (_, result) = call_node(
        &client,
        "Flaky",
        &node_request("run1", "fetch", 3),
        json!({}),
    )
    .await?;
    assert_eq!(result.status, ResultStatus::Success);
    assert_eq!(result.output, Some(json!({"ok": true, "call": 3})));

    // Another run, and another slot of the same run, count on their own.
    let (_, result) = call_node(
        &client,
        "Flaky",
        &node_request("run2", "fetch", 1),
        json!({}),
    )
    .await?;
    assert_eq!(result.status, ResultStatus::Failure);
    let mut other_slot = node_request("run1", "fetch", 1);
    other_slot.sub_task_id = Some("run1_fetch_1_1".into());
    let (_, result) = call_node(&client, "Flaky", &other_slot, json!({})).await?;
    assert_eq!(result.status, ResultStatus::Failure);
    Ok(())
}

#[tokio::test]
async fn delay_holds_the_answer_back() -> Result<()> {
    let (_server, client) = setup().await?;
    let _stubs = serve(&client).await?;
    let start = Instant::now();
    let out = Mesh::new(client.clone())
        .agent("Sleepy")
        .timeout(WAIT)
        .call(json!([1, "two"]))
        .await?;
    assert_eq!(out, json!([1, "two"]));
    assert!(start.elapsed() >= Duration::from_millis(50));
    Ok(())
}

const BAD: &str = r#"
agents:
  - name: Good
    output: {}
  - name: Bad
    delay: later
    rules:
      - when: "{{input.x}} >"
        output: {}
      - output: "{{inputs.x}}"
      - fail: 3
"#;

#[tokio::test]
async fn a_file_with_errors_reports_all_of_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("stubs.yaml");
    std::fs::write(&path, BAD)?;
    let errors = load_stub_file(&path).unwrap_err();
    let shown = path.display().to_string();
    for at in [
        "agents[1].delay: ",
        "agents[1].rules[0].when: ",
        "agents[1].rules[1].output: unknown name `inputs`",
        "agents[1].rules[2].fail: ",
    ] {
        let needle = format!("{shown}: {at}");
        assert!(
            errors.iter().any(|e| e.starts_with(&needle)),
            "{needle} in {errors:#?}"
        );
    }
    assert_eq!(errors.len(), 4, "{errors:#?}");
    assert!(load_stub_file(dir.path().join("missing.yaml")).is_err());

    // The binary prints them and exits 2 before connecting anywhere.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stub-agents"))
        .arg(&path)
        .args(["--nats-url", "nats://127.0.0.1:1"])
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 4, "{stderr}");
    Ok(())
}

#[tokio::test]
async fn the_binary_serves_a_file() -> Result<()> {
    let (server, client) = setup().await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("stubs.yaml");
    std::fs::write(&path, STUBS)?;
    // Its cards are signed by the key of the seed file the variable names.
    let key = agent_sdk::Signer::generate();
    let seed = dir.path().join("agents.nk");
    std::fs::write(&seed, key.seed())?;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stub-agents"))
        .arg(&path)
        .args(["--nats-url", &server.url(), "--namespace", "mesh"])
        .env("MESH_NKEY_SEED_FILE", &seed)
        .kill_on_drop(true)
        .stderr(std::process::Stdio::null())
        .spawn()?;
    // Ready when its card shows up; ping until one does (bounded).
    let mut cards = client
        .subscribe(messages::subjects::agent_cards("mesh"))
        .await?;
    let mut ready = None;
    for _ in 0..100 {
        client
            .publish(
                messages::subjects::discovery_ping("mesh"),
                bytes::Bytes::new(),
            )
            .await?;
        if let Ok(Some(card)) = tokio::time::timeout(
            Duration::from_millis(100),
            futures::StreamExt::next(&mut cards),
        )
        .await
        {
            ready = Some(card);
            break;
        }
    }
    let card = ready.expect("stub-agents never published a card");
    let name = serde_json::from_slice::<messages::card::AgentCard>(&card.payload)?.name;
    let signer = agent_sdk::card_trust::verify_card(
        card.headers.as_ref(),
        &name,
        &card.payload,
        std::time::SystemTime::now(),
    );
    assert_eq!(signer, Ok(Some(key.public_key().to_owned())));
    let out = Mesh::new(client.clone())
        .agent("ValueClassifier")
        .timeout(WAIT)
        .call(json!({"value": 1}))
        .await?;
    assert_eq!(out["category"], "small");
    child.kill().await?;
    Ok(())
}

#[tokio::test]
async fn without_a_url_the_binary_starts_and_stops_its_own_server() -> Result<()> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("stubs.yaml");
    std::fs::write(&path, STUBS)?;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stub-agents"))
        .arg(&path)
        .env_remove("NATS_URL")
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut url = None;
    let mut serving = false;
    while let Some(line) = tokio::time::timeout(WAIT, lines.next_line()).await?? {
        if let Some(rest) = line.split("local nats-server at ").nth(1) {
            url = rest.split_whitespace().next().map(str::to_owned);
        }
        if line.contains("serving ValueClassifier") {
            serving = true;
            break;
        }
    }
    assert!(serving, "the binary never said it was serving");
    let url = url.expect("the binary names the server it started");
    let client = async_nats::connect(url.as_str()).await?;
    let out = Mesh::new(client.clone())
        .agent("Sleepy")
        .timeout(WAIT)
        .call(json!({"a": 1}))
        .await?;
    assert_eq!(out, json!({"a": 1}));

    let pid = child.id().expect("running").to_string();
    std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()?;
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert!(status.success(), "{status:?}");
    // The embedded server is gone with it.
    let port = url.rsplit(':').next().unwrap_or_default().to_owned();
    assert!(std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err());
    Ok(())
}

#[test]
fn the_binary_exits_2_at_once_when_no_server_listens() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("stubs.yaml");
    std::fs::write(&path, STUBS)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stub-agents"))
        .arg(&path)
        .args(["--nats-url", &url])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach the NATS server at {url}")),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn mesh_agents_names_itself_and_stub_agents_says_it_is_the_old_name() {
    let help = |bin: &str| {
        let out = std::process::Command::new(bin)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{bin} --help: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let new = help(env!("CARGO_BIN_EXE_mesh-agents"));
    assert!(new.contains("Usage: mesh-agents "), "{new}");
    assert!(
        new.contains("stub agents") && new.contains("LLM agents"),
        "{new}"
    );
    assert!(!new.contains("stub-agents"), "{new}");
    let old = help(env!("CARGO_BIN_EXE_stub-agents"));
    assert!(old.contains("Usage: stub-agents "), "{old}");
    assert!(
        old.starts_with("stub-agents is the old name of mesh-agents"),
        "{old}"
    );
}
