//! LLM agents declared in the agents file, answered by any OpenAI-compatible
//! chat-completions endpoint (OpenAI, vLLM, Ollama's `/v1`, llama.cpp's server, LiteLLM)
//! over HTTP or HTTPS.
//!
//! ```yaml
//! agents:
//!   - name: Summarizer
//!     description: Summarises a text in one sentence
//!     model:                        # (or `kind: llm`) makes it an LLM agent
//!       base_url: http://127.0.0.1:11434/v1   # or https://api.openai.com/v1
//!       ca_file: /etc/llm/ca.pem    # optional, https only: trust this CA, not the system's
//!       name: llama3.2              # the `model` of each request
//!       api_key_env: OPENAI_API_KEY # or api_key_file: /run/secrets/llm-key; or neither
//!       temperature: 0.2
//!       max_tokens: 512
//!       timeout: 60s                # per model call (default 120s)
//!       stream: true                # stream tokens to the caller as status updates
//!       structured_output: json_schema   # or `json_object` (llama.cpp), `instructions`
//!     system: You are terse.        # optional system message (plain text)
//!     instruction: "Summarise: {{input.text}}"   # the user message, a template over input
//!     input_schema: {type: object, required: [text]}
//!     output_schema: {type: object, required: [summary], properties: {summary: {type: string}}}
//! ```
//!
//! Without an `output_schema` the output is `{"text": ANSWER}`; with one, the answer is
//! parsed as JSON and validated, and one repair round (the violations sent back to the
//! model) is tried before the call fails with kind `output_validation`. The key is read
//! once at start, sent only as `Authorization: Bearer`, and never printed: not in the
//! card, an error, a span or a log ([`client::ApiKey`]).
//!
//! Decided here: the client never retries (a workflow node's `retry_strategy` does, on
//! the `transient` kind), and a cancelled call drops the HTTP request.

pub mod client;
mod content;
pub(crate) mod file;
pub mod limits;
mod metrics;
pub mod tools;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use workflow_expr::{to_text, Template};

use crate::catalog::Catalog;
use crate::error::AgentError;
use crate::handler::{Handler, HandlerResult, NodeRequest};
use crate::protocol::KIND_OUTPUT_VALIDATION;
use crate::schema::Schema;
use client::{ApiKey, ChatClient, Completion};

/// The timeout of one model call when the file gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How many rounds of tool calls a call may take when the file does not say.
pub const DEFAULT_MAX_TOOL_ROUNDS: u32 = 10;

/// How long one tool call may take when the file does not say.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a whole call (every model and tool call) may take when the file does not say.
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(300);

/// The error kind of a call whose model kept asking for tools past `max_tool_rounds`.
pub const KIND_TOOL_ROUNDS: &str = "tool_rounds_exceeded";

/// How often streamed text reaches the caller at most: deltas in between are batched
/// into one status update.
pub const STREAM_BATCH: Duration = Duration::from_millis(200);

/// One LLM agent of the agents file.
#[derive(Debug, Clone)]
pub struct LlmAgent {
    /// Its name on the mesh.
    pub name: String,
    /// The card's description; without one the card says `LLM agent {name} ({model})`.
    pub description: Option<String>,
    /// Advertised and enforced input schema.
    pub input_schema: Option<Value>,
    /// Advertised and enforced output schema; the answer must match it.
    pub output_schema: Option<Value>,
    /// The endpoint and sampling.
    pub model: ModelConfig,
    /// The system message.
    pub system: Option<String>,
    /// The user message: a template over `input` (the whole input as JSON without one).
    pub instruction: Option<Template>,
    /// The agents and workflows offered as tools (from the live catalog).
    pub tools: Vec<tools::Selector>,
    /// The bound on rounds of tool calls in one call.
    pub max_tool_rounds: u32,
    /// The timeout of one tool call.
    pub tool_timeout: Duration,
    /// The bound on one whole call: model calls, tool calls and the repair.
    pub max_time: Duration,
    /// A bound on model calls at once, shared by every process serving an agent with the
    /// same limit key.
    pub limit: Option<Limit>,
    /// Whether model calls' spans carry the prompts and completions (`record_content:
    /// true`; or, for every agent, [`CAPTURE_CONTENT_ENV`]).
    pub record_content: bool,
}

/// The variable that turns on recording prompts and completions in spans for every LLM
/// agent of the process, as OpenTelemetry's GenAI instrumentations name it: `true`,
/// `span_only` or `span_and_event` turn it on (events are not emitted: spans carry them).
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Whether [`CAPTURE_CONTENT_ENV`] asks for content.
fn capture_content_from_env() -> bool {
    std::env::var(CAPTURE_CONTENT_ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "true" | "span_only" | "span_and_event"
        )
    })
}

/// Limits on model calls shared across processes ([`limits`]); at least one is set.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// What the limit is of (a provider account, say); agents naming the same key share it.
    pub key: String,
    /// Model calls at once, across the mesh.
    pub max_concurrency: Option<u32>,
    /// Model requests per minute, across the mesh.
    pub requests_per_minute: Option<u64>,
    /// Tokens (prompt and answer) per minute, across the mesh.
    pub tokens_per_minute: Option<u64>,
}

/// Where an LLM agent's model is and how it is asked.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// The API's base URL, up to and including `/v1` (`http://` or `https://`).
    pub base_url: String,
    /// For an `https://` endpoint, a PEM file of the CA certificates its certificate must
    /// chain to, instead of the system's roots (a private CA).
    pub ca_file: Option<PathBuf>,
    /// The model name sent in each request.
    pub model: String,
    /// Where the API key comes from.
    pub api_key: KeySource,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// The answer's token limit (sent as `max_tokens`, which every server accepts).
    pub max_tokens: Option<u64>,
    /// The timeout of one model call.
    pub timeout: Duration,
    /// Whether answers are streamed to the caller as status updates.
    pub stream: bool,
    /// How an output schema is asked for.
    pub structured_output: StructuredOutput,
}

/// Where an API key comes from; read once when the agent starts.
#[derive(Debug, Clone, PartialEq)]
pub enum KeySource {
    /// No key (a local server).
    None,
    /// An environment variable's value.
    Env(String),
    /// A file's content, trimmed.
    File(PathBuf),
}

impl KeySource {
    /// Reads the key; the error names the variable or file, never a value.
    pub fn load(&self) -> Result<Option<ApiKey>, String> {
        match self {
            KeySource::None => Ok(None),
            KeySource::Env(var) => match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => Ok(Some(ApiKey::new(&v))),
                _ => Err(format!("the API key variable {var} is not set (or empty)")),
            },
            KeySource::File(path) => match std::fs::read_to_string(path) {
                Ok(v) if !v.trim().is_empty() => Ok(Some(ApiKey::new(&v))),
                Ok(_) => Err(format!("the API key file {} is empty", path.display())),
                Err(e) => Err(format!(
                    "the API key file {} cannot be read: {}",
                    path.display(),
                    e.kind()
                )),
            },
        }
    }
}

/// How an output schema is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StructuredOutput {
    /// `response_format: {type: json_schema, json_schema: {name: "output", schema,
    /// strict: false}}`, and the schema in the system message as well.
    JsonSchema,
    /// Only the schema in the system message, for servers that reject `response_format`.
    Instructions,
    /// `response_format: {type: json_object, schema}` (and the schema in the system
    /// message): JSON mode with the schema beside it, what llama.cpp's servers (its
    /// `llama-server`, `llama-cpp-python`'s) turn into a grammar; the latter refuses
    /// `json_schema`.
    JsonObject,
}

/// The [`Handler`] of one LLM agent.
#[derive(Debug)]
pub struct LlmHandler {
    agent: LlmAgent,
    client: ChatClient,
    output: Option<Schema>,
    catalog: Option<Catalog>,
    limit: Option<limits::SharedLimit>,
    rates: Vec<limits::SharedRate>,
    record_content: bool,
}

impl LlmHandler {
    /// A handler for `agent`, its key read now; the error names what is missing.
    pub fn new(agent: LlmAgent) -> Result<LlmHandler, String> {
        let record_content = agent.record_content || capture_content_from_env();
        let key = agent
            .model
            .api_key
            .load()
            .map_err(|e| format!("agent {}: {e}", agent.name))?;
        let output = match &agent.output_schema {
            Some(s) => Some(
                Schema::compile(s)
                    .map_err(|e| format!("agent {}: output_schema: {e}", agent.name))?,
            ),
            None => None,
        };
        let client = ChatClient::new(
            &agent.model.base_url,
            key,
            agent.model.timeout,
            agent.model.ca_file.as_deref(),
        )
        .map_err(|e| format!("agent {}: model: {e}", agent.name))?;
        Ok(LlmHandler {
            agent,
            client,
            output,
            catalog: None,
            limit: None,
            rates: Vec::new(),
            record_content,
        })
    }

    /// Bounds model calls by `limit` (see [`limits`]).
    pub fn with_limit(mut self, limit: limits::SharedLimit) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Bounds model calls by a per-minute `rate` as well (see [`limits`]).
    pub fn with_rate(mut self, rate: limits::SharedRate) -> Self {
        self.rates.push(rate);
        self
    }

    /// Opens the shared limits the agent's `limits` declares, in namespace `ns`.
    pub async fn with_declared_limits(
        mut self,
        client: &async_nats::Client,
        ns: &str,
    ) -> Result<Self, String> {
        let Some(limit) = self.agent.limit.clone() else {
            return Ok(self);
        };
        if let Some(max) = limit.max_concurrency {
            let lease = self.agent.max_time * 2;
            let l = limits::SharedLimit::open(client.clone(), ns, &limit.key, max, lease).await?;
            self = self.with_limit(l);
        }
        for (unit, per_minute) in [
            (limits::Unit::Requests, limit.requests_per_minute),
            (limits::Unit::Tokens, limit.tokens_per_minute),
        ] {
            if let Some(n) = per_minute {
                let r = limits::SharedRate::open(client.clone(), ns, &limit.key, unit, n).await?;
                self = self.with_rate(r);
            }
        }
        Ok(self)
    }

    /// Takes what the shared limits ask before a model call of `body`: the per-minute
    /// rates (tokens reserved: the request's bytes / 4 plus `max_tokens`), then a slot,
    /// each wait recorded ([`metrics`]). Returns the slot and the tokens reserved.
    async fn take_limits(
        &self,
        req: &NodeRequest,
        body: &Map<String, Value>,
    ) -> Result<(Option<limits::Slot>, u64), AgentError> {
        let failed = |e: String| AgentError::with_kind(e, client::KIND_TRANSIENT);
        let tokens = serde_json::to_vec(body)
            .map(|b| b.len() as u64 / 4)
            .unwrap_or(0)
            + self.agent.model.max_tokens.unwrap_or(0);
        for rate in &self.rates {
            let (cost, name) = match rate.unit() {
                limits::Unit::Requests => (1, "requests"),
                limits::Unit::Tokens => (tokens, "tokens"),
            };
            let waited = rate.reserve(cost, req).await.map_err(failed)?;
            metrics::waited(&self.agent.name, name, waited);
        }
        let slot = match &self.limit {
            Some(l) => {
                let started = std::time::Instant::now();
                let slot = l.acquire(req).await.map_err(failed)?;
                metrics::waited(&self.agent.name, "concurrency", started.elapsed());
                Some(slot)
            }
            None => None,
        };
        Ok((slot, tokens))
    }

    /// Corrects the tokens reserved by what the answer used (all given back when the
    /// provider reported no usage: a failed call).
    async fn settle_tokens(&self, reserved: u64, answer: Option<&Completion>) {
        let used = answer
            .and_then(|c| Some(c.input_tokens? + c.output_tokens?))
            .unwrap_or(0);
        for rate in self
            .rates
            .iter()
            .filter(|r| r.unit() == limits::Unit::Tokens)
        {
            let delta = used as i64 - reserved.min(i64::MAX as u64) as i64;
            if let Err(e) = rate.adjust(delta).await {
                tracing::warn!("correcting the tokens reserved: {e}");
            }
        }
    }

    /// Offers the agent's `tools` from `catalog` (without one, none are offered).
    pub fn with_catalog(mut self, catalog: Catalog) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// The card's description.
    pub fn description(&self) -> String {
        self.agent.description.clone().unwrap_or_else(|| {
            format!("LLM agent {} ({})", self.agent.name, self.agent.model.model)
        })
    }

    fn messages(&self, input: &Value) -> Result<Vec<Value>, AgentError> {
        let mut system = self.agent.system.clone().unwrap_or_default();
        if let Some(schema) = &self.agent.output_schema {
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&format!(
                "Answer with only a JSON value (no prose, no code fence) that matches this JSON Schema:\n{schema}"
            ));
        }
        let user = match &self.agent.instruction {
            Some(t) => {
                let mut scope = Map::new();
                scope.insert("input".into(), input.clone());
                let v = t
                    .resolve(&scope)
                    .map_err(|e| AgentError::with_kind(format!("instruction: {e}"), "bad_input"))?;
                to_text(&v).into_owned()
            }
            None => to_text(input).into_owned(),
        };
        let mut messages = Vec::new();
        if !system.is_empty() {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": user}));
        Ok(messages)
    }

    fn body(&self, messages: &[Value], offered: &[crate::tools::Tool]) -> Map<String, Value> {
        let m = &self.agent.model;
        let mut body = Map::new();
        body.insert("model".into(), Value::from(m.model.clone()));
        body.insert("messages".into(), Value::from(messages.to_vec()));
        if let Some(t) = m.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(n) = m.max_tokens {
            body.insert("max_tokens".into(), json!(n));
        }
        if !offered.is_empty() {
            let tools: Vec<Value> = offered.iter().map(|t| t.openai()).collect();
            body.insert("tools".into(), Value::from(tools));
        }
        match (&self.agent.output_schema, m.structured_output) {
            (Some(schema), StructuredOutput::JsonSchema) => {
                body.insert(
                    "response_format".into(),
                    json!({"type": "json_schema",
                           "json_schema": {"name": "output", "schema": schema, "strict": false}}),
                );
            }
            (Some(schema), StructuredOutput::JsonObject) => {
                body.insert(
                    "response_format".into(),
                    json!({"type": "json_object", "schema": schema}),
                );
            }
            _ => {}
        }
        body
    }

    /// One model call offering `offered`; streamed text goes to the caller in batches.
    async fn call(
        &self,
        req: &NodeRequest,
        messages: &[Value],
        offered: &[crate::tools::Tool],
    ) -> Result<Completion, AgentError> {
        let body = self.body(messages, offered);
        // The slot is held until the answer is read (dropped: given back, on a cancel too).
        let (_slot, reserved) = self.take_limits(req, &body).await?;
        let span = chat_span(&self.agent.model.model);
        if self.record_content {
            span.record(
                "gen_ai.input.messages",
                content::input_messages(messages).as_str(),
            );
        }
        let work = async {
            if !self.agent.model.stream {
                return self.client.complete(body, None).await;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let (result, ()) = tokio::join!(self.client.complete(body, Some(tx)), forward(rx, req));
            result
        };
        let result = tracing::Instrument::instrument(work, span.clone()).await;
        self.settle_tokens(reserved, result.as_ref().ok()).await;
        let (agent, model) = (&self.agent.name, &self.agent.model.model);
        match &result {
            Ok(c) => metrics::call(agent, model, "ok", c.input_tokens, c.output_tokens),
            Err(e) => metrics::call(agent, model, &e.kind(), None, None),
        }
        match &result {
            Ok(c) => {
                if let Some(n) = c.input_tokens {
                    span.record("gen_ai.usage.input_tokens", n);
                }
                if let Some(n) = c.output_tokens {
                    span.record("gen_ai.usage.output_tokens", n);
                }
                if !c.finish_reason.is_empty() {
                    span.record("gen_ai.response.finish_reasons", c.finish_reason.as_str());
                }
                if self.record_content {
                    span.record(
                        "gen_ai.output.messages",
                        content::output_messages(c).as_str(),
                    );
                }
            }
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                span.record("error.type", e.kind());
            }
        }
        result.map_err(|e| e.into_agent_error())
    }
}

/// The span of one model call, after OpenTelemetry's GenAI conventions: `chat {model}`,
/// a client span under the handler's `agent.handle`; usage recorded when the answer
/// comes. Prompts and completions only when the agent records content
/// (`gen_ai.input.messages`, `gen_ai.output.messages`: [`content`]). Disabled when no
/// traces are exported.
fn chat_span(model: &str) -> tracing::Span {
    if !crate::telemetry::active() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "gen_ai.chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = "openai",
        gen_ai.request.model = model,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.input.messages = tracing::field::Empty,
        gen_ai.output.messages = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Sends streamed text to the caller as `working` status updates, at most one per
/// [`STREAM_BATCH`], until the stream's sender is gone.
async fn forward(mut rx: mpsc::UnboundedReceiver<String>, req: &NodeRequest) {
    let mut batch = String::new();
    let mut tick = tokio::time::interval(STREAM_BATCH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            piece = rx.recv() => match piece {
                Some(p) => batch.push_str(&p),
                None => break,
            },
            _ = tick.tick() => {
                if !batch.is_empty() {
                    let _ = req.send_status(std::mem::take(&mut batch)).await;
                }
            }
        }
    }
    if !batch.is_empty() {
        let _ = req.send_status(batch).await;
    }
}

/// The JSON of an answer: the text itself, or inside one code fence.
fn json_of(text: &str) -> Result<Value, String> {
    let t = text.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|r| r.strip_suffix("```"))
        .unwrap_or(t)
        .trim();
    serde_json::from_str(t).map_err(|e| format!("output: the answer is not JSON ({e})"))
}

impl LlmHandler {
    /// The model's final answer: model calls, with rounds of tool calls in between while
    /// it asks for them (at most `max_tool_rounds`).
    async fn answer(
        &self,
        req: &NodeRequest,
        messages: &mut Vec<Value>,
    ) -> Result<Completion, AgentError> {
        let mut rounds = 0;
        loop {
            let offered = match &self.catalog {
                Some(c) => tools::offered(c, &self.agent.tools, &self.agent.name).await,
                None => Vec::new(),
            };
            let answer = self.call(req, messages, &offered).await?;
            if answer.tool_calls.is_empty() {
                return Ok(answer);
            }
            let Some(catalog) = &self.catalog else {
                return Err(AgentError::with_kind(
                    "the model asked for tools, but none are offered",
                    client::KIND_PROVIDER_ERROR,
                ));
            };
            rounds += 1;
            if rounds > self.agent.max_tool_rounds {
                return Err(AgentError::with_kind(
                    format!(
                        "the model still asked for tools after {} rounds (max_tool_rounds)",
                        self.agent.max_tool_rounds
                    ),
                    KIND_TOOL_ROUNDS,
                ));
            }
            let calls: Vec<Value> = answer
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            let content = (!answer.content.is_empty()).then(|| answer.content.clone());
            messages.push(json!({"role": "assistant", "content": content, "tool_calls": calls}));
            let results = tools::run_calls(
                catalog,
                &offered,
                req,
                &answer.tool_calls,
                self.agent.tool_timeout,
            )
            .await;
            messages.extend(results);
        }
    }

    /// The output of `answer`: `{"text"}`, or JSON valid against the output schema, with
    /// one repair round.
    async fn output(
        &self,
        req: &NodeRequest,
        messages: &mut Vec<Value>,
        answer: Completion,
    ) -> HandlerResult {
        let Some(schema) = &self.output else {
            return Ok(json!({"text": answer.content}));
        };
        let check = |text: &str| match json_of(text) {
            Ok(v) => {
                let p = schema.violations("output", &v);
                if p.is_empty() {
                    Ok(v)
                } else {
                    Err(p)
                }
            }
            Err(e) => Err(vec![e]),
        };
        let problems = match check(&answer.content) {
            Ok(v) => return Ok(v),
            Err(p) => p,
        };
        // One repair round: the answer and what is wrong with it, back to the model.
        messages.push(json!({"role": "assistant", "content": answer.content}));
        messages.push(json!({"role": "user", "content": format!(
            "Your answer does not match the output schema:\n{}\nAnswer again with only the corrected JSON.",
            problems.join("\n")
        )}));
        let repaired = self.call(req, messages, &[]).await?;
        check(&repaired.content).map_err(|problems| {
            AgentError::with_kind(
                format!(
                    "the model's answer does not match the output schema after one repair: {}",
                    problems.join("; ")
                ),
                KIND_OUTPUT_VALIDATION,
            )
        })
    }
}

impl Handler for LlmHandler {
    async fn handle(&self, req: NodeRequest) -> HandlerResult {
        let work = async {
            let mut messages = self.messages(&req.input)?;
            let answer = self.answer(&req, &mut messages).await?;
            self.output(&req, &mut messages, answer).await
        };
        tokio::time::timeout(self.agent.max_time, work)
            .await
            .unwrap_or_else(|_| {
                Err(AgentError::with_kind(
                    format!(
                        "the call took longer than max_time ({} s)",
                        self.agent.max_time.as_secs_f64()
                    ),
                    client::KIND_TIMEOUT,
                ))
            })
    }
}
