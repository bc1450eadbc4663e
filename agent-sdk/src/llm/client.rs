//! A hand-written client of OpenAI-compatible chat completions (`POST
//! {base_url}/chat/completions`), JSON or streamed as server-sent events, on `reqwest`
//! (already in the build through the OTLP exporter) with a small SSE reader, over `http://`
//! or `https://` (rustls; the system's roots, or only those of the endpoint's `ca_file`
//! when it names one, for a private CA): no SDK, so
//! retries stay the workflow's (this client never retries) and a dropped future drops the
//! HTTP request, which is how a cancelled call cancels it.
//!
//! Responses are read leniently (`serde_json::Value`), because servers differ: usage in a
//! final chunk with `choices: []`, an error object inside a stream after HTTP 200, comment
//! pings, `code` a string or an integer. Failures are classified the way providers fail
//! ([`ProviderError::into_agent_error`]); the API key never appears in one: the provider's
//! own message is redacted before it is kept.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::crypto::{error_chain as chain, refused_certificate};
use crate::error::AgentError;

/// Error kind of a failure worth retrying: 429, 5xx, a connection that failed.
pub const KIND_TRANSIENT: &str = "transient";
/// Error kind of a provider call that did not finish in time.
pub const KIND_TIMEOUT: &str = "timeout";
/// Error kind of a request the provider refused for good (4xx other than 429, or a 429 for
/// an exhausted quota): retrying the same request cannot help.
pub const KIND_PERMANENT: &str = "permanent";
/// Error kind of an answer that is not the chat-completions format (a body that is not
/// JSON, a stream that breaks off or carries an error).
pub const KIND_PROVIDER_ERROR: &str = "provider_error";

/// An API key: kept out of `Debug` output, errors and logs.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key from its text (surrounding whitespace, a file's newline, trimmed).
    pub fn new(text: &str) -> ApiKey {
        ApiKey(text.trim().to_owned())
    }

    /// `text` with every occurrence of the key replaced by `[redacted]`.
    pub fn redact(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.0, "[redacted]")
        }
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// Why a provider call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderError {
    /// The provider answered with an error status.
    Status {
        /// The HTTP status.
        status: u16,
        /// The provider's message (its `error.message`, else the body's start).
        message: String,
        /// The provider's `error.code`, when it gave one.
        code: Option<String>,
        /// `Retry-After` (seconds), when it gave one.
        retry_after: Option<u64>,
    },
    /// No whole answer within the timeout.
    Timeout(Duration),
    /// The connection could not be made or broke.
    Transport(String),
    /// The endpoint's TLS certificate was refused (not from a trusted CA, another name,
    /// expired): retrying cannot help until the configuration changes.
    Certificate(String),
    /// The answer is not the chat-completions format.
    Malformed(String),
}

impl ProviderError {
    /// A short name of the failure, for a span's `error.type`: the HTTP status, `timeout`,
    /// `transport` or `malformed`.
    pub fn kind(&self) -> String {
        match self {
            ProviderError::Status { status, .. } => status.to_string(),
            ProviderError::Timeout(_) => "timeout".into(),
            ProviderError::Transport(_) => "transport".into(),
            ProviderError::Certificate(_) => "certificate".into(),
            ProviderError::Malformed(_) => "malformed".into(),
        }
    }

    /// The handler's error: 429 and 5xx `transient` (with `Retry-After` in the message),
    /// other statuses `permanent` with the provider's message, `timeout`, transport
    /// failures `transient`, malformed answers `provider_error`.
    pub fn into_agent_error(self) -> AgentError {
        match self {
            ProviderError::Status {
                status,
                message,
                code,
                retry_after,
            } => {
                let code_text = code
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default();
                let after = retry_after
                    .map(|s| format!("; retry after {s} s"))
                    .unwrap_or_default();
                let text =
                    format!("the model provider answered {status}{code_text}: {message}{after}");
                let quota = code.as_deref() == Some("insufficient_quota");
                let kind = if (status == 429 && !quota) || status >= 500 {
                    KIND_TRANSIENT
                } else {
                    KIND_PERMANENT
                };
                AgentError::with_kind(text, kind)
            }
            ProviderError::Timeout(d) => AgentError::with_kind(
                format!(
                    "the model provider did not answer within {} s",
                    d.as_secs_f64()
                ),
                KIND_TIMEOUT,
            ),
            ProviderError::Transport(e) => AgentError::with_kind(
                format!("cannot reach the model provider: {e}"),
                KIND_TRANSIENT,
            ),
            ProviderError::Certificate(e) => AgentError::with_kind(
                format!(
                    "the model provider's TLS certificate was refused (check model.ca_file, \
                     or the system's roots without one): {e}"
                ),
                KIND_PERMANENT,
            ),
            ProviderError::Malformed(e) => AgentError::with_kind(
                format!("the model provider's answer is not a chat completion: {e}"),
                KIND_PROVIDER_ERROR,
            ),
        }
    }
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRequest {
    /// The provider's call id (answered by the tool message).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments, as the JSON text the model wrote (may be invalid).
    pub arguments: String,
}

/// A finished completion.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// The answer's text (empty when the model only asked for tools).
    pub content: String,
    /// The tool calls it asked for.
    pub tool_calls: Vec<ToolCallRequest>,
    /// `stop`, `length`, `tool_calls`, ... (empty when the provider gave none).
    pub finish_reason: String,
    /// Prompt tokens, when the provider reported usage.
    pub input_tokens: Option<u64>,
    /// Completion tokens, when the provider reported usage.
    pub output_tokens: Option<u64>,
}

/// Where requests go and how they are authorised.
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    url: String,
    key: Option<ApiKey>,
    timeout: Duration,
}

impl ChatClient {
    /// A client of `{base_url}/chat/completions`, sending `key` as a bearer token; a call
    /// that has not finished after `timeout` fails with [`ProviderError::Timeout`]. An
    /// `https://` endpoint's certificate must chain to the system's roots, or, with
    /// `ca_file` (PEM, one or more certificates), to one of those instead.
    pub fn new(
        base_url: &str,
        key: Option<ApiKey>,
        timeout: Duration,
        ca_file: Option<&Path>,
    ) -> Result<ChatClient, String> {
        let ca = ca_file.map(crate::crypto::CaFile::read).transpose()?;
        let http = crate::crypto::client_builder(ca.as_ref())
            .build()
            .map_err(|e| format!("building the HTTP client: {}", chain(&e)))?;
        Ok(ChatClient {
            http,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            key,
            timeout,
        })
    }

    fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(k) => k.redact(text),
            None => text.to_owned(),
        }
    }

    /// Sends `body` (a chat-completions request; `stream` is set here) and reads the
    /// answer. With `deltas`, the request is streamed and each piece of text is sent there
    /// as it arrives.
    pub async fn complete(
        &self,
        mut body: Map<String, Value>,
        deltas: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<Completion, ProviderError> {
        let streamed = deltas.is_some();
        if streamed {
            body.insert("stream".into(), Value::Bool(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        let work = async {
            let mut request = self.http.post(&self.url).json(&body);
            if let Some(key) = &self.key {
                request = request.bearer_auth(&key.0);
            }
            let response = request.send().await.map_err(|e| {
                let text = self.redact(&chain(&e));
                if refused_certificate(&e) {
                    ProviderError::Certificate(text)
                } else {
                    ProviderError::Transport(text)
                }
            })?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                let text = response.text().await.unwrap_or_default();
                let (message, code) = error_of(&text);
                return Err(ProviderError::Status {
                    status,
                    message: self.redact(&message),
                    code,
                    retry_after,
                });
            }
            let json_body = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            match deltas {
                // A server that ignores `stream` answers whole: read as such.
                Some(tx) if !json_body => read_stream(response, tx).await,
                deltas => {
                    let text = response
                        .text()
                        .await
                        .map_err(|e| ProviderError::Transport(e.to_string()))?;
                    let v: Value = serde_json::from_str(&text).map_err(|e| {
                        ProviderError::Malformed(format!(
                            "the body is not JSON ({e}): {}",
                            start_of(&text)
                        ))
                    })?;
                    let c = completion_of(&v)?;
                    if let Some(tx) = deltas.filter(|_| !c.content.is_empty()) {
                        let _ = tx.send(c.content.clone());
                    }
                    Ok(c)
                }
            }
        };
        let result = tokio::time::timeout(self.timeout, work)
            .await
            .unwrap_or(Err(ProviderError::Timeout(self.timeout)));
        result.map_err(|e| match e {
            ProviderError::Malformed(m) => ProviderError::Malformed(self.redact(&m)),
            other => other,
        })
    }
}

/// The first 200 characters of a body, for an error message.
fn start_of(text: &str) -> String {
    let mut s: String = text.chars().take(200).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// The message and code of an error body: OpenAI's `{"error": {message, code}}` (code a
/// string, an integer or null), vLLM's older top-level `message`, else the body's start.
fn error_of(text: &str) -> (String, Option<String>) {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return (start_of(text), None);
    };
    let e = v.get("error").unwrap_or(&v);
    let message = match e {
        Value::String(s) => s.clone(),
        _ => e
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| start_of(text)),
    };
    let code = e.get("code").and_then(|c| match c {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    (message, code)
}

/// A whole `chat.completion`.
fn completion_of(v: &Value) -> Result<Completion, ProviderError> {
    if let Some(e) = v.get("error") {
        return Err(ProviderError::Malformed(format!("an error object: {e}")));
    }
    let choice = v.get("choices").and_then(|c| c.get(0)).ok_or_else(|| {
        ProviderError::Malformed(format!("no `choices[0]` in {}", start_of(&v.to_string())))
    })?;
    let message = choice
        .get("message")
        .ok_or_else(|| ProviderError::Malformed("no `choices[0].message`".into()))?;
    let mut out = Completion {
        content: message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        ..Completion::default()
    };
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = call.get("function").unwrap_or(&Value::Null);
        out.tool_calls.push(ToolCallRequest {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name: f
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            arguments: f
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        });
    }
    read_usage(v, &mut out);
    Ok(out)
}

fn read_usage(v: &Value, out: &mut Completion) {
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        out.input_tokens = u.get("prompt_tokens").and_then(Value::as_u64);
        out.output_tokens = u.get("completion_tokens").and_then(Value::as_u64);
    }
}

/// Reads server-sent events up to `data: [DONE]`: text deltas to `tx`, tool-call pieces
/// gathered by index, usage from whichever chunk carries it.
async fn read_stream(
    response: reqwest::Response,
    tx: mpsc::UnboundedSender<String>,
) -> Result<Completion, ProviderError> {
    let mut bytes = response.bytes_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Completion::default();
    loop {
        while let Some(event) = next_event(&mut pending) {
            let event = String::from_utf8(event)
                .map_err(|_| ProviderError::Malformed("an event is not UTF-8".into()))?;
            let Some(data) = event_data(&event) else {
                continue;
            };
            if data.trim() == "[DONE]" {
                return Ok(out);
            }
            let chunk: Value = serde_json::from_str(&data).map_err(|e| {
                ProviderError::Malformed(format!("an event is not JSON ({e}): {}", start_of(&data)))
            })?;
            apply_chunk(&chunk, &mut out, &tx)?;
        }
        match bytes.next().await {
            Some(Ok(b)) => pending.extend_from_slice(&b),
            Some(Err(e)) => return Err(ProviderError::Transport(format!("the stream broke: {e}"))),
            None => {
                return Err(ProviderError::Malformed(
                    "the stream ended before `data: [DONE]`".into(),
                ))
            }
        }
    }
}

/// Takes one whole event (up to a blank line) off the front of `pending`.
fn next_event(pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    let at = pending.windows(2).position(|w| w == b"\n\n");
    let crlf = pending.windows(4).position(|w| w == b"\r\n\r\n");
    let (end, len) = match (at, crlf) {
        (Some(a), Some(c)) if c < a => (c, 4),
        (Some(a), _) => (a, 2),
        (None, Some(c)) => (c, 4),
        (None, None) => return None,
    };
    let event = pending[..end].to_vec();
    pending.drain(..end + len);
    Some(event)
}

/// The `data:` lines of an event, joined by newlines; `None` for comments and events
/// without data.
fn event_data(event: &str) -> Option<String> {
    let lines: Vec<&str> = event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d).trim_end_matches('\r'))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

fn apply_chunk(
    chunk: &Value,
    out: &mut Completion,
    tx: &mpsc::UnboundedSender<String>,
) -> Result<(), ProviderError> {
    if let Some(e) = chunk.get("error") {
        let message = e.get("message").and_then(Value::as_str).map(str::to_owned);
        return Err(ProviderError::Malformed(format!(
            "the stream carried an error: {}",
            message.unwrap_or_else(|| e.to_string())
        )));
    }
    read_usage(chunk, out);
    let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
        return Ok(());
    };
    if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
        out.finish_reason = r.to_owned();
    }
    let Some(delta) = choice.get("delta") else {
        return Ok(());
    };
    if let Some(text) = delta.get("content").and_then(Value::as_str) {
        if !text.is_empty() {
            out.content.push_str(text);
            // A receiver gone (the batcher ended) loses nothing the result does not hold.
            let _ = tx.send(text.to_owned());
        }
    }
    for piece in delta
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let index = piece.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        let id = piece.get("id").and_then(Value::as_str);
        let f = piece.get("function").unwrap_or(&Value::Null);
        // Key by (index, id): some servers reuse index 0 for every parallel call.
        let slot = match id {
            Some(id) if !id.is_empty() && !out.tool_calls.iter().any(|c| c.id == id) => {
                out.tool_calls.push(ToolCallRequest {
                    id: id.to_owned(),
                    name: String::new(),
                    arguments: String::new(),
                });
                out.tool_calls.len() - 1
            }
            Some(id) if !id.is_empty() => out
                .tool_calls
                .iter()
                .position(|c| c.id == id)
                .unwrap_or(index),
            _ => index.min(out.tool_calls.len().saturating_sub(1)),
        };
        let Some(call) = out.tool_calls.get_mut(slot) else {
            return Err(ProviderError::Malformed(
                "a tool-call delta before the call's first piece".into(),
            ));
        };
        if let Some(name) = f.get("name").and_then(Value::as_str) {
            call.name.push_str(name);
        }
        if let Some(args) = f.get("arguments").and_then(Value::as_str) {
            call.arguments.push_str(args);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_on_blank_lines_and_comments_are_skipped() {
        let mut p = b": ping\n\ndata: {\"a\":1}\r\n\r\ndata: [DONE]\n\npartial".to_vec();
        let a = next_event(&mut p).unwrap();
        assert_eq!(event_data(std::str::from_utf8(&a).unwrap()), None);
        let b = next_event(&mut p).unwrap();
        assert_eq!(
            event_data(std::str::from_utf8(&b).unwrap()).unwrap(),
            "{\"a\":1}"
        );
        let c = next_event(&mut p).unwrap();
        assert_eq!(
            event_data(std::str::from_utf8(&c).unwrap()).unwrap(),
            "[DONE]"
        );
        assert!(next_event(&mut p).is_none());
        assert_eq!(p, b"partial");
    }

    #[test]
    fn tool_call_pieces_gather_by_index_and_id() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut out = Completion::default();
        for c in [
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"arguments": "1}"}}]}}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
        ] {
            apply_chunk(&c, &mut out, &tx).unwrap();
        }
        assert_eq!(out.tool_calls.len(), 2);
        assert_eq!(
            (
                out.tool_calls[0].name.as_str(),
                out.tool_calls[0].arguments.as_str()
            ),
            ("f", "{\"x\":1}")
        );
        assert_eq!(out.tool_calls[1].name, "g");
        assert_eq!((out.input_tokens, out.output_tokens), (Some(3), Some(4)));
    }

    #[test]
    fn errors_are_classified_the_way_providers_fail() {
        let status = |status, code: Option<&str>| ProviderError::Status {
            status,
            message: "m".into(),
            code: code.map(str::to_owned),
            retry_after: Some(3),
        };
        let kind = |e: ProviderError| e.into_agent_error().kind.unwrap();
        assert_eq!(
            kind(status(429, Some("rate_limit_exceeded"))),
            KIND_TRANSIENT
        );
        assert_eq!(
            kind(status(429, Some("insufficient_quota"))),
            KIND_PERMANENT
        );
        assert_eq!(kind(status(503, None)), KIND_TRANSIENT);
        assert_eq!(
            kind(status(400, Some("context_length_exceeded"))),
            KIND_PERMANENT
        );
        assert!(status(429, None)
            .into_agent_error()
            .message
            .contains("retry after 3 s"));
        assert_eq!(
            kind(ProviderError::Timeout(Duration::from_secs(1))),
            KIND_TIMEOUT
        );
        assert_eq!(
            error_of(r#"{"error":{"message":"bad","code":400}}"#),
            ("bad".into(), Some("400".into()))
        );
        assert_eq!(error_of("<html>oops</html>").0, "<html>oops</html>");
    }

    #[test]
    fn the_key_is_redacted_and_never_debug_printed() {
        let k = ApiKey::new(" sk-secret\n");
        assert_eq!(format!("{k:?}"), "ApiKey([redacted])");
        assert_eq!(
            k.redact("Incorrect API key provided: sk-secret."),
            "Incorrect API key provided: [redacted]."
        );
    }
}
