//! The caller's API against a real nats-server, with SDK agents: the `Mesh` handle and its
//! call builder, progress and cancel, the catalog (discovery, expiry, stored cards), tool
//! declarations checked against each API's rules, and `call_tool`. Workflows as tools are
//! tested with a real workflow node in `workflow-node/tests/tools.rs`.

mod common;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::declare::{check_anthropic, check_gemini, check_openai, is_portable_name};
use agent_sdk::{
    handler_fn, AgentBuilder, AgentError, CallError, Mesh, NodeRequest, Progress, ToolError,
};
use anyhow::{Context, Result};
use common::*;
use futures::StreamExt;
use messages::card::AgentCard;
use messages::AgentSkill;
use serde_json::{json, Value};

fn tagged(id: &str, tags: &[&str]) -> AgentSkill {
    let mut s = agent_sdk::skill(id, id, format!("does {id}"));
    s.tags = tags.iter().map(|t| t.to_string()).collect();
    s
}

/// An order schema that uses what Gemini lacks: `$defs`/`$ref`, `additionalProperties`,
/// a type list with null, `const`, an email format.
fn order_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"line": {"type": "object", "required": ["sku", "qty"],
                           "additionalProperties": false,
                           "properties": {"sku": {"type": "string"},
                                          "qty": {"type": "integer", "minimum": 1}}}},
        "properties": {
            "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1},
            "email": {"type": ["string", "null"], "format": "email"},
            "channel": {"const": "web"}
        },
        "required": ["lines"]
    })
}

/// `Orders`: counts its calls and answers with the number of lines.
fn orders(calls: Arc<AtomicUsize>) -> AgentBuilder {
    AgentBuilder::new("Orders")
        .description("Places an order")
        .skill(tagged("place", &["order", "shop"]))
        .input_schema(order_schema())
        .handler(handler_fn(move |req: NodeRequest| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let lines = req.input["lines"].as_array().map_or(0, Vec::len);
                if req.input["email"] == "fail@x.org" {
                    return Err(AgentError::with_kind("card declined", "declined"));
                }
                Ok(json!({"lines": lines}))
            }
        }))
}

#[tokio::test]
async fn the_catalog_sees_cards_by_name_tag_and_kind_and_forgets_stopped_agents() -> Result<()> {
    let (_server, client) = setup().await?;
    let mesh = Mesh::new(client.clone());
    // Served before the catalog starts: found through the discovery ping.
    let early = mesh.serve(orders(Arc::default())).await?;
    let catalog = mesh.catalog_with_expiry(Duration::from_millis(800)).await?;
    // Served after: found when it publishes its card (every 100 ms).
    let late = mesh
        .serve(
            AgentBuilder::new("Weather")
                .description("Forecasts")
                .skill(tagged("forecast", &["Weather"]))
                .card_interval(Duration::from_millis(100))
                .handler(handler_fn(|r: NodeRequest| async move { Ok(r.input) })),
        )
        .await?;
    // A workflow's card, by hand (a real one is in workflow-node/tests/tools.rs).
    let wf = AgentCard::new(
        "Flow",
        "A workflow",
        "nats:mesh.a2a.v1.agent.request.Flow",
        "1",
    )
    .with_agent_type(messages::card::AGENT_TYPE_WORKFLOW);
    client
        .publish(
            messages::subjects::agent_cards("mesh"),
            serde_json::to_vec(&wf)?.into(),
        )
        .await?;
    let all_there = catalog
        .wait_until(WAIT, |cards| {
            ["Orders", "Weather", "Flow"]
                .iter()
                .all(|n| cards.iter().any(|c| c.name == *n))
        })
        .await;
    assert!(all_there, "cards seen: {:?}", names(&catalog.cards()));
    assert_eq!(names(&catalog.workflows()), ["Flow"]);
    assert_eq!(names(&catalog.agents()), ["Orders", "Weather"]);
    assert_eq!(names(&catalog.with_tag("weather")), ["Weather"]);
    assert_eq!(names(&catalog.with_tag("shop")), ["Orders"]);
    assert!(catalog.with_tag("nothing").is_empty());
    assert_eq!(
        catalog.get("Orders").map(|c| c.description),
        Some("Places an order".into())
    );

    // Flow never publishes again, and Weather stops: both expire; Orders (card interval
    // 10 s, longer than the expiry) too, unless pinged, so ping while waiting.
    late.stop().await;
    let gone = catalog
        .wait_until(WAIT, |cards| {
            !cards
                .iter()
                .any(|c| c.name == "Weather" || c.name == "Flow")
        })
        .await;
    assert!(gone, "still there: {:?}", names(&catalog.cards()));
    catalog.refresh().await?;
    assert!(catalog.wait_for("Orders", WAIT).await.is_some());
    early.stop().await;
    Ok(())
}

fn names(cards: &[AgentCard]) -> Vec<String> {
    cards.iter().map(|c| c.name.clone()).collect()
}

#[tokio::test]
async fn a_card_with_a_stored_visualization_is_read_back_whole() -> Result<()> {
    let (_server, client) = setup().await?;
    let mesh = Mesh::new(client.clone());
    let catalog = mesh.catalog().await?;
    let params = json!({"mermaid_source": "graph TD; a-->b", "workflow_config": {"nodes": []}});
    // Where a workflow node keeps its large cards' contents, the only bucket read for them.
    let cards = agent_sdk::ArtifactStore::in_bucket(
        client.clone(),
        messages::subjects::cards_bucket("mesh"),
    );
    cards
        .put_json("cards/Big/visualization.json", &params)
        .await?;
    let uri = messages::payload::object_uri(cards.bucket(), "cards/Big/visualization.json");
    let card = AgentCard::new("Big", "big", "nats:x", "1").with_visualization_ref(uri);
    client
        .publish(
            messages::subjects::agent_cards("mesh"),
            serde_json::to_vec(&card)?.into(),
        )
        .await?;
    catalog
        .wait_for("Big", WAIT)
        .await
        .context("the card never came")?;
    let full = catalog.full_card("Big").await?.context("no card")?;
    assert_eq!(full.mermaid_source(), Some("graph TD; a-->b"));
    assert_eq!(full.visualization_ref(), None);
    assert!(catalog.full_card("Nobody").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn declarations_from_a_served_card_fit_each_api_and_calls_are_checked_first() -> Result<()> {
    let (_server, client) = setup().await?;
    let mesh = Mesh::new(client.clone());
    let calls = Arc::new(AtomicUsize::new(0));
    let _agent = mesh.serve(orders(calls.clone())).await?;
    let catalog = mesh.catalog().await?;
    catalog.wait_for("Orders", WAIT).await.context("no card")?;
    let tool = catalog.tool("Orders").context("no tool")?;
    assert!(is_portable_name(&tool.name));
    assert!(
        tool.description.contains("Places an order"),
        "{}",
        tool.description
    );
    assert!(
        tool.description.contains("tags: order, shop"),
        "{}",
        tool.description
    );
    assert_eq!(
        check_openai(&tool.openai()),
        Vec::<String>::new(),
        "{:#}",
        tool.openai()
    );
    assert_eq!(check_anthropic(&tool.anthropic()), Vec::<String>::new());
    assert!(tool.parameters.get("$schema").is_none());
    let gemini = tool.gemini();
    assert_eq!(
        check_gemini(&gemini.declaration),
        Vec::<String>::new(),
        "{:#}",
        gemini.declaration
    );
    let text = gemini.declaration.to_string();
    assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
    let line = &gemini.declaration["parameters"]["properties"]["lines"]["items"];
    assert_eq!(
        line["required"],
        json!(["sku", "qty"]),
        "the $ref was inlined"
    );
    for lost in ["additionalProperties", "format \"email\""] {
        assert!(
            gemini.dropped.iter().any(|d| d.contains(lost)),
            "{lost}: {:?}",
            gemini.dropped
        );
    }

    // Good arguments: the output.
    let args = json!({"lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}]});
    let out = catalog.call_tool("Orders", args).await?;
    assert_eq!(out, json!({"lines": 2}));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Bad arguments: every violation listed, nothing sent.
    let bad = json!({"lines": [{"sku": "a", "qty": 0}], "channel": "phone"});
    match catalog.call_tool("Orders", bad).await {
        Err(ToolError::InvalidArguments { tool, violations }) => {
            assert_eq!(tool, "Orders");
            assert_eq!(violations.len(), 2, "{violations:#?}");
            assert!(violations
                .iter()
                .any(|v| v.starts_with("arguments/lines/0/qty")));
            assert!(violations
                .iter()
                .any(|v| v.starts_with("arguments/channel")));
        }
        other => panic!("expected invalid arguments, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "an invalid call was sent");

    // A failure of the agent, and a tool nobody offers.
    let failing = json!({"lines": [{"sku": "a", "qty": 1}], "email": "fail@x.org"});
    match catalog.call_tool("Orders", failing).await {
        Err(ToolError::Failed {
            message,
            kind,
            node,
            ..
        }) => {
            assert_eq!(message, "card declined");
            assert_eq!(kind.as_deref(), Some("declined"));
            assert_eq!(node, None);
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    match catalog.call_tool("Nope", json!({})).await {
        Err(ToolError::NoSuchTool { name, known }) => {
            assert_eq!(name, "Nope");
            assert_eq!(known, ["Orders"]);
        }
        other => panic!("expected no such tool, got {other:?}"),
    }
    Ok(())
}

/// `Slow`: tells its caller it started, then waits until canceled; says when it is
/// dropped (canceled) through `dropped`.
fn slow(dropped: tokio::sync::mpsc::UnboundedSender<String>) -> AgentBuilder {
    struct Guard(tokio::sync::mpsc::UnboundedSender<String>, String);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.send(self.1.clone());
        }
    }
    AgentBuilder::new("Slow").handler(handler_fn(move |req: NodeRequest| {
        let guard = Guard(dropped.clone(), req.task_id.clone());
        async move {
            let _guard = guard;
            req.send_status("started").await.ok();
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    }))
}

#[tokio::test]
async fn a_call_streams_progress_and_is_canceled_explicitly_or_by_drop() -> Result<()> {
    let (_server, client) = setup().await?;
    let mesh = Mesh::new(client.clone()).caller("Tester");
    let (tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
    let _agent = mesh.serve(slow(tx)).await?;

    // Explicit cancel, after the first progress event.
    let mut call = mesh
        .agent("Slow")
        .timeout(WAIT)
        .task_id("t-explicit")
        .header("X-Test", "1")
        .call(json!({}));
    assert_eq!(call.task_id(), "t-explicit");
    let mut progress = call.progress();
    let first = tokio::time::timeout(WAIT, progress.next()).await?;
    assert_eq!(
        first,
        Some(Progress::Status {
            state: messages::TaskState::Working,
            text: "started".into()
        })
    );
    match call.cancel().await {
        Err(CallError::Canceled { agent }) => assert_eq!(agent, "Slow"),
        other => panic!("expected canceled, got {other:?}"),
    }
    let ended = tokio::time::timeout(WAIT, dropped.recv()).await?;
    assert_eq!(ended.as_deref(), Some("t-explicit"));

    // Dropping a running call cancels it at the agent.
    let mut call = mesh.agent("Slow").task_id("t-dropped").call(json!({}));
    let mut progress = call.progress();
    tokio::time::timeout(WAIT, progress.next())
        .await?
        .context("no progress")?;
    drop(call);
    let ended = tokio::time::timeout(WAIT, dropped.recv()).await?;
    assert_eq!(ended.as_deref(), Some("t-dropped"));
    // The stream ends with the call.
    assert_eq!(tokio::time::timeout(WAIT, progress.next()).await?, None);

    // So does dropping the future that awaits a call (a caller's own timeout, a select).
    let mut call = mesh.agent("Slow").task_id("t-awaited").call(json!({}));
    let mut progress = call.progress();
    let awaited = call.into_future();
    tokio::select! {
        ended = awaited => panic!("the call ended: {ended:?}"),
        event = progress.next() => assert!(event.is_some()),
    }
    let ended = tokio::time::timeout(WAIT, dropped.recv()).await?;
    assert_eq!(ended.as_deref(), Some("t-awaited"));
    Ok(())
}

#[tokio::test]
async fn the_old_positional_calls_still_work_through_the_mesh() -> Result<()> {
    let (_server, client) = setup().await?;
    let mesh = Mesh::new(client.clone()).namespace("acme.prod")?;
    let _agent = mesh.serve(orders(Arc::default())).await?;
    let input = json!({"lines": [{"sku": "a", "qty": 1}]});
    let old = Mesh::new(client.clone())
        .namespace("acme.prod")
        .expect("a valid namespace")
        .agent("Orders")
        .timeout(WAIT)
        .call(input.clone())
        .await?;
    let new = mesh.agent("Orders").call(input).await?;
    assert_eq!(old, new);
    assert!(Mesh::new(client).namespace("a..b").is_err());
    Ok(())
}
