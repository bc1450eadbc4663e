//! Views of a loaded workflow, as pure functions over [`Workflow`]:
//!
//! - [`mermaid()`]: the Mermaid diagram (`workflow-node mermaid`, and the card's
//!   visualization extension);
//! - [`plan()`]: parallel batches, branches, gates, limits (`workflow-node plan`);
//! - [`agent_card`]: the A2A agent card with its three extensions (`workflow-node card`, and
//!   what the node publishes on the mesh).
//!
//! [`load_workflows`] is the loading step the three subcommands share.

pub mod card;
pub mod mermaid;
pub mod plan;

use std::path::PathBuf;

pub use card::agent_card;
pub use mermaid::mermaid;
pub use plan::{plan, Plan};

use crate::definition::{expand, load_file, Problem, Workflow};

/// Loads every file of `files` (directories expanded), in order; every problem of every
/// file when any fails.
pub fn load_workflows(files: &[PathBuf]) -> Result<Vec<Workflow>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut workflows = Vec::new();
    for path in expand(files, &mut problems) {
        match load_file(&path) {
            Ok(w) => workflows.push(w),
            Err(p) => problems.extend(p),
        }
    }
    if problems.is_empty() {
        Ok(workflows)
    } else {
        Err(problems)
    }
}
