//! Views of a loaded workflow, as pure functions over [`Workflow`](crate::definition::Workflow):
//!
//! - [`mermaid()`]: the Mermaid diagram (`workflow-node mermaid`, and the card's
//!   visualization extension);
//! - [`plan()`]: parallel batches, branches, gates, limits (`workflow-node plan`);
//! - [`agent_card`]: the A2A agent card with its three extensions (`workflow-node card`, and
//!   what the node publishes on the mesh).

pub mod card;
pub mod mermaid;
pub mod plan;

pub use card::agent_card;
pub use mermaid::{mermaid, mermaid_with_status};
pub use plan::{plan, Plan};
