//! Starting the agents of an agents file in-process (for `run --agents`, `test` and
//! `demo`): its stub agents, its LLM agents and proxies of its remote A2A agents, as
//! `mesh-agents` serves them.

use std::path::Path;

use anyhow::{anyhow, Result};

/// The agents of an agents file being served; they stop when this is dropped.
pub struct Stubs {
    _handles: Vec<agent_sdk::AgentHandle>,
}

/// Serves the agents of the agents file `path` on `client`.
pub async fn start(client: &async_nats::Client, ns: &str, path: &Path) -> Result<Stubs> {
    let file = agent_sdk::stub::load_stub_file(path)
        .map_err(|problems| anyhow!("{}", problems.join("\n")))?;
    let handles = agent_sdk::stub::serve_stubs(client.clone(), ns, file).await?;
    Ok(Stubs { _handles: handles })
}
