//! The `workflow-node` command: validate, plan, draw and serve workflows.

use std::process::ExitCode;

use clap::Parser;
use workflow_node::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate(args) => workflow_node::cli::validate::run(args),
        Command::Plan(args) => workflow_node::cli::plan::run(args),
        Command::Mermaid(args) => workflow_node::cli::mermaid::run(args),
        Command::Card(args) => workflow_node::cli::card::run(args),
    }
}
