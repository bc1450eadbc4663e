//! `workflow-node card`: print each workflow's agent card as pretty JSON (one file: the
//! card; several: a JSON array of cards). Invalid files: every problem on stderr, exit 1.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::visual;

/// Arguments of `card`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files (YAML or JSON), or directories of them.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The subject namespace the card's `url` names.
    #[arg(long, default_value = "mesh")]
    pub namespace: String,
}

/// Runs `card`.
pub fn run(args: Args) -> ExitCode {
    if let Err(e) = messages::subjects::validate_namespace(&args.namespace) {
        eprintln!("--namespace: {e}");
        return ExitCode::from(2);
    }
    let Some(workflows) = super::load(&args.files) else {
        return ExitCode::FAILURE;
    };
    let cards: Vec<_> = workflows
        .iter()
        .map(|w| visual::agent_card(w, &args.namespace))
        .collect();
    let json = if cards.len() == 1 {
        serde_json::to_string_pretty(&cards[0])
    } else {
        serde_json::to_string_pretty(&cards)
    };
    match json {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot write the card: {e}");
            ExitCode::FAILURE
        }
    }
}
