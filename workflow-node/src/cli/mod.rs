//! Command-line interface: one module per subcommand, each with its `Args` and `run`.

pub mod card;
pub mod mermaid;
pub mod plan;
pub mod validate;

use clap::{Parser, Subcommand};

/// The workflow node of an agent mesh over NATS.
#[derive(Debug, Parser)]
#[command(name = "workflow-node", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
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
}
