//! Agents and workflows as LLM tools: a [`Tool`] per card, its declaration in the shapes
//! of the common tool-calling APIs, and [`ToolCall`], which checks an LLM's arguments
//! against the schema before anything is sent.
//!
//! A tool's parameters are the card's `input_schema` when its root is an object; another
//! schema is wrapped as `{input: schema}`; a card without one takes `{text}`. A workflow
//! is declared in two modes, as the reference does: **parameter mode** (the arguments are
//! the input) and **artifact mode** (only `input_artifact`, naming a stored artifact whose
//! JSON is the input). In the dual-mode declaration the root's `required` list moves into
//! the description (an artifact-mode call gives none of them); [`ToolCall`] still
//! enforces it in parameter mode.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use messages::card::AgentCard;
use serde_json::{json, Map, Value};

use crate::catalog::Catalog;
use crate::declare::{gemini_schema, is_object_schema, portable_name, strip_meta};
use crate::error::CallError;
use crate::mesh::{Call, Input, Output};
use crate::schema::Schema;

/// The parameter naming a stored artifact that holds a workflow's input.
pub const INPUT_ARTIFACT: &str = "input_artifact";

/// One agent or workflow, as a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The tool name: the agent's name made portable (see
    /// [`crate::declare::portable_name`]).
    pub name: String,
    /// The agent (or workflow) it calls.
    pub agent: String,
    /// Whether it is a workflow (declared in parameter and artifact mode).
    pub workflow: bool,
    /// The description: the card's, its skills, and for workflows the two modes.
    pub description: String,
    /// The card's input schema, as declared.
    pub input_schema: Option<Value>,
    /// The JSON Schema of the arguments (an object).
    pub parameters: Value,
    /// Whether the input is the `input` argument (a schema whose root is not an object).
    wrapped: bool,
}

/// A Gemini function declaration and what its schema lost on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct GeminiDeclaration {
    /// `{name, description, parameters}`.
    pub declaration: Value,
    /// The keywords dropped, each as `{JSON pointer}: {what}` (see
    /// [`crate::declare::gemini_schema`]).
    pub dropped: Vec<String>,
}

impl Tool {
    /// The tool of `card`.
    pub fn from_card(card: &AgentCard) -> Tool {
        let (input_schema, _) = card.schemas();
        let workflow = card.is_workflow();
        let (mut parameters, wrapped) = match &input_schema {
            Some(s) if is_object_schema(s) => (strip_meta(s), false),
            Some(s) => (
                json!({"type": "object", "properties": {"input": strip_meta(s)}, "required": ["input"]}),
                true,
            ),
            None => (
                json!({"type": "object", "properties": {"text": {"type": "string",
                       "description": "What to ask"}}}),
                false,
            ),
        };
        let mut description = card.description.trim().to_owned();
        if !card.skills.is_empty() {
            description.push_str("\nSkills:");
            for s in &card.skills {
                description.push_str(&format!("\n- {}: {}", s.name, s.description));
                if !s.tags.is_empty() {
                    description.push_str(&format!(" (tags: {})", s.tags.join(", ")));
                }
            }
        }
        if workflow {
            let required = parameters
                .as_object_mut()
                .and_then(|p| p.remove("required"))
                .and_then(|r| serde_json::from_value::<Vec<String>>(r).ok())
                .unwrap_or_default();
            let props = parameters
                .as_object_mut()
                .expect("parameters are an object")
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(props) = props.as_object_mut() {
                props.insert(
                    INPUT_ARTIFACT.into(),
                    json!({"type": "string", "description": "Artifact mode: the name of a \
                           stored artifact (or a nats-object:// URI) whose JSON is the whole \
                           input. Give it alone."}),
                );
            }
            description.push_str(
                "\nTwo modes, not both: parameter mode (give the parameters; the input is \
                 the arguments",
            );
            if !required.is_empty() {
                description.push_str(&format!("; required: {}", required.join(", ")));
            }
            description.push_str(
                ") or artifact mode (give only input_artifact, for a large input already \
                 stored).",
            );
        }
        Tool {
            name: portable_name(&card.name),
            agent: card.name.clone(),
            workflow,
            description,
            input_schema,
            parameters,
            wrapped,
        }
    }

    /// The OpenAI Chat Completions shape: `{type: "function", function: {name,
    /// description, parameters}}`.
    pub fn openai(&self) -> Value {
        json!({"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}})
    }

    /// The Anthropic Messages shape: `{name, description, input_schema}`.
    pub fn anthropic(&self) -> Value {
        json!({"name": self.name, "description": self.description,
               "input_schema": self.parameters})
    }

    /// The Gemini function declaration: `{name, description, parameters}` in Gemini's
    /// OpenAPI subset, with what had to be dropped.
    pub fn gemini(&self) -> GeminiDeclaration {
        let (parameters, dropped) = gemini_schema(&self.parameters);
        GeminiDeclaration {
            declaration: json!({"name": self.name, "description": self.description,
                                "parameters": parameters}),
            dropped,
        }
    }

    /// The input `arguments` stand for, checked against the input schema: the arguments
    /// themselves (or their `input`, for a wrapped schema) in parameter mode, a stored
    /// artifact in artifact mode. The error lists every violation.
    pub(crate) fn input(&self, arguments: Value) -> Result<Input, Vec<String>> {
        let Value::Object(mut args) = arguments else {
            return Err(vec![format!("arguments: {arguments} is not a JSON object")]);
        };
        if self.workflow {
            match args.remove(INPUT_ARTIFACT) {
                None | Some(Value::Null) => {}
                Some(Value::String(reference)) if !reference.is_empty() => {
                    let others: Vec<&String> = args
                        .iter()
                        .filter(|(_, v)| !v.is_null())
                        .map(|(k, _)| k)
                        .collect();
                    if !others.is_empty() {
                        return Err(vec![format!(
                            "arguments: give either {INPUT_ARTIFACT} or the parameters, not \
                             both (also given: {})",
                            others
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )]);
                    }
                    return Ok(Input::Artifact(reference));
                }
                Some(other) => {
                    return Err(vec![format!(
                        "arguments/{INPUT_ARTIFACT}: {other} is not an artifact name"
                    )]);
                }
            }
        }
        let input = match self.wrapped {
            true => args
                .remove("input")
                .ok_or_else(|| vec!["arguments: \"input\" is a required property".to_owned()])?,
            false => Value::Object(args),
        };
        if let Some(schema) = &self.input_schema {
            let schema = Schema::compile(schema).map_err(|e| {
                vec![format!(
                    "the input schema of {} is invalid: {e}",
                    self.agent
                )]
            })?;
            let at = if self.wrapped {
                "arguments/input"
            } else {
                "arguments"
            };
            let violations = schema.violations(at, &input);
            if !violations.is_empty() {
                return Err(violations);
            }
        }
        Ok(Input::Value(input))
    }
}

/// Why a tool call gave no output.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No live card makes a tool of that name.
    #[error("no tool {name} on the mesh (tools: {})", .known.join(", "))]
    NoSuchTool {
        /// The name asked for.
        name: String,
        /// The tools there are.
        known: Vec<String>,
    },
    /// The arguments do not fit the tool's schema; nothing was sent.
    #[error("the arguments of {tool} do not fit its schema:\n  - {}", .violations.join("\n  - "))]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// One line per violation, with the JSON pointer of the offending value.
        violations: Vec<String>,
    },
    /// The callee refused the input (its own validation failed).
    #[error("{tool} refused the input: {message}")]
    Refused {
        /// The tool.
        tool: String,
        /// Its message.
        message: String,
        /// The violations it listed, if any.
        violations: Vec<String>,
    },
    /// The agent failed, or the workflow's run failed.
    #[error("{tool} failed{}: {message}", .node.as_ref().map(|n| format!(" at node {n}")).unwrap_or_default())]
    Failed {
        /// The tool.
        tool: String,
        /// What went wrong.
        message: String,
        /// For a workflow, the node whose failure failed the run.
        node: Option<String>,
        /// The machine-readable kind, if given.
        kind: Option<String>,
    },
    /// No final reply within the timeout.
    #[error("{tool} did not answer in time (request sent {sends} times)")]
    TimedOut {
        /// The tool.
        tool: String,
        /// How often the request went out.
        sends: u32,
    },
    /// The call was canceled.
    #[error("the call of {tool} was canceled")]
    Canceled {
        /// The tool.
        tool: String,
    },
    /// Anything else: no responders, connection, artifacts, unreadable replies.
    #[error("calling {tool}")]
    Call {
        /// The tool.
        tool: String,
        /// What went wrong.
        #[source]
        source: Box<CallError>,
    },
}

impl ToolError {
    /// The tool error of a failed call of `tool`.
    pub fn from_call(tool: &str, e: CallError) -> ToolError {
        let tool = tool.to_owned();
        match e {
            CallError::TimedOut { sends, .. } => ToolError::TimedOut { tool, sends },
            CallError::Canceled { .. } => ToolError::Canceled { tool },
            CallError::Failed {
                message,
                kind,
                validation_errors,
                node,
                ..
            } => {
                // An SDK agent says `input_validation`; a workflow refuses a start in words.
                let refused = kind.as_deref() == Some(crate::KIND_INPUT_VALIDATION)
                    || (node.is_none()
                        && (message.starts_with("input does not match")
                            || message.starts_with("invalid input")
                            || message.starts_with("input artifact")));
                if refused {
                    ToolError::Refused {
                        tool,
                        message,
                        violations: validation_errors,
                    }
                } else {
                    ToolError::Failed {
                        tool,
                        message,
                        node,
                        kind,
                    }
                }
            }
            CallError::Rpc { code, message, .. }
                if code == messages::jsonrpc::codes::INVALID_PARAMS =>
            {
                ToolError::Refused {
                    tool,
                    message,
                    violations: Vec::new(),
                }
            }
            source => ToolError::Call {
                tool,
                source: Box::new(source),
            },
        }
    }
}

/// A call of a tool, from [`Catalog::call_tool`]: await it for the output (stored outputs
/// fetched), or [`ToolCall::output`] for stored outputs as references, or
/// [`ToolCall::start`] for the running [`Call`] (progress, cancel).
#[derive(Debug)]
#[must_use = "a tool call does nothing until awaited or started"]
pub struct ToolCall {
    catalog: Catalog,
    name: String,
    arguments: Value,
    timeout: Option<Duration>,
    task_id: Option<String>,
    headers: Option<async_nats::HeaderMap>,
}

impl ToolCall {
    pub(crate) fn new(catalog: Catalog, name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            catalog,
            name: name.to_owned(),
            arguments,
            timeout: None,
            task_id: None,
            headers: None,
        }
    }

    /// Headers for the call: an agent's [`crate::NodeRequest::onward_headers`] (trace
    /// context, call depth, its name as the caller).
    pub fn headers(mut self, headers: async_nats::HeaderMap) -> Self {
        self.headers = Some(headers);
        self
    }

    /// How long to wait for the output (default: the mesh's).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The task id (default: a fresh one).
    pub fn task_id(mut self, id: impl Into<String>) -> Self {
        self.task_id = Some(id.into());
        self
    }

    /// Checks the arguments and starts the call; nothing is sent when they do not fit.
    /// (Map the call's error with [`ToolError::from_call`].)
    pub fn start(self) -> Result<Call, ToolError> {
        self.start_named().map(|(_, call)| call)
    }

    fn start_named(self) -> Result<(String, Call), ToolError> {
        let Some(tool) = self.catalog.tool(&self.name) else {
            return Err(ToolError::NoSuchTool {
                name: self.name,
                known: self.catalog.tools().into_iter().map(|t| t.name).collect(),
            });
        };
        let input =
            tool.input(self.arguments)
                .map_err(|violations| ToolError::InvalidArguments {
                    tool: tool.name.clone(),
                    violations,
                })?;
        let mut call = self.catalog.mesh().agent(&tool.agent);
        if let Some(t) = self.timeout {
            call = call.timeout(t);
        }
        if let Some(id) = self.task_id {
            call = call.task_id(id);
        }
        if let Some(h) = self.headers {
            call = call.headers(h);
        }
        Ok((tool.name, call.start(input)))
    }

    /// The output as the tool gave it: a stored output as a reference, unread.
    pub async fn output(self) -> Result<Output, ToolError> {
        let (tool, call) = self.start_named()?;
        call.output()
            .await
            .map_err(|e| ToolError::from_call(&tool, e))
    }
}

impl IntoFuture for ToolCall {
    type Output = Result<Value, ToolError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let (tool, call) = self.start_named()?;
            call.await.map_err(|e| ToolError::from_call(&tool, e))
        })
    }
}
