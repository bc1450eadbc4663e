//! The doors to the mesh from outside NATS, driven by clients nobody here wrote, against a
//! real nats-server, a workflow node, agents and the web view's server: A2A's official
//! Python SDK (`a2a`, `nats_binding`, `push_lease`, `push_tls`, `signals`), MCP's (`mcp`),
//! and agents outside NATS served by A2A's SDK and called by workflows (`remote`).

#[path = "../support/mod.rs"]
mod support;

mod a2a;
mod mcp;
mod nats_binding;
mod push_lease;
mod push_tls;
mod remote;
mod signals;
