//! Definitions in one binary: reading workflow files (fields, graph, expressions), the
//! reference's dialect, the views of a workflow (diagram, plan, card), the shipped examples,
//! `validate` as a user runs it, and fuzzing of the parse and validate path.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod dialect;
mod examples;
mod expressions;
mod fields;
mod fuzz_definitions;
mod graph;
mod visual;
