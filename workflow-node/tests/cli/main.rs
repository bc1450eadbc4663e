//! The `workflow-node` command line as a user runs it: the built binary against a real
//! nats-server (run, runs, steering, health) and the workflow client it uses.

#[path = "../support/mod.rs"]
mod support;

mod client;
mod health;
mod llm;
mod run;
mod runs;
mod signal;
mod steer;
