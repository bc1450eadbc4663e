//! `workflow-node demo`: everything on one machine in one command — an embedded
//! nats-server, the example stub agents, the workflow node hosting the example workflows,
//! and one run of an example, with its progress and output.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;
use serde_json::json;

use super::connect::{connect, NatsArgs};
use super::run::{show_progress, DEFAULT_TIMEOUT};
use crate::shell::{Config, WorkflowNode};
use agent_sdk::workflow::invoke;

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The examples directory (workflows/ and agents.yaml).
    #[arg(long, default_value = "examples")]
    pub examples: PathBuf,
    /// Name of the example workflow to run (one defined in the examples' workflows/).
    #[arg(long, default_value = "ValueRouter")]
    pub workflow: String,
    /// The run's input, as JSON.
    #[arg(long, default_value = r#"{"value": 42, "label": "demo"}"#)]
    pub input: String,
    /// NATS connection (embedded by default).
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Runs `demo`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        let input: serde_json::Value =
            serde_json::from_str(&args.input).map_err(|e| anyhow!("--input: {e}"))?;
        let workflows = super::load(&[args.examples.join("workflows")])
            .ok_or_else(|| anyhow!("invalid example workflows"))?;
        let conn = connect(&args.nats).await?;
        let ns = args.nats.namespace.clone();
        let stubs =
            super::stubs::start(&conn.client, &ns, &args.examples.join("agents.yaml")).await?;
        let names: Vec<String> = workflows.iter().map(|w| w.name.clone()).collect();
        let mut config = Config {
            namespace: ns.clone(),
            ..Config::default()
        };
        // The demo decides no approvals: its approvers get keys nobody holds.
        super::identity::bind_hosted(&mut config, &workflows);
        let node = WorkflowNode::start(conn.client.clone(), workflows, config)
            .await
            .map_err(anyhow::Error::msg)?;
        eprintln!("workflow node serving {}", names.join(", "));
        eprintln!("running {} with {}", args.workflow, json!(input));
        let result = invoke(
            &conn.client,
            &ns,
            &args.workflow,
            &input,
            DEFAULT_TIMEOUT,
            show_progress,
        )
        .await;
        node.shutdown().await;
        drop(stubs);
        conn.close().await;
        let result = result?;
        if let Some(trace) = &result.trace_id {
            eprintln!("trace {trace}");
        }
        match result.status.as_str() {
            "success" => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&result.output).unwrap_or_default()
                );
                Ok(ExitCode::SUCCESS)
            }
            status => {
                eprintln!("run {status}: {}", result.error.unwrap_or_default());
                Ok(ExitCode::from(1))
            }
        }
    })
}
