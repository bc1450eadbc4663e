//! A secured mesh: the shipped least-privilege nats-server configuration, with each role's
//! user allowed what it needs and refused the rest.

#[path = "../support/mod.rs"]
mod support;

mod artifacts;
mod cards;
mod deploy;
mod permissions;
mod steering;
mod web;
