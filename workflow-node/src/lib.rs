//! The workflow node of an agent mesh over NATS.
//!
//! - [`definition`]: parse and validate workflow files.
//! - [`ops`]: the operations on runs and definitions every face shares, with typed
//!   refusals.
//! - [`cli`]: the `workflow-node` command's subcommands (arguments, then `ops`, then
//!   printing).
//! - [`web`]: the web view (pages and a JSON API over `ops`), a face beside the CLI.
//! - [`limits`]: every limit on what the node accepts, with its default.

pub mod cli;
pub mod core;
pub mod definition;
pub mod doors;
pub mod limits;
pub mod ops;
pub mod shell;
pub mod visual;
pub mod web;

#[cfg(test)]
mod layout;
