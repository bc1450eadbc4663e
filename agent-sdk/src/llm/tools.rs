//! The mesh as an LLM agent's tools: which cards of the live catalog are offered (by name
//! or by tag; a card that appears or expires changes the next round's tools), and one
//! round of the tool-calling loop: every call the model asked for, in parallel, through
//! the mesh with the caller's identity (`NodeRequest::onward_headers`: trace context,
//! call depth, `Mesh-Caller`), each answered with a `tool` message, an error included, so
//! the model can react to it.
//!
//! Decided here: arguments that are not JSON, or do not fit the tool's schema, are an
//! error result and nothing is sent; a result larger than [`INLINE_RESULT_LIMIT`] is stored
//! as an artifact and the model gets its reference; the agent never offers itself.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};

use crate::catalog::Catalog;
use crate::handler::NodeRequest;
use crate::tools::Tool;

use super::client::ToolCallRequest;

/// Tool results whose JSON is longer go to the object store; the model gets the reference.
pub const INLINE_RESULT_LIMIT: usize = 16 * 1024;

/// What an agent's `tools:` entry selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// An agent or workflow by its name.
    Name(String),
    /// Every card with a skill tagged so (`tag:NAME` in the file).
    Tag(String),
}

impl Selector {
    /// `tag:NAME` or a name.
    pub fn parse(text: &str) -> Selector {
        match text.strip_prefix("tag:") {
            Some(tag) => Selector::Tag(tag.trim().to_owned()),
            None => Selector::Name(text.trim().to_owned()),
        }
    }
}

/// How long a call waits for the cards of tools named in `tools:` that the catalog has not
/// seen yet (a replica just started hears of the mesh's cards within moments).
pub const CARD_WAIT: Duration = Duration::from_secs(2);

/// The tools offered now: the live cards the selectors pick, less `own` (the agent itself).
/// Named tools not on the mesh yet get up to [`CARD_WAIT`] to appear.
pub(crate) async fn offered(catalog: &Catalog, selectors: &[Selector], own: &str) -> Vec<Tool> {
    let named: Vec<&str> = selectors
        .iter()
        .filter_map(|s| match s {
            Selector::Name(n) if n != own => Some(n.as_str()),
            _ => None,
        })
        .collect();
    let all_there = |cards: &[messages::card::AgentCard]| {
        named.iter().all(|n| cards.iter().any(|c| c.name == *n))
    };
    if !all_there(&catalog.cards()) {
        catalog.wait_until(CARD_WAIT, all_there).await;
    }
    let mut names = std::collections::BTreeSet::new();
    for s in selectors {
        match s {
            Selector::Name(n) => {
                names.insert(n.clone());
            }
            Selector::Tag(t) => names.extend(catalog.with_tag(t).into_iter().map(|c| c.name)),
        }
    }
    catalog
        .tools()
        .into_iter()
        .filter(|t| names.contains(&t.agent) && t.agent != own)
        .collect()
}

/// Runs every call in parallel; the `tool` messages answering them, in the calls' order.
pub(crate) async fn run_calls(
    catalog: &Catalog,
    offered: &[Tool],
    req: &NodeRequest,
    calls: &[ToolCallRequest],
    timeout: Duration,
) -> Vec<Value> {
    join_all(calls.iter().map(|c| async move {
        let span = tool_span(c);
        let result = tracing::Instrument::instrument(
            run_one(catalog, offered, req, c, timeout),
            span.clone(),
        )
        .await;
        let content = match result {
            Ok(v) => v,
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                json!({"error": e}).to_string()
            }
        };
        json!({"role": "tool", "tool_call_id": c.id, "content": content})
    }))
    .await
}

/// The span of one tool call: `execute_tool {tool}` (GenAI conventions); the mesh call it
/// makes is its child, so a workflow tool's run joins the trace.
fn tool_span(call: &ToolCallRequest) -> tracing::Span {
    if !crate::telemetry::active() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "gen_ai.execute_tool",
        otel.name = format!("execute_tool {}", call.name),
        otel.kind = "internal",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_str(),
    )
}

async fn run_one(
    catalog: &Catalog,
    offered: &[Tool],
    req: &NodeRequest,
    call: &ToolCallRequest,
    timeout: Duration,
) -> Result<String, String> {
    let Some(tool) = offered.iter().find(|t| t.name == call.name) else {
        return Err(format!(
            "no tool {:?} (tools: {})",
            call.name,
            offered
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let arguments: Value = if call.arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(&call.arguments)
            .map_err(|e| format!("the arguments are not JSON: {e}"))?
    };
    let output = catalog
        .call_tool(&tool.name, arguments)
        .headers(req.onward_headers())
        .timeout(timeout)
        .await
        .map_err(|e| e.to_string())?;
    let text = output.to_string();
    if text.len() <= INLINE_RESULT_LIMIT {
        return Ok(text);
    }
    let name = format!(
        "tool-results/{}/{}",
        req.task_id,
        uuid::Uuid::new_v4().simple()
    );
    let uri = catalog
        .mesh()
        .artifacts()
        .put_json(&name, &output)
        .await
        .map_err(|e| format!("the result ({} bytes) could not be stored: {e}", text.len()))?;
    Ok(json!({"artifact": uri, "bytes": text.len(),
              "note": "the result is large: it was stored as this artifact"})
    .to_string())
}
