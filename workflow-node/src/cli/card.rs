//! `workflow-node card`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `card`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `card`.
pub fn run(args: Args) -> ExitCode {
    eprintln!("card: not implemented yet ({} files)", args.files.len());
    ExitCode::from(2)
}
