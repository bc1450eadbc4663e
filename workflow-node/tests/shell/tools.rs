//! Workflows as tools, through agent-sdk's caller API, against a real nats-server and a
//! real workflow node: the catalog sees workflow cards, their declarations (dual mode)
//! fit each LLM API, `call_tool` runs them in parameter and artifact mode, reports a
//! failing node and a refused input, streams progress, and cancels (explicitly, or when
//! the call is dropped).

use std::time::Duration;

use agent_sdk::declare::{check_anthropic, check_gemini, check_openai};
use agent_sdk::{Catalog, Mesh, Output, Progress, ToolError};
use futures::StreamExt;
use messages::workflow::{NodeOutcome, RunPhase};
use serde_json::json;
use workflow_node::shell::Config;

use crate::support;
use crate::support::fixtures::{checked_doubler, echo};
use crate::support::mesh::mesh;

const WAIT: Duration = Duration::from_secs(20);

const STUBS: &str = concat!(
    "agents:",
    checked_doubler!(),
    r#"
  - name: Failer
    rules:
      - fail: "boom on {{input.what}}"
"#,
    echo!(),
);

const PRICER: &str = r#"
name: Pricer
workflow:
  description: Doubles every number of a list.
  skills:
    - {id: double, name: Double, description: doubles numbers, tags: [double, numbers]}
  input_schema:
    type: object
    properties:
      numbers: {type: array, items: {type: number}, minItems: 1}
    required: [numbers]
  nodes:
    - id: each
      type: map
      items: "{{workflow.input.numbers}}"
      node: one
    - id: one
      type: agent
      agent_name: Doubler
      input: {value: "{{_map_item}}"}
  output_mapping:
    doubled: "{{each.output.results}}"
"#;

const BREAKER: &str = r#"
name: Breaker
workflow:
  description: Fails at its second node.
  nodes:
    - {id: fine, type: agent, agent_name: Echo, input: {ok: true}}
    - {id: explode, type: agent, agent_name: Failer, depends_on: [fine], input: {what: "{{workflow.input.what}}"}}
  output_mapping: {never: "{{explode.output}}"}
"#;

const GATE: &str = r#"
name: Gate
workflow:
  description: Waits for an approval.
  nodes:
    - {id: gate, type: approval, approvers: [alice], message: "ok to go?", timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: true}}
  output_mapping: {went: "{{go.output.went}}"}
"#;

async fn catalog_of(client: &async_nats::Client, names: &[&str]) -> Catalog {
    let catalog = Mesh::new(client.clone())
        .timeout(WAIT)
        .catalog()
        .await
        .expect("catalog");
    let all = catalog
        .wait_until(WAIT, |cards| {
            names.iter().all(|n| cards.iter().any(|c| c.name == *n))
        })
        .await;
    assert!(all, "cards: {:?}", catalog.cards());
    catalog
}

#[tokio::test]
async fn a_workflow_is_a_tool_in_parameter_and_artifact_mode() {
    let m = mesh(STUBS, &[PRICER, BREAKER], Config::default()).await;
    let catalog = catalog_of(&m.client, &["Pricer", "Breaker", "Doubler"]).await;
    assert_eq!(
        catalog
            .workflows()
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["Breaker", "Pricer"]
    );
    assert_eq!(catalog.with_tag("numbers")[0].name, "Pricer");

    let tool = catalog.tool("Pricer").expect("tool");
    assert!(tool.workflow);
    assert!(
        check_openai(&tool.openai()).is_empty(),
        "{:?}",
        check_openai(&tool.openai())
    );
    assert!(check_anthropic(&tool.anthropic()).is_empty());
    let gemini = tool.gemini();
    assert!(
        check_gemini(&gemini.declaration).is_empty(),
        "{:#}",
        gemini.declaration
    );
    let props = &tool.parameters["properties"];
    assert_eq!(props["input_artifact"]["type"], "string");
    assert_eq!(props["numbers"]["minItems"], 1);
    assert!(tool.parameters.get("required").is_none());
    assert!(
        tool.description.contains("required: numbers"),
        "{}",
        tool.description
    );

    // Parameter mode.
    let out = catalog
        .call_tool("Pricer", json!({"numbers": [1, 2]}))
        .await
        .expect("parameter mode");
    assert_eq!(out["doubled"], json!([{"value": 2}, {"value": 4}]));

    // Artifact mode: the input is a stored artifact.
    let artifacts = catalog.mesh().artifacts();
    artifacts
        .put_json("inputs/pricer.json", &json!({"numbers": [5]}))
        .await
        .expect("put");
    let out = catalog
        .call_tool("Pricer", json!({"input_artifact": "inputs/pricer.json"}))
        .await
        .expect("artifact mode");
    assert_eq!(out["doubled"], json!([{"value": 10}]));

    // Not both; bad parameters never leave; a stored input that does not fit is refused
    // by the workflow itself.
    match catalog
        .call_tool("Pricer", json!({"input_artifact": "x", "numbers": [1]}))
        .await
    {
        Err(ToolError::InvalidArguments { violations, .. }) => {
            assert!(violations[0].contains("not both"), "{violations:?}")
        }
        other => panic!("expected invalid arguments, got {other:?}"),
    }
    match catalog.call_tool("Pricer", json!({"numbers": []})).await {
        Err(ToolError::InvalidArguments { violations, .. }) => {
            assert_eq!(violations.len(), 1, "{violations:?}");
            assert!(
                violations[0].starts_with("arguments/numbers"),
                "{violations:?}"
            );
        }
        other => panic!("expected invalid arguments, got {other:?}"),
    }
    artifacts
        .put_json("inputs/bad.json", &json!({"numbers": "many"}))
        .await
        .expect("put");
    match catalog
        .call_tool("Pricer", json!({"input_artifact": "inputs/bad.json"}))
        .await
    {
        Err(ToolError::Refused { tool, message, .. }) => {
            assert_eq!(tool, "Pricer");
            assert!(message.contains("input_schema"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    // A failing run names its failing node.
    match catalog
        .call_tool("Breaker", json!({"what": "purpose"}))
        .await
    {
        Err(ToolError::Failed {
            tool,
            message,
            node,
            ..
        }) => {
            assert_eq!(tool, "Breaker");
            assert_eq!(node.as_deref(), Some("explode"));
            assert!(message.contains("boom on purpose"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stored_output_comes_back_fetched_or_as_a_reference() {
    let config = Config {
        inline_limit: 64,
        ..Config::default()
    };
    let m = mesh(STUBS, &[PRICER], config).await;
    let catalog = catalog_of(&m.client, &["Pricer"]).await;
    let args = json!({"numbers": [1, 2, 3, 4, 5, 6, 7, 8]});
    let expected: Vec<_> = (1..=8).map(|n| json!({"value": n * 2})).collect();
    match catalog.call_tool("Pricer", args.clone()).output().await {
        Ok(Output::Stored(uri)) => {
            assert!(uri.starts_with("nats-object://"), "{uri}");
            let stored = catalog
                .mesh()
                .artifacts()
                .get_uri(&uri)
                .await
                .expect("read");
            assert_eq!(stored["doubled"], json!(expected));
        }
        other => panic!("expected a stored output, got {other:?}"),
    }
    let out = catalog.call_tool("Pricer", args).await.expect("fetched");
    assert_eq!(out["doubled"], json!(expected));
}

#[tokio::test]
async fn progress_streams_as_typed_events_and_a_run_is_canceled_or_dropped() {
    let config = support::mesh::trusting(Config::default());
    let m = mesh(STUBS, &[PRICER, GATE], config).await;
    let catalog = catalog_of(&m.client, &["Pricer", "Gate"]).await;

    let mut call = catalog
        .call_tool("Pricer", json!({"numbers": [1, 2, 3]}))
        .start()
        .expect("start");
    let progress = call.progress();
    let out = call.await.expect("output");
    assert_eq!(out["doubled"].as_array().map(Vec::len), Some(3));
    let events: Vec<Progress> = progress.collect().await;
    let first = events
        .iter()
        .find(|e| !matches!(e, Progress::Status { .. }));
    assert!(
        matches!(first, Some(Progress::RunStarted(s)) if s.workflow_name == "Pricer"),
        "{events:#?}"
    );
    let started = events
        .iter()
        .filter(|e| matches!(e, Progress::NodeStarted(s) if s.node_id == "one"))
        .count();
    assert_eq!(started, 3, "{events:#?}");
    assert!(events.iter().any(|e| matches!(e,
        Progress::MapProgress(p) if p.node_id == "each" && p.completed_items == 3 && p.total_items == 3)));
    assert!(events.iter().any(|e| matches!(e,
        Progress::NodeFinished(r) if r.node_id == "each" && r.status == NodeOutcome::Success)));
    assert!(
        matches!(events.last(), Some(Progress::RunFinished(_))),
        "{events:#?}"
    );

    // Explicit cancel once the approval is asked for.
    let mut call = catalog.call_tool("Gate", json!({})).start().expect("start");
    let mut progress = call.progress();
    wait_for_approval(&mut progress).await;
    match call.cancel().await {
        Err(agent_sdk::CallError::Canceled { agent }) => assert_eq!(agent, "Gate"),
        other => panic!("expected canceled, got {other:?}"),
    }

    // Dropping the call cancels the run.
    let mut call = catalog
        .call_tool("Gate", json!({}))
        .task_id("dropped-run")
        .start()
        .expect("start");
    let mut progress = call.progress();
    wait_for_approval(&mut progress).await;
    drop(call);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let state = agent_sdk::workflow::get_run(&m.client, "mesh", "Gate", "dropped-run", None)
            .await
            .expect("tasks/get");
        if state.run.status == RunPhase::Cancelled {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dropped run was never cancelled: {:?}",
            state.run
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for_approval(progress: &mut agent_sdk::ProgressStream) {
    loop {
        match tokio::time::timeout(WAIT, progress.next()).await {
            Ok(Some(Progress::ApprovalRequested(r))) => {
                assert_eq!(r.node_id, "gate");
                assert_eq!(r.approvers, ["alice"]);
                return;
            }
            Ok(Some(_)) => {}
            other => panic!("no approval request: {other:?}"),
        }
    }
}
