//! Command-line interface: one module per subcommand, each with its `Args` and `run`.

pub mod approvals;
pub mod card;
pub mod connect;
pub mod definitions;
pub mod demo;
pub mod health;
pub mod identity;
pub mod mcp;
pub mod mermaid;
pub mod plan;
pub mod run;
pub mod runs;
pub(crate) mod runs_show;
pub mod schedules;
pub mod serve;
pub mod signal;
pub mod status;
pub mod steer;
pub mod stubs;
pub mod suite;
pub mod table;
pub mod triggers;
pub mod ui;
pub mod validate;

use std::future::Future;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::definition::Workflow;

/// The workflow node of an agent mesh over NATS.
#[derive(Debug, Parser)]
#[command(name = "workflow-node", version, about)]
pub struct Cli {
    /// The subcommand, parsed with its own `Args`.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands; `main` hands each `Args` to the `run` of its module (`test`'s is
/// `suite`), whose exit code is the process's.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check workflow files and report every problem, one per line.
    Validate(validate::Args),
    /// Show the parallel batches, branches and gates of a workflow.
    Plan(plan::Args),
    /// Print the Mermaid diagram of a workflow.
    Mermaid(mermaid::Args),
    /// Print the agent card JSON of a workflow.
    Card(card::Args),
    /// Host workflows on the mesh.
    Serve(Box<serve::Args>),
    /// Invoke a workflow as another agent would and print its output.
    Run(run::Args),
    /// Show where a run is (its state, nodes, and output or error) by task id.
    Status(status::Args),
    /// List, show, watch, cancel runs and read their history.
    Runs(runs::Args),
    /// List, add, pause, resume, delete and trigger the schedules that start runs.
    Schedules(schedules::Args),
    /// List the dead letters of event triggers, and replay one.
    Triggers(triggers::Args),
    /// List the stored workflow definitions and the runs using each; delete one.
    Definitions(definitions::Args),
    /// List the approval gates waiting for a decision.
    Approvals(approvals::ListArgs),
    /// Approve a waiting approval gate of a run.
    Approve(approvals::DecideArgs),
    /// Reject a waiting approval gate of a run.
    Reject(approvals::DecideArgs),
    /// Run workflow test suites against stub agents.
    Test(suite::Args),
    /// Run the demo: a local server, stub agents, the node, one run of an example.
    Demo(demo::Args),
    /// Serve the mesh's workflows and agents as MCP tools on stdin/stdout.
    Mcp(mcp::Args),
    /// Serve the web view of a mesh (its cards, runs and approvals: pages and JSON API) and
    /// its doors (every workflow and agent over A2A): the mesh's gateway, hosting no
    /// workflow. Also named `gateway`.
    #[command(alias = "gateway")]
    Ui(ui::Args),
    /// Ask a running `serve` or `stub-agents` whether it is ready (or live): exit 0 if so.
    Health(health::Args),
    /// Make an NKey user key: the seed to a file (mode 600), the public key on stdout.
    Keygen(identity::KeygenArgs),
}

/// Runs a command's async body on a fresh runtime; errors print and exit 2.
pub fn block_on<F>(body: F) -> std::process::ExitCode
where
    F: Future<Output = anyhow::Result<std::process::ExitCode>>,
{
    block_on_threads(None, body)
}

/// [`block_on`] on a runtime of `threads` worker threads (`None`: one per core).
pub fn block_on_threads<F>(threads: Option<usize>, body: F) -> std::process::ExitCode
where
    F: Future<Output = anyhow::Result<std::process::ExitCode>>,
{
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n);
    }
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(body) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// How long `run` and `test` give the workflows they host to stop after the last case.
const NODE_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Stops a node hosted for `run` or `test` once the results are in, for at most
/// [`NODE_STOP_TIMEOUT`]: with the server gone its last flush would wait for a reconnect
/// that may never come, and an event cut short is delivered again to the next replica.
async fn stop_hosted(node: crate::shell::WorkflowNode) {
    if tokio::time::timeout(NODE_STOP_TIMEOUT, node.shutdown())
        .await
        .is_err()
    {
        eprintln!(
            "the hosted workflows did not stop within {} s: leaving them",
            NODE_STOP_TIMEOUT.as_secs()
        );
    }
}

/// Loads workflow files (directories expanded), printing every problem on stderr; `None`
/// when any is invalid. Every subcommand that takes workflow files loads them here.
pub fn load(paths: &[PathBuf]) -> Option<Vec<Workflow>> {
    let (workflows, problems) = crate::definition::load_paths(paths);
    for p in &problems {
        eprintln!("{p}");
    }
    problems.is_empty().then_some(workflows)
}
