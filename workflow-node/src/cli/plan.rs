//! `workflow-node plan`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `plan`.
pub fn run(args: Args) -> ExitCode {
    eprintln!("plan: not implemented yet ({} files)", args.files.len());
    ExitCode::from(2)
}
