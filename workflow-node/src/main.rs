//! The `workflow-node` command: validate, plan, draw, serve, run and test workflows.

use std::process::ExitCode;

use clap::Parser;
use workflow_node::cli::{self, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs on stderr only with RUST_LOG; traces when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let telemetry = agent_sdk::telemetry::Telemetry::builder("workflow-node")
        .log_default(None)
        .init();
    let code = match cli.command {
        Command::Validate(args) => cli::validate::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Mermaid(args) => cli::mermaid::run(args),
        Command::Card(args) => cli::card::run(args),
        Command::Serve(args) => cli::serve::run(*args),
        Command::Run(args) => cli::run::run(args),
        Command::Status(args) => cli::status::run(args),
        Command::Runs(args) => cli::runs::run(args),
        Command::Definitions(args) => cli::definitions::run(args),
        Command::Approvals(args) => cli::approvals::list(args),
        Command::Approve(args) => cli::approvals::decide(args, true),
        Command::Reject(args) => cli::approvals::decide(args, false),
        Command::Test(args) => cli::suite::run(args),
        Command::Demo(args) => cli::demo::run(args),
        Command::Keygen(args) => cli::identity::keygen(args),
        Command::Ui(args) => cli::ui::run(args),
        Command::Mcp(args) => cli::mcp::run(args),
        Command::Health(args) => cli::health::run(args),
    };
    // Every command's runtime has ended: the last spans go out before the exit.
    telemetry.shutdown_blocking();
    code
}
