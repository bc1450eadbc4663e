//! `mesh-agents FILE ...`: serves the agents an agents file declares, stub agents and LLM
//! agents alike. The program is `stub-agents`' (its old name, kept for existing scripts):
//! one source, two names.

#[path = "stub-agents.rs"]
mod program;

fn main() -> std::process::ExitCode {
    program::main_as("mesh-agents")
}
