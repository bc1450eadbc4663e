//! `workflow-node validate`: load each file, print every problem on stderr (one per line),
//! and exit 1 if there was any; otherwise print one OK line per file and exit 0.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::definition::{expand, load_file};

/// Arguments of `validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON), or directories of them.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `validate`.
pub fn run(args: Args) -> ExitCode {
    let mut problems = Vec::new();
    let mut ok = Vec::new();
    for path in expand(&args.files, &mut problems) {
        match load_file(&path) {
            Ok(w) => ok.push(format!(
                "{}: OK (workflow '{}', {} nodes)",
                path.display(),
                w.name,
                w.nodes.len()
            )),
            Err(p) => problems.extend(p),
        }
    }
    if problems.is_empty() {
        for line in ok {
            println!("{line}");
        }
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            eprintln!("{p}");
        }
        ExitCode::FAILURE
    }
}
