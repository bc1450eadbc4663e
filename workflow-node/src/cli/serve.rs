//! `workflow-node serve FILE_OR_DIR...`: host workflows on the mesh until SIGINT/SIGTERM,
//! then drain (stop taking events, finish the one in hand, exit).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::connect::{connect, NatsArgs};
use crate::shell::{Config, WorkflowNode};

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files or directories.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// Seconds between agent card publications.
    #[arg(long, default_value_t = 10.0)]
    pub card_interval: f64,
    /// Seconds an event may be in hand before another replica takes it over.
    #[arg(long, default_value_t = 5.0)]
    pub ack_wait: f64,
    /// Replicas of the streams and buckets (3 on a 3-node cluster).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
}

/// Runs `serve`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        let Some(workflows) = super::load(&args.files) else {
            return Ok(ExitCode::from(1));
        };
        let conn = connect(&args.nats).await?;
        let config = Config {
            namespace: args.nats.namespace.clone(),
            card_interval: Duration::from_secs_f64(args.card_interval.max(0.1)),
            ack_wait: Duration::from_secs_f64(args.ack_wait.max(0.5)),
            replicas: args.replicas,
            ..Config::default()
        };
        let names: Vec<String> = workflows.iter().map(|w| w.name.clone()).collect();
        let node = WorkflowNode::start(conn.client.clone(), workflows, config)
            .await
            .map_err(anyhow::Error::msg)?;
        eprintln!(
            "serving {} on {} (namespace '{}')",
            names.join(", "),
            conn.url,
            args.nats.namespace
        );
        wait_for_signal().await?;
        eprintln!("draining");
        node.shutdown().await;
        conn.close().await;
        Ok::<_, anyhow::Error>(ExitCode::SUCCESS)
    })
}

/// Waits for SIGINT or SIGTERM.
pub async fn wait_for_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
