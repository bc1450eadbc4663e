//! The mesh's cards as MCP tools, and a call's ending as a tool result: pure functions,
//! no I/O. A tool is `agent_sdk`'s [`Tool`] (the one declaration every tool-calling face
//! shares: its name, description and parameters), with the card's output schema added.
//!
//! MCP before 2026-07-28 wants an object at the root of `outputSchema` and of
//! `structuredContent`; the mesh's outputs may be anything. An output whose schema is not
//! an object (or, without a schema, an output that is not an object) is sent wrapped as
//! `{"value": output}`, its schema as `{"type":"object","properties":{"value": schema}}`:
//! the wrapping the mesh already uses for non-object payloads. Every result repeats its
//! structured content as a JSON text block, for clients that read only text.

use std::sync::Arc;

use agent_sdk::declare::{is_object_schema, strip_meta};
use agent_sdk::Tool;
use messages::card::AgentCard;
use rmcp::model::{
    CallToolResult, ContentBlock as Content, JsonObject, MetaObject, Resource, Tool as McpTool,
};
use serde_json::{json, Value};

/// Which of the mesh's tools a door serves: all, or those named or tagged.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ToolFilter {
    /// Serve only this tool over MCP (a workflow or agent name, or its tool name;
    /// repeatable): the others are neither listed nor callable.
    #[arg(long = "mcp-tool", value_name = "NAME", value_delimiter = ',')]
    pub names: Vec<String>,
    /// Serve only the tools with a skill tagged so over MCP (repeatable; with `--mcp-tool`,
    /// a tool named or tagged is served).
    #[arg(long = "mcp-tag", value_name = "TAG", value_delimiter = ',')]
    pub tags: Vec<String>,
}

impl ToolFilter {
    /// Whether the tool `tool` of card `card` is served.
    pub fn keeps(&self, tool: &Tool, card: &AgentCard) -> bool {
        if self.names.is_empty() && self.tags.is_empty() {
            return true;
        }
        let named = self
            .names
            .iter()
            .any(|n| *n == tool.name || *n == tool.agent);
        let tagged = card.skills.iter().any(|s| {
            s.tags
                .iter()
                .any(|t| self.tags.iter().any(|want| want.eq_ignore_ascii_case(t)))
        });
        named || tagged
    }
}

/// Whether a tool's output travels wrapped as `{"value": output}` (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The output schema's root is an object: the output is sent as it is.
    Object,
    /// The output schema's root is not an object: the output is always wrapped.
    Wrapped,
    /// No output schema: an object is sent as it is, anything else wrapped.
    Free,
}

impl Shape {
    /// The shape of a card's output schema.
    pub fn of(output_schema: Option<&Value>) -> Shape {
        match output_schema {
            Some(s) if is_object_schema(s) => Shape::Object,
            Some(_) => Shape::Wrapped,
            None => Shape::Free,
        }
    }

    /// `output` as the structured content of a result of this shape.
    pub fn structured(self, output: Value) -> Value {
        match (self, output) {
            (Shape::Object, v) => v,
            (Shape::Free, v @ Value::Object(_)) => v,
            (_, v) => json!({ "value": v }),
        }
    }
}

/// The MCP tool of `tool`, made from `card`.
pub fn mcp_tool(tool: &Tool, card: &AgentCard) -> McpTool {
    let input = object(tool.parameters.clone());
    let (_, output_schema) = card.schemas();
    let output = output_schema.as_ref().map(|s| {
        let s = strip_meta(s);
        match Shape::of(Some(&s)) {
            Shape::Object => object(s),
            _ => {
                object(json!({"type": "object", "properties": {"value": s}, "required": ["value"]}))
            }
        }
    });
    let mut t = McpTool::new(tool.name.clone(), tool.description.clone(), Arc::new(input));
    t.title = Some(card.name.clone());
    t.output_schema = output.map(Arc::new);
    t
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// The result of a call that gave `output` (in `shape`): the structured content, and the
/// same as a JSON text block.
pub fn output_result(shape: Shape, output: Value) -> CallToolResult {
    let structured = shape.structured(output);
    let mut r = CallToolResult::success(vec![Content::text(structured.to_string())]);
    r.structured_content = Some(structured);
    r
}

/// The result of a call whose output was stored in the artifact at `uri`, `size` bytes:
/// a link to it (readable with `resources/read`), with the output as structured content
/// when it was read back (`output`), else as a tool error saying where it is: a result
/// without the structured content its schema promises would fail a client's check.
pub fn stored_result(
    shape: Shape,
    tool: &str,
    uri: &str,
    size: Option<u64>,
    output: Option<Value>,
) -> CallToolResult {
    let mut link = Resource::new(uri, format!("{tool} output"))
        .with_description(format!("the output of {tool}, stored as an artifact"))
        .with_mime_type(messages::payload::JSON_MIME);
    if let Some(size) = size {
        link = link.with_size(size);
    }
    let link = Content::resource_link(link);
    match output {
        Some(output) => {
            let structured = shape.structured(output);
            let note = format!("the output of {tool} is stored at {uri}; read it as a resource");
            let mut r = CallToolResult::success(vec![Content::text(note), link]);
            r.structured_content = Some(structured);
            r
        }
        None => CallToolResult::error(vec![
            Content::text(format!(
                "the output of {tool} is too large to send inline: it is stored at {uri} \
                 (read it with resources/read)"
            )),
            link,
        ]),
    }
}

/// The metadata key under which a result says the run waits for an approval.
pub const APPROVAL_META: &str = "io.github.agent-mesh/approval";

/// The result of a call whose run stopped at an approval gate: a tool error (the output
/// is not there yet) that says so, names the run and the gate, and carries them as
/// metadata. The run goes on waiting; deciding is an operator's act, signed, by the CLI
/// (`workflow-node approve|reject RUN --node NODE`) or the web view.
pub fn approval_result(request: &messages::workflow::WorkflowApprovalRequest) -> CallToolResult {
    let mut text = format!(
        "{} waits for approval at node {} (run {}): decide with `workflow-node approve {} \
         --node {}` (or reject), or in the web view; the run continues after the decision",
        request.workflow_name,
        request.node_id,
        request.execution_id,
        request.execution_id,
        request.node_id,
    );
    if !request.message.is_empty() {
        text.push_str(&format!(". The gate says: {}", request.message));
    }
    let mut r = CallToolResult::error(vec![Content::text(text)]);
    let mut meta = MetaObject::new();
    meta.0.insert(
        APPROVAL_META.into(),
        json!({
            "workflow": request.workflow_name,
            "execution_id": request.execution_id,
            "node": request.node_id,
            "approvers": request.approvers,
            "message": request.message,
        }),
    );
    r.meta = Some(meta);
    r
}

/// A failed call as a tool error with `message`.
pub fn failed_result(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![Content::text(message.into())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_that_are_not_objects_travel_wrapped() {
        assert_eq!(Shape::Object.structured(json!({"a": 1})), json!({"a": 1}));
        assert_eq!(Shape::Wrapped.structured(json!(3)), json!({"value": 3}));
        // A wrapped schema wraps even an object, as its schema says.
        assert_eq!(
            Shape::Wrapped.structured(json!({"a": 1})),
            json!({"value": {"a": 1}})
        );
        assert_eq!(Shape::Free.structured(json!({"a": 1})), json!({"a": 1}));
        assert_eq!(Shape::Free.structured(json!("x")), json!({"value": "x"}));
    }

    #[test]
    fn a_filter_keeps_tools_named_or_tagged() {
        let card = |name: &str, tag: &str| {
            let skill: messages::card::AgentSkill = serde_json::from_value(
                json!({"id": "s", "name": "s", "description": "s", "tags": [tag]}),
            )
            .expect("a skill");
            agent_sdk::AgentBuilder::new(name).skill(skill).card()
        };
        let (a, b) = (card("Alpha", "Loud"), card("Beta", "quiet"));
        let (ta, tb) = (Tool::from_card(&a), Tool::from_card(&b));
        assert!(ToolFilter::default().keeps(&ta, &a));
        let named = ToolFilter {
            names: vec!["Alpha".into()],
            tags: vec![],
        };
        assert!(named.keeps(&ta, &a) && !named.keeps(&tb, &b));
        let tagged = ToolFilter {
            names: vec![],
            tags: vec!["loud".into()],
        };
        assert!(tagged.keeps(&ta, &a) && !tagged.keeps(&tb, &b));
    }

    #[test]
    fn a_schema_shape_follows_its_root() {
        assert_eq!(Shape::of(Some(&json!({"type": "object"}))), Shape::Object);
        assert_eq!(Shape::of(Some(&json!({"type": "array"}))), Shape::Wrapped);
        assert_eq!(Shape::of(None), Shape::Free);
    }

    #[test]
    fn an_approval_is_reported_with_its_run_and_gate() {
        let r = approval_result(&messages::workflow::WorkflowApprovalRequest {
            workflow_name: "Pay".into(),
            execution_id: "e1".into(),
            node_id: "gate".into(),
            approvers: vec!["ops".into()],
            message: "ok to pay?".into(),
        });
        assert_eq!(r.is_error, Some(true));
        let meta = r.meta.expect("meta");
        assert_eq!(meta.0[APPROVAL_META]["node"], "gate");
        let text = r.content[0].as_text().expect("text").text.clone();
        assert!(text.contains("waits for approval at node gate"), "{text}");
    }
}
