//! A secured mesh: the shipped least-privilege nats-server configuration, with each role's
//! user allowed what it needs and refused the rest.

#[path = "../support/mod.rs"]
mod support;

mod artifacts;
mod bounds;
mod cards;
mod deploy;
mod llm;
mod permissions;
mod push;
mod results;
mod steering;
mod triggers;
mod web;
