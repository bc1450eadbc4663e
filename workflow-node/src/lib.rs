//! The workflow node of an agent mesh over NATS.
//!
//! - [`definition`]: parse and validate workflow files.
//! - [`cli`]: the `workflow-node` command's subcommands.
//! - [`limits`]: every limit on what the node accepts, with its default.

pub mod cli;
pub mod core;
pub mod definition;
pub mod limits;
pub mod shell;
pub mod visual;
