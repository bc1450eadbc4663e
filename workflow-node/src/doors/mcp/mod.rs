//! The MCP door: the mesh's workflows and agents as MCP tools, for editors and assistants
//! (`docs/mcp.md`). `workflow-node mcp` serves it on stdio; the web view serves it at
//! `/mcp` (Streamable HTTP) behind its tokens and host checks. The protocol is `rmcp`'s
//! (both eras: the `initialize` handshake up to 2025-11-25, per-request metadata from
//! 2026-07-28); what is decided here is what the tools are and what a call does:
//!
//! - `tools/list` is the live catalog ([`agent_sdk::Catalog`]: only cards signed as the
//!   door's `CardTrust` says), filtered by name or tag ([`ToolFilter`]), each tool made by
//!   [`tools::mcp_tool`]. When the list changes the door says so
//!   (`notifications/tools/list_changed`: on the session for a legacy client, on a
//!   `subscriptions/listen` stream for a modern one).
//! - `tools/call` is [`call::call`]: the arguments checked against the schema before
//!   anything is sent, progress forwarded, a cancel passed on, an approval gate answered as
//!   such, a stored output linked.
//! - `resources/read` reads an artifact a result linked to (the namespace's artifacts
//!   bucket only, bounded).

mod call;
pub mod tools;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::{Catalog, Mesh, Tool};
use messages::card::AgentCard;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

pub use tools::ToolFilter;

/// The revisions served: the current one (2026-07-28) and the two before it, which
/// clients of the `initialize` era still speak.
const REVISIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// How often a list watch looks again for cards that expired (a card that arrives is
/// seen at once).
const LIST_CHECK: Duration = Duration::from_secs(5);

/// The largest artifact `resources/read` returns, and the largest stored output a call
/// reads back into its result: 16 MiB.
pub const MAX_RESOURCE_BYTES: usize = 16 << 20;

/// The largest arguments a call takes, as JSON: 1 MiB. A larger input goes through the
/// object store (a workflow's `input_artifact`), as on the mesh.
pub const MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// What the door is started with, besides its connection.
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// Which tools to serve.
    #[command(flatten)]
    pub filter: ToolFilter,
    /// How long a tool call may take (a workflow run included) before it fails as timed
    /// out.
    #[arg(long = "mcp-call-timeout", value_name = "DURATION", default_value = "10m",
          value_parser = parse_duration)]
    pub timeout: Duration,
}

impl Default for McpArgs {
    fn default() -> McpArgs {
        McpArgs {
            filter: ToolFilter::default(),
            timeout: Duration::from_secs(600),
        }
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    workflow_expr::duration::parse(text).map_err(|e| e.to_string())
}

/// The MCP door's handler: one per connection (stdio) or per session (HTTP); clones share
/// the catalog.
#[derive(Debug, Clone)]
pub struct Door {
    catalog: Catalog,
    args: Arc<McpArgs>,
}

impl Door {
    /// Opens the door on `mesh` (its namespace, signer and card trust: what it sends is
    /// signed as the mesh says), following the catalog from now on.
    pub async fn open(mesh: Mesh, args: McpArgs) -> anyhow::Result<Door> {
        let catalog = mesh.catalog().await?;
        Ok(Door {
            catalog,
            args: Arc::new(args),
        })
    }

    /// The tools served now, with their cards, by name.
    fn tools(&self) -> Vec<(Tool, AgentCard)> {
        let cards = self.catalog.cards();
        let mut tools: Vec<(Tool, AgentCard)> = self
            .catalog
            .tools()
            .into_iter()
            .filter_map(|t| {
                let card = cards.iter().find(|c| c.name == t.agent)?.clone();
                self.args.filter.keeps(&t, &card).then_some((t, card))
            })
            .collect();
        tools.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        tools
    }

    /// The tool named `name`, if it is served.
    fn tool(&self, name: &str) -> Option<(Tool, AgentCard)> {
        self.tools().into_iter().find(|(t, _)| t.name == name)
    }

    /// The served tools' names (what a list change is judged by).
    fn names(&self) -> Vec<String> {
        self.tools().into_iter().map(|(t, _)| t.name).collect()
    }

    /// Waits until the served tools differ from `last`, and updates it.
    async fn changed(&self, last: &mut Vec<String>) {
        loop {
            // Any arriving card wakes the wait; expiries are seen on the next check.
            let _ = self
                .catalog
                .wait_until(LIST_CHECK, |_| self.names() != *last)
                .await;
            let now = self.names();
            if now != *last {
                *last = now;
                return;
            }
        }
    }
}

impl ServerHandler for Door {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .build();
        let mut info = ServerConfig::new(capabilities).with_instructions(
            "The workflows and agents of an agent mesh, as tools. A workflow runs to its \
             end; a run that stops at an approval gate is reported as such, with the run \
             and gate to decide on.",
        );
        info.server_info.name = "workflow-node".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(REVISIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools()
            .iter()
            .map(|(t, card)| tools::mcp_tool(t, card))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        call::call(self, request, context).await.map(Into::into)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        read(&self.catalog, &request.uri).await.map(Into::into)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A legacy session hears of list changes on itself, until it closes.
        let door = self.clone();
        tokio::spawn(async move {
            let mut last = door.names();
            loop {
                door.changed(&mut last).await;
                if context.peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut last = self.names();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                () = self.changed(&mut last) => {
                    if context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// The artifact `uri` names, as a resource: only `nats-object://` URIs of the namespace's
/// artifacts bucket, at most [`MAX_RESOURCE_BYTES`].
async fn read(catalog: &Catalog, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    if !uri.starts_with(messages::payload::OBJECT_SCHEME) {
        return Err(ErrorData::invalid_params(
            format!(
                "no resource {uri}: resources here are artifacts, {}BUCKET/NAME",
                messages::payload::OBJECT_SCHEME
            ),
            None,
        ));
    }
    let store = catalog.mesh().artifacts().max_bytes(MAX_RESOURCE_BYTES);
    let bytes = store.read_reference(uri).await.map_err(|e| {
        let message = format!("reading {uri}: {}", error_chain(&e));
        match e {
            agent_sdk::ArtifactError::NotFound { .. } => {
                ErrorData::resource_not_found(message, None)
            }
            _ => ErrorData::invalid_params(message, None),
        }
    })?;
    let contents = match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri).with_mime_type(messages::payload::JSON_MIME),
        Err(e) => {
            let blob = data_encoding::BASE64.encode(&e.into_bytes());
            ResourceContents::blob(blob, uri)
        }
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

/// An error with its sources, joined by `: `.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// Serves the door on stdin and stdout until the client closes them (nothing else may
/// write to stdout meanwhile: logs go to stderr).
pub async fn serve_stdio(door: Door) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let running = door.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

/// The Streamable HTTP service of the door, as the web view mounts it at `/mcp`. Its
/// `Host` and `Origin` are checked by the web view's boundary before this sees the
/// request (rmcp's own host list is off: the boundary knows the view's public names).
/// Sessions (legacy clients: they carry cancellations and list changes) live in this
/// process; 2026-07-28 requests are served without one.
pub fn http_service(
    door: Door,
) -> rmcp::transport::StreamableHttpService<
    Door,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let config = rmcp::transport::StreamableHttpServerConfig::default().disable_allowed_hosts();
    rmcp::transport::StreamableHttpService::new(
        move || Ok(door.clone()),
        Arc::new(Default::default()),
        config,
    )
}
