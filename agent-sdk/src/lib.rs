//! Write agents for the mesh in Rust, and call agents and workflows: as tools, too.
//!
//! Calling a workflow as a tool, in ten lines:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_sdk::Mesh;
//! use serde_json::json;
//!
//! let mesh = Mesh::connect("nats://127.0.0.1:4222").await?;
//! let catalog = mesh.catalog().await?; // the cards on the mesh, kept up to date
//! catalog.wait_for("MapDouble", std::time::Duration::from_secs(5)).await;
//! let tool = catalog.tool("MapDouble").ok_or("no such workflow")?;
//! let declaration = tool.openai(); // or .anthropic(), .gemini(): hand it to the LLM
//! # let _ = declaration;
//! let arguments = json!({"numbers": [1, 2, 3]}); // what the LLM chose
//! let output = catalog.call_tool(&tool.name, arguments).await?; // checked, then called
//! println!("{output}");
//! # Ok(()) }
//! ```
//!
//! [`Mesh`] is the caller's handle: `mesh.agent("Name").timeout(..).call(input)` starts a
//! [`Call`], whose [`Call::progress`] streams a run's progress as typed [`Progress`]
//! events, and which [`Call::cancel`] (or dropping it) cancels. [`Catalog`] keeps the
//! cards ([`Catalog::workflows`], [`Catalog::agents`], [`Catalog::with_tag`]); [`Tool`]
//! declares a card to OpenAI-, Anthropic- and Gemini-style APIs ([`declare`] has the
//! schema conversion and each API's rules as checks); [`Catalog::call_tool`] validates an
//! LLM's arguments before sending and reports a [`ToolError`]. Workflows are tools in two
//! modes: parameter mode (the arguments are the input) and artifact mode (only
//! `input_artifact`, a stored artifact holding the input).
//!
//! A catalog takes a card only when its signer may speak for its name ([`card_trust`]:
//! names bound to keys with [`Mesh::card_trust`], else the first key seen per name), and
//! an agent signs its own with [`AgentBuilder::signer`].
//!
//! ## Serving
//!
//! An agent declares a name, description, skills and JSON Schemas with an
//! [`AgentBuilder`], gives it a [`Handler`] (or a closure through [`handler_fn`]) and calls
//! [`AgentBuilder::serve`]. The SDK then, following `docs/protocol.md`:
//!
//! - publishes the card (with the schemas extension) at start, every card interval and on
//!   any message to the discovery ping subject, each copy signed when it has a signer;
//! - serves `{ns}.a2a.v1.agent.request.{name}` in queue group `{name}`, one tokio task per
//!   call, at most `max_in_flight` handlers at once;
//! - reads the input (DataPart, wrapped non-objects, object-store FileParts), validates it
//!   against the effective input schema (the handler never sees a violation), calls the
//!   handler, validates the output, stores large outputs in the object store;
//! - answers a workflow's call with a `workflow_node_result` and a plain call with the
//!   output as a DataPart, to the reply subject, with `Nats-Msg-Id` and the trace headers;
//! - runs a task id once: a copy of a request whose task runs here shares its answer, and
//!   one whose task finished recently (the last `dedup_capacity` calls within
//!   `dedup_window`) gets the same answer again, without running the handler;
//! - sends a running call's caller a `working` update every heartbeat interval, so a
//!   caller that resends after silence (see [`Timing`]) does not; a handler tells the
//!   caller how it is going with [`NodeRequest::send_status`] (a workflow node forwards
//!   that to its run's callers);
//! - aborts a running call on a `tasks/cancel` broadcast and answers `canceled`;
//! - answers `tasks/get` of a task running here or remembered as ended (else "task not
//!   found", -32001);
//! - answers malformed requests with a JSON-RPC error and keeps serving.
//!
//! Modules: [`mesh`] (the caller's handle, calls, progress, cancel), [`workflow`] (runs of
//! a workflow read as results: invoke, start, retry, `tasks/get`), [`connect`] (user,
//! NKey, credentials, TLS and inbox prefix for a secured mesh), [`catalog`] (the cards on
//! the mesh; [`cards`], the cache it keeps), [`tools`] and [`declare`] (tools for LLMs), [`agent`] (builder and handle),
//! [`handler`] (what agents implement), [`artifacts`] (the object store; the wrapping
//! conventions are in `messages::payload`), [`schema`] (JSON Schema checks), [`stub`]
//! (YAML-described stub agents for testing workflows), [`error`], [`signing`] (NKey
//! signatures proving who asks), [`telemetry`] (logs and OpenTelemetry traces in one
//! call), [`health`] (liveness and readiness probes over HTTP). Inside: `exchange` sends a
//! request until it is answered (every call goes through it), `protocol` decodes requests
//! and builds replies without I/O, `server` runs the loop.
//!
//! Features: `clap` makes [`ConnectConfig`] a `clap` argument group; `stubs` builds the
//! `stub-agents` binary. An agent needs neither.

pub mod agent;
mod artifact_get;
pub mod artifacts;
pub mod card_trust;
pub mod cards;
pub mod catalog;
pub mod connect;
pub mod crypto;
pub mod declare;
mod dedup;
pub mod error;
mod exchange;
pub mod handler;
pub mod health;
pub mod llm;
pub mod mesh;
pub mod metrics;
pub mod pings;
mod protocol;
pub mod remote;
mod roundtrip;
pub mod schema;
mod server;
pub mod signal;
pub mod signing;
pub mod stub;
pub mod telemetry;
pub mod tools;
pub mod workflow;

pub use agent::{
    skill, AgentBuilder, AgentHandle, DEFAULT_DEDUP_CAPACITY, DEFAULT_DEDUP_WINDOW,
    DEFAULT_NAMESPACE,
};
pub use artifacts::{Artifact, ArtifactInfo, ArtifactStore, ObjectRead};
pub use card_trust::{AgentKey, CardTrust};
pub use cards::{CardCache, CardRefused};
pub use catalog::{Catalog, CatalogError};
pub use connect::{ConnectConfig, ConnectConfigError};
pub use error::{
    AgentError, ArtifactError, CallError, ConnectionError, MalformedReply, RoundtripError,
    ServeError,
};
pub use exchange::{Timing, DEFAULT_RESEND_INTERVAL};
pub use handler::{handler_fn, FnHandler, Handler, HandlerResult, NodeRequest, WorkflowCallInfo};
pub use mesh::{AgentCall, Call, CallOptions, Mesh, Output, Progress, ProgressStream};
pub use protocol::{KIND_CANCELED, KIND_INPUT_VALIDATION, KIND_OUTPUT_VALIDATION};
pub use signal::{signal, Signal, SignalError, SignalTo};
pub use signing::{SignatureError, Signer};
pub use stub::{load_stub_file, serve_stubs, serve_stubs_signed, StubFile};
pub use tools::{GeminiDeclaration, Tool, ToolCall, ToolError};

#[cfg(test)]
mod tests {
    /// An agent's build pulls no command-line parser or binary-only crates: they come
    /// with the `clap` and `stubs` features (the `stub-agents` binary requires `stubs`).
    #[test]
    fn an_agent_build_pulls_no_clap_and_the_plumbing_stays_private() {
        let manifest = include_str!("../Cargo.toml");
        let deps = manifest
            .split("[dependencies]")
            .nth(1)
            .and_then(|s| s.split("\n[").next())
            .expect("a [dependencies] table");
        for name in ["clap", "anyhow", "nats-process"] {
            let line = deps
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}.")))
                .unwrap_or_else(|| panic!("{name} is a dependency"));
            assert!(
                line.contains("optional = true"),
                "{name} is not optional: {line}"
            );
        }
        assert!(manifest.contains("required-features = [\"stubs\"]"));
        let lib = include_str!("lib.rs");
        for plumbing in ["mod exchange;", "mod roundtrip;"] {
            assert!(
                lib.lines().any(|l| l == plumbing),
                "{plumbing} is not private"
            );
        }
    }
}
