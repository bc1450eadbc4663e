//! `workflow-node validate`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `validate`.
pub fn run(args: Args) -> ExitCode {
    eprintln!("validate: not implemented yet ({} files)", args.files.len());
    ExitCode::from(2)
}
