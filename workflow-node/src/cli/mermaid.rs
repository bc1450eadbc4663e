//! `workflow-node mermaid`: print each workflow's Mermaid diagram (several files: each
//! preceded by a `%% name` comment and separated by a blank line). Invalid files: every
//! problem on stderr, exit 1.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::visual;

/// Arguments of `mermaid`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON), or directories of them.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `mermaid`.
pub fn run(args: Args) -> ExitCode {
    let Some(workflows) = super::load(&args.files) else {
        return ExitCode::FAILURE;
    };
    let many = workflows.len() > 1;
    let diagrams: Vec<String> = workflows
        .iter()
        .map(|w| {
            let diagram = visual::mermaid(w);
            if many {
                format!("%% {}\n{diagram}", w.name)
            } else {
                diagram
            }
        })
        .collect();
    print!("{}", diagrams.join("\n"));
    ExitCode::SUCCESS
}
