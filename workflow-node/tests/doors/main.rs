//! The doors to the mesh over HTTP, driven by clients nobody here wrote: A2A's official
//! Python SDK (`a2a-sdk`, from the project's `.venv`) against a real nats-server, a
//! workflow node, agents and the web view's server.

#[path = "../support/mod.rs"]
mod support;

mod a2a;
mod nats_binding;
mod push_lease;
