//! The doors to the mesh from outside NATS, each driven by an official client nobody here
//! wrote: the MCP door (`mcp`), and agents outside NATS called by workflows (`remote`).

#[path = "../support/mod.rs"]
mod support;

mod mcp;
mod remote;
