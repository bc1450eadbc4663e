//! Stub agents for testing workflows without any LLM: agents described in YAML whose
//! answers are rules over the input and the call count.
//!
//! ```yaml
//! agents:
//!   - name: ValueClassifier
//!     delay: 20ms            # before answering
//!     fail_first: 2          # fail the first 2 calls of each run/node/map index/iteration
//!     error: "upstream unavailable"
//!     error_kind: transient
//!     rules:                 # the first rule whose `when` holds answers
//!       - when: "{{input.value}} < 10"
//!         output: {category: small, double: "{{input.value * 2}}"}
//!       - when: "{{input.mode}} == 'failure'"
//!         fail: "operation failed"
//!       - output: {category: large, call: "{{call}}"}
//! ```
//!
//! [`load_stub_file`] reads and checks a file; [`serve_stubs`] serves every agent of it.
//! The same file declares LLM agents (a `model:` block, [`crate::llm`]) and remote A2A
//! agents (a `remote:` block, [`crate::remote`]).

pub(crate) mod file;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value};
use workflow_expr::{to_text, Condition, Template};

use crate::agent::{AgentBuilder, AgentHandle};
use crate::error::{AgentError, ServeError};
use crate::handler::{Handler, HandlerResult, NodeRequest};

/// The error kind of a stub's own faults (a condition or template that cannot be
/// evaluated on this input).
pub const KIND_STUB_ERROR: &str = "stub_error";

/// The message of a failure when no rule matched.
pub const NO_RULE_MATCHED: &str = "no rule matched";

/// A checked stub file.
#[derive(Debug, Clone)]
pub struct StubFile {
    /// The stub agents, in file order.
    pub agents: Vec<StubAgent>,
    /// The LLM agents (`kind: llm` or a `model:` block), in file order.
    pub llm: Vec<crate::llm::LlmAgent>,
    /// The remote agents (a `remote:` block: an A2A agent outside NATS, served here by a
    /// proxy), in file order.
    pub remote: Vec<crate::remote::RemoteAgent>,
}

/// One stub agent.
#[derive(Debug, Clone)]
pub struct StubAgent {
    /// Its name on the mesh.
    pub name: String,
    /// The card's description; without one the card says `Stub agent {name}`.
    pub description: Option<String>,
    /// Advertised and enforced input schema.
    pub input_schema: Option<Value>,
    /// Advertised and enforced output schema.
    pub output_schema: Option<Value>,
    /// Wait before answering.
    pub delay: Option<Duration>,
    /// Fail this many first calls of each call key.
    pub fail_first: u64,
    /// The message of those failures.
    pub error: Option<String>,
    /// The error kind of those failures.
    pub error_kind: Option<String>,
    /// The rules; the first whose `when` holds answers.
    pub rules: Vec<Rule>,
}

/// One rule: a condition and an answer.
#[derive(Debug, Clone)]
pub struct Rule {
    /// When it applies; `None` always.
    pub when: Option<Condition>,
    /// What it answers.
    pub answer: Answer,
}

/// What a rule answers.
#[derive(Debug, Clone)]
pub enum Answer {
    /// An output (a template over `input` and `call`).
    Output(Template),
    /// A failure with a message (a template) and an optional kind.
    Fail {
        /// The error message: a template over `input` and `call`, like an output.
        message: Template,
        /// The error kind.
        kind: Option<String>,
    },
}

/// Reads and checks a stub file; every problem is reported, as
/// `FILE: agents[2].rules[0].when: ...`.
pub fn load_stub_file(path: impl AsRef<Path>) -> Result<StubFile, Vec<String>> {
    let path = path.as_ref();
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("{origin}: {e}")])?;
    file::parse(&text, &origin)
}

impl StubFile {
    /// Parses and checks stub text (YAML or JSON); `origin` names it in problems.
    pub fn parse(text: &str, origin: &str) -> Result<StubFile, Vec<String>> {
        file::parse(text, origin)
    }

    /// Checks an already parsed document: `{agents: [...]}` or the bare list (a test
    /// suite's inline `agents:`).
    pub fn from_value(doc: &Value, origin: &str) -> Result<StubFile, Vec<String>> {
        file::from_value(doc, origin)
    }
}

/// Serves every agent of `stubs` in namespace `ns`, its LLM agents ([`crate::llm`]) as
/// well, their cards unsigned; on an error, the ones already started are stopped.
pub async fn serve_stubs(
    client: async_nats::Client,
    ns: &str,
    stubs: StubFile,
) -> Result<Vec<AgentHandle>, ServeError> {
    serve_stubs_signed(client, ns, stubs, None).await
}

/// [`serve_stubs`], every agent's card signed by `signer` when given (see
/// [`crate::card_trust`]).
pub async fn serve_stubs_signed(
    client: async_nats::Client,
    ns: &str,
    stubs: StubFile,
    signer: Option<crate::Signer>,
) -> Result<Vec<AgentHandle>, ServeError> {
    let mut handles = Vec::new();
    for agent in stubs.agents {
        let mut builder = AgentBuilder::new(&agent.name).namespace(ns).description(
            agent
                .description
                .clone()
                .unwrap_or_else(|| format!("Stub agent {}", agent.name)),
        );
        if let Some(s) = &agent.input_schema {
            builder = builder.input_schema(s.clone());
        }
        if let Some(s) = &agent.output_schema {
            builder = builder.output_schema(s.clone());
        }
        if let Some(signer) = &signer {
            builder = builder.signer(signer.clone());
        }
        match builder
            .handler(StubHandler::new(agent))
            .serve(client.clone())
            .await
        {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in handles {
                    h.stop().await;
                }
                return Err(e);
            }
        }
    }
    for agent in stubs.llm {
        let name = agent.name.clone();
        let started = match crate::llm::LlmHandler::new(agent.clone()) {
            Err(reason) => Err(ServeError::Llm {
                agent: name,
                reason,
            }),
            Ok(handler) => {
                let handler = match agent.tools.is_empty() {
                    true => Ok(handler),
                    false => tool_catalog(&client, ns)
                        .await
                        .map(|c| handler.with_catalog(c))
                        .map_err(|reason| ServeError::Llm {
                            agent: name.clone(),
                            reason: format!("agent {name}: its tools: {reason}"),
                        }),
                };
                let handler = match handler {
                    Ok(h) => h.with_declared_limits(&client, ns).await.map_err(|reason| {
                        ServeError::Llm {
                            agent: name.clone(),
                            reason: format!("agent {name}: its limits: {reason}"),
                        }
                    }),
                    Err(e) => Err(e),
                };
                let handler = match handler {
                    Ok(h) => h,
                    Err(e) => {
                        for h in handles {
                            h.stop().await;
                        }
                        return Err(e);
                    }
                };
                let mut builder = AgentBuilder::new(&agent.name)
                    .namespace(ns)
                    .description(handler.description());
                if let Some(s) = &agent.input_schema {
                    builder = builder.input_schema(s.clone());
                }
                if let Some(s) = &agent.output_schema {
                    builder = builder.output_schema(s.clone());
                }
                if let Some(signer) = &signer {
                    builder = builder.signer(signer.clone());
                }
                builder.handler(handler).serve(client.clone()).await
            }
        };
        match started {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in handles {
                    h.stop().await;
                }
                return Err(e);
            }
        }
    }
    for agent in stubs.remote {
        let started = match agent.connect().await {
            Ok(connected) => connected.serve(client.clone(), ns, signer.clone()).await,
            Err(e) => Err(e.into()),
        };
        match started {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in handles {
                    h.stop().await;
                }
                return Err(e);
            }
        }
    }
    Ok(handles)
}

/// The live catalog an LLM agent's tools come from.
async fn tool_catalog(client: &async_nats::Client, ns: &str) -> Result<crate::Catalog, String> {
    let mesh = crate::Mesh::new(client.clone())
        .namespace(ns)
        .map_err(|e| e.to_string())?;
    mesh.catalog().await.map_err(|e| e.to_string())
}

/// The [`Handler`] of one stub agent.
#[derive(Debug)]
pub struct StubHandler {
    agent: StubAgent,
    calls: Mutex<HashMap<String, u64>>,
}

impl StubHandler {
    /// A handler answering as `agent` says.
    pub fn new(agent: StubAgent) -> Self {
        StubHandler {
            agent,
            calls: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a call of `key`; the 1-based count.
    fn count(&self, key: &str) -> u64 {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let n = calls.entry(key.to_owned()).or_insert(0);
        *n += 1;
        *n
    }

    /// The answer to call number `call` with `input`.
    pub fn answer(&self, input: Value, call: u64) -> HandlerResult {
        if call <= self.agent.fail_first {
            let message = self.agent.error.clone().unwrap_or_else(|| {
                format!(
                    "stub failure (call {call} of the first {})",
                    self.agent.fail_first
                )
            });
            return Err(AgentError {
                message,
                kind: self.agent.error_kind.clone(),
            });
        }
        let mut scope = Map::new();
        scope.insert("input".into(), input);
        scope.insert("call".into(), Value::from(call));
        let fault =
            |e: workflow_expr::ExprError| AgentError::with_kind(e.to_string(), KIND_STUB_ERROR);
        for rule in &self.agent.rules {
            let holds = match &rule.when {
                None => true,
                Some(c) => c.evaluate(&scope).map_err(fault)?,
            };
            if !holds {
                continue;
            }
            return match &rule.answer {
                Answer::Output(t) => t.resolve(&scope).map_err(fault),
                Answer::Fail { message, kind } => {
                    let message = message.resolve(&scope).map_err(fault)?;
                    Err(AgentError {
                        message: to_text(&message).into_owned(),
                        kind: kind.clone(),
                    })
                }
            };
        }
        Err(AgentError::new(NO_RULE_MATCHED))
    }
}

impl Handler for StubHandler {
    async fn handle(&self, req: NodeRequest) -> HandlerResult {
        let call = self.count(req.call_key());
        if let Some(delay) = self.agent.delay {
            tokio::time::sleep(delay).await;
        }
        self.answer(req.input, call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn handler(yaml: &str) -> StubHandler {
        let file = StubFile::parse(yaml, "t").unwrap();
        StubHandler::new(file.agents.into_iter().next().unwrap())
    }

    #[test]
    fn rules_answer_in_order_with_arithmetic() {
        let h = handler(
            r#"
- name: C
  rules:
    - when: "{{input.value}} < 10"
      output: {category: small, double: "{{input.value * 2}}", next: "{{call + 1}}"}
    - when: "{{input.mode}} == 'failure'"
      fail: "failed on {{input.value}}"
      error_kind: permanent
    - when: "{{input.value}} > 1000"
      output: {category: huge}
"#,
        );
        assert_eq!(
            h.answer(json!({"value": 4}), 1).unwrap(),
            json!({"category": "small", "double": 8, "next": 2})
        );
        let e = h
            .answer(json!({"value": 50, "mode": "failure"}), 1)
            .unwrap_err();
        assert_eq!(
            (e.message.as_str(), e.kind.as_deref()),
            ("failed on 50", Some("permanent"))
        );
        assert_eq!(
            h.answer(json!({"value": 2000}), 1).unwrap(),
            json!({"category": "huge"})
        );
        assert_eq!(
            h.answer(json!({"value": 50}), 1).unwrap_err().message,
            NO_RULE_MATCHED
        );
    }

    #[test]
    fn fail_first_fails_the_first_calls_of_a_key() {
        let h = handler(
            "- {name: F, fail_first: 2, error: down, error_kind: transient, output: {n: '{{call}}'}}",
        );
        let mut req = NodeRequest::new(json!({}));
        req.message_id = "m".into();
        assert_eq!(h.count(req.call_key()), 1);
        let e = h.answer(json!({}), 1).unwrap_err();
        assert_eq!(
            (e.message.as_str(), e.kind.as_deref()),
            ("down", Some("transient"))
        );
        assert!(h.answer(json!({}), 2).is_err());
        assert_eq!(h.answer(json!({}), 3).unwrap(), json!({"n": 3}));
        assert_eq!(h.count("m"), 2);
        assert_eq!(h.count("other"), 1);
    }
}
