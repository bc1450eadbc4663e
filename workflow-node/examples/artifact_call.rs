//! A workflow called as a tool in artifact mode: a large input (several MB) is stored as
//! an artifact, the workflow is called with only `input_artifact` naming it, and its
//! output, too large to travel inline, comes back as an artifact reference
//! (`output_artifact_ref`) that the example prints and reads back.
//!
//! ```sh
//! cargo run -p workflow-node --example artifact_call            # starts a local nats-server
//! NATS_URL=nats://localhost:4222 cargo run -p workflow-node --example artifact_call
//! ```
//!
//! The example hosts everything it needs in one process: an `Upcaser` agent, a workflow
//! node serving the `Shouting` workflow (which upper-cases a text), and the caller.
//! `workflow-node/tests/example_artifact_call.rs` runs it as a test.

use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, Mesh, NodeRequest, Output, Progress};
use anyhow::{Context, Result};
use futures::StreamExt;
use messages::workflow::ArtifactRef;
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

const SHOUTING: &str = r#"
name: Shouting
workflow:
  description: Upper-cases a text of any size.
  skills:
    - {id: shout, name: Shout, description: upper-cases a text, tags: [shout]}
  input_schema:
    type: object
    properties: {title: {type: string}, text: {type: string}}
    required: [text]
  nodes:
    - {id: up, type: agent, agent_name: Upcaser, input: {text: "{{workflow.input.text}}"}}
  output_mapping:
    title: "{{workflow.input.title}}"
    text: "{{up.output.text}}"
    length: "{{up.output.length}}"
"#;

/// What the example did: the artifact it stored, the one the workflow named as its
/// output, and that output as read back.
#[derive(Debug)]
pub(crate) struct Report {
    /// The input artifact.
    pub(crate) input: ArtifactRef,
    /// The output artifact, as the run's `workflow_execution_result` named it.
    pub(crate) output: ArtifactRef,
    /// The output as the final reply gave it: a `nats-object://` URI.
    pub(crate) stored: String,
    /// The output artifact's content.
    pub(crate) result: Value,
}

/// The input: a title and a text of `bytes` bytes.
pub(crate) fn input(bytes: usize) -> Value {
    let line = "the quick brown fox jumps over the lazy dog\n";
    let text: String = line.repeat(bytes / line.len() + 1)[..bytes].to_owned();
    json!({"title": "a large text", "text": text})
}

/// Hosts the agent and the workflow on `client`, stores `input` as an artifact, calls the
/// workflow in artifact mode and reads its stored output back.
pub(crate) async fn run(client: async_nats::Client, input: Value) -> Result<Report> {
    let mesh = Mesh::new(client.clone()).timeout(Duration::from_secs(60));
    let upcaser = AgentBuilder::new("Upcaser")
        .description("Upper-cases a text")
        .handler(handler_fn(|req: NodeRequest| async move {
            let text = req.input["text"]
                .as_str()
                .unwrap_or_default()
                .to_uppercase();
            Ok(json!({"length": text.len(), "text": text}))
        }));
    let agent = mesh.serve(upcaser).await?;
    let workflow = parse_str(SHOUTING, "shouting.yaml").map_err(|p| anyhow::anyhow!("{p:?}"))?;
    let node = WorkflowNode::start(client.clone(), vec![workflow], Config::default())
        .await
        .map_err(anyhow::Error::msg)?;
    let catalog = mesh.catalog().await?;
    catalog
        .wait_for("Shouting", Duration::from_secs(10))
        .await
        .context("the workflow's card never arrived")?;

    // Artifact mode: the input is stored first, and the call names it.
    let store = mesh.artifacts();
    let bytes = serde_json::to_vec(&input)?;
    let input_ref = store
        .put("shouting-input.json", &bytes, "application/json")
        .await?;
    println!(
        "stored {} bytes as {} (version {})",
        bytes.len(),
        input_ref.name,
        input_ref.version.unwrap_or_default()
    );
    let mut call = catalog
        .call_tool(
            "Shouting",
            json!({"input_artifact": input_ref.object_key()}),
        )
        .start()?;
    let mut progress = call.progress();
    let output = call.output().await;
    // The call has ended, so its progress stream ends too.
    let mut named = None;
    while let Some(event) = progress.next().await {
        if let Progress::RunFinished(end) = event {
            named = end.output_artifact_ref;
        }
    }
    let stored = match output.map_err(|e| agent_sdk::ToolError::from_call("Shouting", e))? {
        Output::Stored(uri) => uri,
        Output::Value(v) => anyhow::bail!("the output came back inline: {:.200}", v.to_string()),
    };
    let output_ref = named.context("the run's result named no output artifact")?;
    println!(
        "output_artifact_ref: {} (version {}), {stored}",
        output_ref.name,
        output_ref.version.unwrap_or_default()
    );
    let artifact = store.get(&output_ref).await?;
    let result: Value = serde_json::from_slice(&artifact.bytes)?;
    println!(
        "read back {} bytes ({}): title {}, length {}, starts {:?}",
        artifact.bytes.len(),
        artifact.mime,
        result["title"],
        result["length"],
        result["text"].as_str().unwrap_or_default().get(..20)
    );
    agent.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), node.shutdown()).await;
    Ok(Report {
        input: input_ref,
        output: output_ref,
        stored,
        result,
    })
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
    let report = run(client, input(4 << 20)).await?;
    println!(
        "{} -> {}: {} bytes of text, at {}",
        report.input.name, report.output.name, report.result["length"], report.stored
    );
    Ok(())
}
