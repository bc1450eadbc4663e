//! The doors through which clients that do not speak the mesh's NATS subjects reach its
//! workflows and agents. Each door is a face like the CLI and the web view: it calls the
//! operations and the SDK's client, and speaks its own protocol.
//!
//! - [`mcp`]: the Model Context Protocol, for editors and assistants (stdio and
//!   Streamable HTTP).

pub mod mcp;
