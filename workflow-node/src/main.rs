//! The `workflow-node` command: validate, plan, draw, serve, run and test workflows.

use std::process::ExitCode;

use clap::Parser;
use workflow_node::cli::{self, Cli, Command};

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    match Cli::parse().command {
        Command::Validate(args) => cli::validate::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Mermaid(args) => cli::mermaid::run(args),
        Command::Card(args) => cli::card::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Run(args) => cli::run::run(args),
        Command::Status(args) => cli::status::run(args),
        Command::Runs(args) => cli::runs::run(args),
        Command::Definitions(args) => cli::definitions::run(args),
        Command::Approvals(args) => cli::approvals::list(args),
        Command::Approve(args) => cli::approvals::decide(args, true),
        Command::Reject(args) => cli::approvals::decide(args, false),
        Command::Test(args) => cli::suite::run(args),
        Command::Demo(args) => cli::demo::run(args),
    }
}
