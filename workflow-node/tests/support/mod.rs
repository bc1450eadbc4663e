//! What the integration tests share, included by every binary (`tests/<area>/main.rs`) as
//! `#[path = "../support/mod.rs"] mod support;`: one copy of each fixture, stub agent,
//! process harness and HTTP client. Each binary uses a part of it, so unused items are
//! allowed here rather than marked one by one.

#![allow(dead_code)]

pub(crate) mod browser;
pub(crate) mod crash;
pub(crate) mod definition;
pub(crate) mod fixtures;
pub(crate) mod flow;
pub(crate) mod fuzz;
pub(crate) mod mesh;
pub(crate) mod metrics;
pub(crate) mod process;
pub(crate) mod security;
pub(crate) mod workflows;
