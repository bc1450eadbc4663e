//! `workflow-node status TASK_ID --workflow NAME`: where a run is (`tasks/get`), for a
//! caller that lost track of it. Exit 0 when the run is found, 1 when the workflow has no
//! such run, 2 on a usage or connection error.

use std::process::ExitCode;

use anyhow::{anyhow, Result};
use serde_json::json;

use super::connect::{connect, NatsArgs};
use super::identity::SignArgs;
use agent_sdk::workflow::{get_run_signed, GetRunError, RunState};

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task id the run was started with, or its execution id.
    pub task_id: String,
    /// The workflow's name.
    #[arg(long)]
    pub workflow: String,
    /// The caller name (`Mesh-Caller`) the run was started with, if any.
    #[arg(long)]
    pub caller: Option<String>,
    /// Print the `workflow_run_state` with the task state as JSON.
    #[arg(long)]
    pub json: bool,
    /// The key that started the run (or an operator's): a signed run shows only to it.
    #[command(flatten)]
    pub sign: SignArgs,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Runs `status`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(execute(args))
}

async fn execute(args: Args) -> Result<ExitCode> {
    if args.nats.nats_url.is_none() {
        return Err(anyhow!(
            "a fresh embedded server has no runs: give --nats-url (or NATS_URL) of the mesh where {} runs",
            args.workflow
        ));
    }
    let signer = args.sign.signer()?;
    let conn = connect(&args.nats).await?;
    let ns = args.nats.namespace.clone();
    let result = get_run_signed(
        &conn.client,
        &ns,
        &args.workflow,
        &args.task_id,
        args.caller.as_deref(),
        signer.as_ref(),
    )
    .await;
    conn.close().await;
    match result {
        Ok(state) => {
            print_state(&state, args.json);
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ GetRunError::NotFound { .. }) => {
            eprintln!("{e}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e.into()),
    }
}

fn print_state(state: &RunState, as_json: bool) {
    let run = &state.run;
    if as_json {
        let mut v = serde_json::to_value(run).unwrap_or_default();
        v["state"] = json!(state.state);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!(
        "run {} of {}: {} ({})",
        run.execution_id,
        run.workflow_name,
        word(&run.status),
        word(&state.state)
    );
    for (id, phase) in &run.nodes {
        println!("  {id} {}", word(phase));
    }
    if let Some(out) = &run.output {
        println!("{}", serde_json::to_string_pretty(out).unwrap_or_default());
    }
    if let Some(artifact) = &run.output_artifact_ref {
        println!("output in artifact {}", artifact.name);
    }
    if let Some(e) = &run.error_message {
        println!("error: {e}");
    }
}

/// The one-word JSON form of a status enum.
fn word<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}
