//! Reading an LLM agent of the agents file: an entry with `kind: llm` or a `model:`
//! block, checked at load with every problem reported at its place, like a stub's
//! (`FILE: agents[1].model.base_url: ...`). The key's *source* is read here; the key itself
//! only when the agent starts ([`super::KeySource::load`]).

use serde_json::Value;
use workflow_expr::{duration, file_type_name as kind, Template, TemplateOptions};

use super::tools::Selector;
use super::{
    KeySource, LlmAgent, ModelConfig, StructuredOutput, DEFAULT_MAX_TIME, DEFAULT_MAX_TOOL_ROUNDS,
    DEFAULT_TIMEOUT, DEFAULT_TOOL_TIMEOUT,
};
use crate::stub::file::{schema, Fields, Problems};

/// Whether an agents-file entry declares an LLM agent.
pub(crate) fn is_llm(item: &Value) -> bool {
    item.get("kind").and_then(Value::as_str) == Some("llm")
        || item.get("model").is_some_and(|m| !m.is_null())
}

const AGENT_FIELDS: &[&str] = &[
    "name",
    "kind",
    "description",
    "input_schema",
    "output_schema",
    "model",
    "system",
    "instruction",
    "tools",
    "max_tool_rounds",
    "tool_timeout",
    "max_time",
    "limits",
    "record_content",
];

const LIMIT_FIELDS: &[&str] = &[
    "key",
    "max_concurrency",
    "requests_per_minute",
    "tokens_per_minute",
];

const MODEL_FIELDS: &[&str] = &[
    "base_url",
    "ca_file",
    "name",
    "api_key_env",
    "api_key_file",
    "temperature",
    "max_tokens",
    "timeout",
    "stream",
    "structured_output",
];

/// Checks one LLM agent entry.
pub(crate) fn agent(p: &mut Problems, at: String, v: &Value) -> Option<LlmAgent> {
    let f = Fields::new(p, at, v, AGENT_FIELDS)?;
    let before = p.count();
    let name = f.name(p);
    if let Some(k) = f.string(p, "kind") {
        if k != "llm" {
            p.add(
                &f.at("kind"),
                format!("an agent with a `model` is of kind llm, not {k:?}"),
            );
        }
    }
    let description = f.string(p, "description");
    let input_schema = schema(p, &f, "input_schema");
    let output_schema = schema(p, &f, "output_schema");
    let system = f.string(p, "system");
    let instruction = f.get("instruction").and_then(|t| {
        match Template::compile_with(t, TemplateOptions { arithmetic: true }) {
            Ok(t) => {
                let mut ok = true;
                for path in t.paths() {
                    if path.root != "input" {
                        p.add(
                            &f.at("instruction"),
                            format!("unknown name `{}`: an instruction can use `input` (the node input)", path.root),
                        );
                        ok = false;
                    }
                }
                ok.then_some(t)
            }
            Err(e) => {
                p.add(&f.at("instruction"), e);
                None
            }
        }
    });
    let tools = match f.get("tools") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t.as_str() {
                Some(s) if !s.trim().is_empty() && s.trim() != "tag:" => Some(Selector::parse(s)),
                _ => {
                    p.add(
                        &format!("{}[{i}]", f.at("tools")),
                        format!("expected an agent or workflow name, or tag:TAG, found {t}"),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            p.add(
                &f.at("tools"),
                format!(
                    "expected a list of names (or tag:TAG), found {}",
                    kind(other)
                ),
            );
            Vec::new()
        }
    };
    let max_tool_rounds = match f.get("max_tool_rounds") {
        None => DEFAULT_MAX_TOOL_ROUNDS,
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n > 0 => n,
            _ => {
                p.add(
                    &f.at("max_tool_rounds"),
                    format!("expected a whole number ≥ 1, found {v}"),
                );
                DEFAULT_MAX_TOOL_ROUNDS
            }
        },
    };
    let record_content = match f.get("record_content") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            p.add(
                &f.at("record_content"),
                format!("expected true or false, found {}", kind(other)),
            );
            false
        }
    };
    let tool_timeout = duration_field(p, &f, "tool_timeout", DEFAULT_TOOL_TIMEOUT);
    let max_time = duration_field(p, &f, "max_time", DEFAULT_MAX_TIME);
    let limit = f.get("limits").and_then(|v| {
        let l = Fields::new(p, f.at("limits"), v, LIMIT_FIELDS)?;
        let key = l.string(p, "key").unwrap_or_else(|| name.clone());
        if let Err(e) = messages::subjects::validate_token(&key) {
            p.add(&l.at("key"), e);
        }
        let mut count = |field: &str| {
            l.get(field).and_then(|v| match v.as_u64() {
                Some(n) if n > 0 && n <= u64::from(u32::MAX) => Some(n),
                _ => {
                    p.add(
                        &l.at(field),
                        format!("expected a whole number from 1 to {}, found {v}", u32::MAX),
                    );
                    None
                }
            })
        };
        let max_concurrency = count("max_concurrency").map(|n| n as u32);
        let requests_per_minute = count("requests_per_minute");
        let tokens_per_minute = count("tokens_per_minute");
        if [
            "max_concurrency",
            "requests_per_minute",
            "tokens_per_minute",
        ]
        .iter()
        .all(|k| l.get(k).is_none())
        {
            p.add(
                &l.at("max_concurrency"),
                "missing: limits need max_concurrency, requests_per_minute or tokens_per_minute",
            );
            return None;
        }
        Some(super::Limit {
            key,
            max_concurrency,
            requests_per_minute,
            tokens_per_minute,
        })
    });
    let model = match f.get("model") {
        Some(m) => model(p, f.at("model"), m),
        None => {
            p.add(
                &f.at("model"),
                "missing: an LLM agent needs `model: {base_url, name}`",
            );
            None
        }
    };
    match model {
        Some(model) if p.count() == before => Some(LlmAgent {
            name,
            description,
            input_schema,
            output_schema,
            model,
            system,
            instruction,
            tools,
            max_tool_rounds,
            tool_timeout,
            max_time,
            limit,
            record_content,
        }),
        _ => None,
    }
}

/// A duration field longer than zero; `default` when absent.
fn duration_field(
    p: &mut Problems,
    f: &Fields<'_>,
    key: &str,
    default: std::time::Duration,
) -> std::time::Duration {
    match f.get(key) {
        None => default,
        Some(Value::String(s)) => match duration::parse(s) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                p.add(&f.at(key), "must be longer than zero");
                default
            }
            Err(e) => {
                p.add(&f.at(key), e);
                default
            }
        },
        Some(other) => {
            p.add(
                &f.at(key),
                format!("expected a duration such as \"60s\", found {}", kind(other)),
            );
            default
        }
    }
}

fn model(p: &mut Problems, at: String, v: &Value) -> Option<ModelConfig> {
    let f = Fields::new(p, at, v, MODEL_FIELDS)?;
    let before = p.count();
    let base_url = f.string(p, "base_url").unwrap_or_default();
    if f.get("base_url").is_none() {
        p.add(
            &f.at("base_url"),
            "missing: the API's base URL, such as http://127.0.0.1:8080/v1",
        );
    } else if !base_url.starts_with("http://") && !base_url.starts_with("https://") {
        p.add(
            &f.at("base_url"),
            format!("expected an http:// or https:// URL, found {base_url:?}"),
        );
    }
    let ca_file = f.string(p, "ca_file").map(std::path::PathBuf::from);
    if ca_file.is_some() && !base_url.starts_with("https://") {
        p.add(
            &f.at("ca_file"),
            "a CA file is for an https:// base_url; this one is not",
        );
    }
    let model = f.string(p, "name").unwrap_or_default();
    if f.get("name").is_none() {
        p.add(
            &f.at("name"),
            "missing: the model name sent with each request",
        );
    }
    let api_key = match (f.string(p, "api_key_env"), f.string(p, "api_key_file")) {
        (Some(_), Some(_)) => {
            p.add(
                &f.at("api_key_file"),
                "give either `api_key_env` or `api_key_file`, not both",
            );
            KeySource::None
        }
        (Some(var), None) => KeySource::Env(var),
        (None, Some(path)) => KeySource::File(path.into()),
        (None, None) => KeySource::None,
    };
    let temperature = f.get("temperature").and_then(|t| match t.as_f64() {
        Some(x) if (0.0..=2.0).contains(&x) => Some(x),
        _ => {
            p.add(
                &f.at("temperature"),
                format!("expected a number from 0 to 2, found {t}"),
            );
            None
        }
    });
    let max_tokens = f.get("max_tokens").and_then(|t| match t.as_u64() {
        Some(n) if n > 0 => Some(n),
        _ => {
            p.add(
                &f.at("max_tokens"),
                format!("expected a whole number ≥ 1, found {t}"),
            );
            None
        }
    });
    let timeout = duration_field(p, &f, "timeout", DEFAULT_TIMEOUT);
    let stream = match f.get("stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            p.add(
                &f.at("stream"),
                format!("expected true or false, found {}", kind(other)),
            );
            false
        }
    };
    let structured_output = match f.string(p, "structured_output").as_deref() {
        None | Some("json_schema") => StructuredOutput::JsonSchema,
        Some("instructions") => StructuredOutput::Instructions,
        Some("json_object") => StructuredOutput::JsonObject,
        Some(other) => {
            p.add(
                &f.at("structured_output"),
                format!("expected json_schema, json_object or instructions, found {other:?}"),
            );
            StructuredOutput::JsonSchema
        }
    };
    (p.count() == before).then_some(ModelConfig {
        base_url,
        ca_file,
        model,
        api_key,
        temperature,
        max_tokens,
        timeout,
        stream,
        structured_output,
    })
}

#[cfg(test)]
mod tests {
    use crate::stub::StubFile;

    #[test]
    fn llm_agents_load_beside_stubs() {
        let text = r#"
agents:
  - name: Echo
    output: "{{input}}"
  - name: Summarizer
    model:
      base_url: http://127.0.0.1:1/v1
      name: m
      api_key_file: /run/key
      temperature: 0.5
      max_tokens: 100
      timeout: 5s
      stream: true
      structured_output: instructions
    instruction: "Summarise {{input.text}}"
    output_schema: {type: object}
    tools: [WriteUp, "tag:research"]
    max_tool_rounds: 3
    record_content: true
    tool_timeout: 10s
    limits: {key: openai-org, max_concurrency: 2, requests_per_minute: 500}
"#;
        let file = StubFile::parse(text, "a.yaml").unwrap();
        assert_eq!(file.agents.len(), 1);
        let a = &file.llm[0];
        assert_eq!(a.name, "Summarizer");
        assert_eq!(a.model.api_key, super::KeySource::File("/run/key".into()));
        assert_eq!(a.model.timeout, std::time::Duration::from_secs(5));
        assert!(a.model.stream);
        assert_eq!(
            a.tools,
            vec![
                super::Selector::Name("WriteUp".into()),
                super::Selector::Tag("research".into())
            ]
        );
        assert_eq!(a.max_tool_rounds, 3);
        assert!(a.record_content);
        assert_eq!(a.tool_timeout, std::time::Duration::from_secs(10));
        assert_eq!(a.max_time, super::DEFAULT_MAX_TIME);
        assert_eq!(
            a.limit,
            Some(super::super::Limit {
                key: "openai-org".into(),
                max_concurrency: Some(2),
                requests_per_minute: Some(500),
                tokens_per_minute: None,
            })
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_place() {
        let text = r#"
agents:
  - name: A
    kind: llm
  - name: B
    model: {base_url: "ftp://x", api_key_env: K, api_key_file: f, temperature: 3, max_tokens: 0, timeout: never, stream: "yes", structured_output: grammar, extra: 1}
    instruction: "{{call}}"
    tools: [3]
    max_tool_rounds: 0
    limits: {tokens_per_minute: 0}
  - name: H
    model: {base_url: "http://api.example.com/v1", name: m, ca_file: ca.pem}
  - name: C
    kind: robot
    output: 1
"#;
        let errors = StubFile::parse(text, "a.yaml").unwrap_err();
        let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
        for needle in [
            "a.yaml: agents[0].model: missing",
            "a.yaml: agents[1].model.base_url: expected an http:// or https:// URL",
            "a.yaml: agents[2].model.ca_file: a CA file is for an https:// base_url",
            "a.yaml: agents[1].model.name: missing",
            "a.yaml: agents[1].model.api_key_file: give either",
            "a.yaml: agents[1].model.temperature: ",
            "a.yaml: agents[1].model.max_tokens: ",
            "a.yaml: agents[1].model.timeout: ",
            "a.yaml: agents[1].model.stream: ",
            "a.yaml: agents[1].model.structured_output: ",
            "a.yaml: agents[1].model: unknown field `extra`",
            "a.yaml: agents[1].instruction: unknown name `call`",
            "a.yaml: agents[1].tools[0]: expected",
            "a.yaml: agents[1].max_tool_rounds: ",
            "a.yaml: agents[1].limits.tokens_per_minute: expected a whole number",
            "a.yaml: agents[3].kind: unknown kind",
        ] {
            assert!(has(needle), "{needle} not in {errors:#?}");
        }
    }
}
