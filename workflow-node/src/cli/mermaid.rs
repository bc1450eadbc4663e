//! `workflow-node mermaid`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `mermaid`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `mermaid`.
pub fn run(args: Args) -> ExitCode {
    eprintln!("mermaid: not implemented yet ({} files)", args.files.len());
    ExitCode::from(2)
}
