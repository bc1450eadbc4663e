//! Starting stub agents in-process (for `run --agents`, `test` and `demo`).

use std::path::Path;

use anyhow::{anyhow, Result};

/// Stub agents being served; they stop when this is dropped.
pub struct Stubs {
    _handles: Vec<agent_sdk::AgentHandle>,
}

/// Serves the stub agents of `path` on `client`.
pub async fn start(client: &async_nats::Client, ns: &str, path: &Path) -> Result<Stubs> {
    let file = agent_sdk::stub::load_stub_file(path)
        .map_err(|problems| anyhow!("{}", problems.join("\n")))?;
    let handles = agent_sdk::stub::serve_stubs(client.clone(), ns, file).await?;
    Ok(Stubs { _handles: handles })
}
