//! `workflow-node plan`: print each workflow's dry-run plan (parallel batches, branches,
//! gates, limits). Invalid files: every problem on stderr, exit 1.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::visual;

/// Arguments of `plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON), or directories of them.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `plan`.
pub fn run(args: Args) -> ExitCode {
    let Some(workflows) = super::load(&args.files) else {
        return ExitCode::FAILURE;
    };
    let plans: Vec<String> = workflows
        .iter()
        .map(|w| visual::plan(w).to_string())
        .collect();
    print!("{}", plans.join("\n"));
    ExitCode::SUCCESS
}
