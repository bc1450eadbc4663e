//! An agent that uses workflows as tools: for each request it looks at the catalog,
//! chooses the first workflow whose skill tags match a word of the request (a
//! deterministic rule standing in for an LLM), calls it as a tool in parameter mode, and
//! answers with its result.
//!
//! ```sh
//! cargo run -p workflow-node --example tool_agent            # starts a local nats-server
//! NATS_URL=nats://localhost:4222 cargo run -p workflow-node --example tool_agent
//! ```
//!
//! The example hosts everything it needs in one process: a stub `Doubler` agent, a
//! workflow node serving two workflows (`Doubling`, tagged `double`, and `Shouting`,
//! tagged `shout`), and the tool agent; then it asks the tool agent twice and prints the
//! answers. `workflow-node/tests/example_tool_agent.rs` runs it as a test.

use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, AgentError, Catalog, Mesh, NodeRequest, Tool};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

const STUBS: &str = r#"
agents:
  - name: Doubler
    input_schema: {type: object, properties: {value: {type: number}}, required: [value]}
    rules:
      - output: {value: "{{input.value * 2}}"}
  - name: Shouter
    rules:
      - output: {text: "{{input.text}}!"}
"#;

const DOUBLING: &str = r#"
name: Doubling
workflow:
  description: Doubles every number of a list.
  skills:
    - {id: double, name: Double numbers, description: doubles each number, tags: [double, twice]}
  input_schema:
    type: object
    properties: {numbers: {type: array, items: {type: number}}}
    required: [numbers]
  nodes:
    - {id: each, type: map, items: "{{workflow.input.numbers}}", node: one}
    - {id: one, type: agent, agent_name: Doubler, input: {value: "{{_map_item}}"}}
  output_mapping:
    doubled: "{{each.output.results}}"
"#;

const SHOUTING: &str = r#"
name: Shouting
workflow:
  description: Shouts a text.
  skills:
    - {id: shout, name: Shout, description: adds an exclamation mark, tags: [shout, loud]}
  input_schema:
    type: object
    properties: {text: {type: string}}
    required: [text]
  nodes:
    - {id: shout, type: agent, agent_name: Shouter, input: {text: "{{workflow.input.text}}"}}
  output_mapping:
    text: "{{shout.output.text}}"
"#;

/// The first workflow of the catalog with a skill tag equal to a word of `request`.
fn choose(catalog: &Catalog, request: &str) -> Option<Tool> {
    let words: Vec<String> = request
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .collect();
    catalog
        .workflows()
        .iter()
        .find(|card| {
            card.skills
                .iter()
                .flat_map(|s| &s.tags)
                .any(|tag| words.contains(&tag.to_lowercase()))
        })
        .map(Tool::from_card)
}

/// The tool agent: `{request, arguments}` → `{tool, result}`.
fn tool_agent(catalog: Catalog) -> AgentBuilder {
    AgentBuilder::new("ToolAgent")
        .description("Answers a request with the workflow whose skill tags match it")
        .input_schema(json!({"type": "object", "required": ["request"],
            "properties": {"request": {"type": "string"}, "arguments": {"type": "object"}}}))
        .handler(handler_fn(move |req: NodeRequest| {
            let catalog = catalog.clone();
            async move {
                let request = req.input["request"].as_str().unwrap_or_default();
                let tool = choose(&catalog, request).ok_or_else(|| {
                    AgentError::with_kind(format!("no workflow fits {request:?}"), "no_tool")
                })?;
                let arguments = req.input.get("arguments").cloned().unwrap_or(json!({}));
                let result = catalog
                    .call_tool(&tool.name, arguments)
                    .await
                    .map_err(|e| AgentError::new(e.to_string()))?;
                Ok(json!({"tool": tool.name, "result": result}))
            }
        }))
}

/// Hosts the stubs, the workflows and the tool agent on `client`, asks the tool agent
/// each of `requests` and returns its answers (an error's text for a failed request).
pub(crate) async fn run(client: async_nats::Client, requests: Vec<Value>) -> Result<Vec<Value>> {
    let mesh = Mesh::new(client.clone()).timeout(Duration::from_secs(30));
    let stubs = agent_sdk::StubFile::parse(STUBS, "stubs").map_err(|p| anyhow::anyhow!("{p:?}"))?;
    let _stubs = agent_sdk::serve_stubs(client.clone(), mesh.ns(), stubs).await?;
    let workflows = [DOUBLING, SHOUTING]
        .iter()
        .map(|y| parse_str(y, "example.yaml").map_err(|p| anyhow::anyhow!("{p:?}")))
        .collect::<Result<Vec<_>>>()?;
    let node = WorkflowNode::start(client.clone(), workflows, Config::default())
        .await
        .map_err(anyhow::Error::msg)?;
    let catalog = mesh.catalog().await?;
    let ready = catalog
        .wait_until(Duration::from_secs(10), |cards| {
            ["Doubling", "Shouting"]
                .iter()
                .all(|n| cards.iter().any(|c| c.name == *n))
        })
        .await;
    anyhow::ensure!(ready, "the workflows' cards never arrived");
    let agent = mesh.serve(tool_agent(catalog)).await?;
    let mut answers = Vec::new();
    for request in requests {
        answers.push(match mesh.agent("ToolAgent").call(request).await {
            Ok(answer) => answer,
            Err(e) => json!({"error": e.to_string()}),
        });
    }
    agent.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), node.shutdown()).await;
    Ok(answers)
}

#[allow(dead_code)] // unused when a test includes this file
#[tokio::main]
async fn main() -> Result<()> {
    let (client, _server) = match std::env::var("NATS_URL") {
        Ok(url) => (async_nats::connect(&url).await?, None),
        Err(_) => {
            let server = nats_process::NatsServer::start(Default::default())
                .context("starting a local nats-server (set NATS_URL to use one)")?;
            (async_nats::connect(server.url()).await?, Some(server))
        }
    };
    let requests = vec![
        json!({"request": "Please double these", "arguments": {"numbers": [1, 2, 3]}}),
        json!({"request": "shout it", "arguments": {"text": "hello"}}),
        json!({"request": "sing a song", "arguments": {}}),
    ];
    for answer in run(client, requests).await? {
        println!("{answer}");
    }
    Ok(())
}
