//! The A2A 0.3 agent card, and the Solace Agent Mesh extensions a workflow card carries:
//! agent type, input/output schemas, visualization (Mermaid source and workflow config) and
//! display name.
//!
//! Extensions live in `capabilities.extensions[]` as `{uri, description?, required?,
//! params?}`; the helpers here read and write them by URI so callers never walk the list.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::a2a::JsonObject;

/// The A2A protocol version our cards declare.
pub const PROTOCOL_VERSION: &str = "0.3.0";

/// `preferredTransport` of cards served over NATS.
pub const TRANSPORT_NATS: &str = "NATS";

/// Extension telling what kind of agent this is: params `{type: "workflow"}` for workflows.
pub const EXT_AGENT_TYPE: &str = "https://solace.com/a2a/extensions/agent-type";
/// Extension carrying JSON Schemas: params `{input_schema?, output_schema?}`.
pub const EXT_SCHEMAS: &str = "https://solace.com/a2a/extensions/sam/schemas";
/// Extension carrying a workflow's diagram: params `{mermaid_source, workflow_config}`, or,
/// when those would make the card larger than one NATS message, `{content_uri}` naming an
/// object (`nats-object://{bucket}/{name}`) whose JSON is those params.
pub const EXT_WORKFLOW_VISUALIZATION: &str =
    "https://solace.com/a2a/extensions/sam/workflow-visualization";

/// The key of [`EXT_WORKFLOW_VISUALIZATION`]'s params naming where the content is stored.
pub const VISUALIZATION_CONTENT_URI: &str = "content_uri";
/// Extension carrying a human-friendly name: params `{display_name}`. The A2A card has no
/// such field; this is where the Solace Agent Mesh UI looks for it.
pub const EXT_DISPLAY_NAME: &str = "https://solace.com/a2a/extensions/display-name";

/// The agent type of workflows in the [`EXT_AGENT_TYPE`] extension.
pub const AGENT_TYPE_WORKFLOW: &str = "workflow";

/// An A2A 0.3 agent card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// `"0.3.0"`.
    pub protocol_version: String,
    /// The agent's name on the mesh (one subject token).
    pub name: String,
    /// What the agent does.
    pub description: String,
    /// Where to call it; for us `nats:{ns}.a2a.v1.agent.request.{name}`.
    pub url: String,
    /// The transport of `url` (A2A default `JSONRPC`; ours [`TRANSPORT_NATS`]).
    #[serde(default = "default_transport")]
    pub preferred_transport: String,
    /// The agent's version.
    pub version: String,
    /// Capabilities, including the extensions.
    #[serde(default)]
    pub capabilities: AgentCapabilities,
    /// Media types the agent accepts.
    #[serde(default)]
    pub default_input_modes: Vec<String>,
    /// Media types the agent produces.
    #[serde(default)]
    pub default_output_modes: Vec<String>,
    /// What the agent can do.
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
}

fn default_transport() -> String {
    "JSONRPC".to_owned()
}

/// `capabilities` of a card.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// Whether the agent streams status updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Whether the agent supports push notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    /// Extensions, by URI.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<AgentExtension>,
}

/// One card extension: `{uri, description?, required?, params?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentExtension {
    /// Identifies the extension (its version is part of the URI).
    pub uri: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether clients must understand it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// The extension's settings, shaped by its URI (the schemas extension carries
    /// `input_schema` and `output_schema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<JsonObject>,
}

/// One skill: `{id, name, description, tags, examples?, inputModes?, outputModes?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Unique id within the card.
    pub id: String,
    /// A short name.
    pub name: String,
    /// What the skill does.
    pub description: String,
    /// Keywords for people and discovery tools; the mesh does not match on them.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Example requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples: Option<Vec<String>>,
    /// Media types accepted, when they differ from the card's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_modes: Option<Vec<String>>,
    /// Media types produced, when they differ from the card's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_modes: Option<Vec<String>>,
}

impl AgentCard {
    /// A card with protocol 0.3.0, NATS transport, streaming on, input and output modes
    /// `text` and `application/json`, no skills and no extensions.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        url: impl Into<String>,
        version: impl Into<String>,
    ) -> Self {
        let modes = vec!["text".to_owned(), "application/json".to_owned()];
        AgentCard {
            protocol_version: PROTOCOL_VERSION.to_owned(),
            name: name.into(),
            description: description.into(),
            url: url.into(),
            preferred_transport: TRANSPORT_NATS.to_owned(),
            version: version.into(),
            capabilities: AgentCapabilities {
                streaming: Some(true),
                push_notifications: Some(false),
                extensions: Vec::new(),
            },
            default_input_modes: modes.clone(),
            default_output_modes: modes,
            skills: Vec::new(),
        }
    }

    /// The extension with `uri`, if the card has it.
    pub fn extension(&self, uri: &str) -> Option<&AgentExtension> {
        self.capabilities.extensions.iter().find(|e| e.uri == uri)
    }

    /// The `params` of the extension with `uri`.
    fn params(&self, uri: &str) -> Option<&JsonObject> {
        self.extension(uri).and_then(|e| e.params.as_ref())
    }

    /// Adds `ext`, replacing any extension with the same URI (keeps its position).
    pub fn set_extension(&mut self, ext: AgentExtension) {
        match self
            .capabilities
            .extensions
            .iter_mut()
            .find(|e| e.uri == ext.uri)
        {
            Some(slot) => *slot = ext,
            None => self.capabilities.extensions.push(ext),
        }
    }

    /// The agent type from [`EXT_AGENT_TYPE`] (`"workflow"` for workflows).
    pub fn agent_type(&self) -> Option<&str> {
        self.params(EXT_AGENT_TYPE)?.get("type")?.as_str()
    }

    /// Whether the card describes a workflow.
    pub fn is_workflow(&self) -> bool {
        self.agent_type() == Some(AGENT_TYPE_WORKFLOW)
    }

    /// `(input_schema, output_schema)` from [`EXT_SCHEMAS`]; JSON null counts as absent.
    pub fn schemas(&self) -> (Option<Value>, Option<Value>) {
        let Some(params) = self.params(EXT_SCHEMAS) else {
            return (None, None);
        };
        let get = |k: &str| params.get(k).filter(|v| !v.is_null()).cloned();
        (get("input_schema"), get("output_schema"))
    }

    /// The Mermaid diagram from [`EXT_WORKFLOW_VISUALIZATION`].
    pub fn mermaid_source(&self) -> Option<&str> {
        self.params(EXT_WORKFLOW_VISUALIZATION)?
            .get("mermaid_source")?
            .as_str()
    }

    /// The workflow configuration from [`EXT_WORKFLOW_VISUALIZATION`].
    pub fn workflow_config(&self) -> Option<&Value> {
        self.params(EXT_WORKFLOW_VISUALIZATION)?
            .get("workflow_config")
    }

    /// Where the visualization is stored when the card does not carry it
    /// ([`VISUALIZATION_CONTENT_URI`]): a `nats-object://` URI.
    pub fn visualization_ref(&self) -> Option<&str> {
        self.params(EXT_WORKFLOW_VISUALIZATION)?
            .get(VISUALIZATION_CONTENT_URI)?
            .as_str()
    }

    /// The params of [`EXT_WORKFLOW_VISUALIZATION`] as the card carries them.
    pub fn visualization_params(&self) -> Option<&JsonObject> {
        self.params(EXT_WORKFLOW_VISUALIZATION)
    }

    /// The display name from [`EXT_DISPLAY_NAME`].
    pub fn display_name(&self) -> Option<&str> {
        self.params(EXT_DISPLAY_NAME)?.get("display_name")?.as_str()
    }

    /// Sets the [`EXT_AGENT_TYPE`] extension to `{type: agent_type}`.
    pub fn with_agent_type(mut self, agent_type: &str) -> Self {
        let mut params = Map::new();
        params.insert("type".into(), Value::String(agent_type.to_owned()));
        self.set_extension(extension(
            EXT_AGENT_TYPE,
            "Specifies the type of agent (e.g., 'workflow').",
            params,
        ));
        self
    }

    /// Sets the [`EXT_SCHEMAS`] extension; absent schemas are left out of `params`, and
    /// with neither the extension is removed (as the reference does).
    pub fn with_schemas(mut self, input: Option<Value>, output: Option<Value>) -> Self {
        if input.is_none() && output.is_none() {
            self.capabilities
                .extensions
                .retain(|e| e.uri != EXT_SCHEMAS);
            return self;
        }
        let mut params = Map::new();
        if let Some(input) = input {
            params.insert("input_schema".into(), input);
        }
        if let Some(output) = output {
            params.insert("output_schema".into(), output);
        }
        self.set_extension(extension(
            EXT_SCHEMAS,
            "Input and output JSON schemas for the workflow.",
            params,
        ));
        self
    }

    /// Sets the [`EXT_WORKFLOW_VISUALIZATION`] extension to
    /// `{mermaid_source, workflow_config}`.
    pub fn with_visualization(self, mermaid_source: String, workflow_config: Value) -> Self {
        let mut params = Map::new();
        params.insert("mermaid_source".into(), Value::String(mermaid_source));
        params.insert("workflow_config".into(), workflow_config);
        self.with_visualization_params(params)
    }

    /// Sets the [`EXT_WORKFLOW_VISUALIZATION`] extension's params as given: the inline
    /// `{mermaid_source, workflow_config}`, e.g. as read back from the object a
    /// [`visualization_ref`](Self::visualization_ref) names.
    pub fn with_visualization_params(mut self, params: JsonObject) -> Self {
        self.set_extension(extension(
            EXT_WORKFLOW_VISUALIZATION,
            "Mermaid diagram and JSON configuration of the workflow.",
            params,
        ));
        self
    }

    /// Sets the [`EXT_WORKFLOW_VISUALIZATION`] extension to `{content_uri}`: the diagram
    /// and configuration are in the object `uri` names, for a card too large to carry them.
    pub fn with_visualization_ref(self, uri: String) -> Self {
        let mut params = Map::new();
        params.insert(VISUALIZATION_CONTENT_URI.into(), Value::String(uri));
        self.with_visualization_params(params)
    }

    /// Sets the [`EXT_DISPLAY_NAME`] extension to `{display_name}`.
    pub fn with_display_name(mut self, display_name: &str) -> Self {
        let mut params = Map::new();
        params.insert(
            "display_name".into(),
            Value::String(display_name.to_owned()),
        );
        self.set_extension(extension(EXT_DISPLAY_NAME, "Display name for UI", params));
        self
    }
}

fn extension(uri: &str, description: &str, params: JsonObject) -> AgentExtension {
    AgentExtension {
        uri: uri.to_owned(),
        description: Some(description.to_owned()),
        required: Some(false),
        params: Some(params),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stored_visualization_is_a_reference_until_read_back() {
        let card = AgentCard::new("W", "d", "nats:x", "1")
            .with_visualization("graph TD".into(), json!({"nodes": []}));
        let inline = card.visualization_params().cloned().unwrap();
        let stored = card
            .clone()
            .with_visualization_ref("nats-object://b/cards/W".into());
        assert_eq!(stored.mermaid_source(), None);
        assert_eq!(stored.visualization_ref(), Some("nats-object://b/cards/W"));
        assert_eq!(card.visualization_ref(), None);
        assert_eq!(stored.with_visualization_params(inline), card);
    }
}
