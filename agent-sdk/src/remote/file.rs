//! Reading a remote agent of the agents file: an entry with a `remote:` block, checked at
//! load with every problem at its place (`FILE: agents[2].remote.url: ...`), like a stub's.
//! The token's *source* is read here; the token itself when the agent starts.

use std::time::Duration;

use serde_json::Value;
use workflow_expr::duration;

use super::{RemoteAgent, TokenSource, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT};
use crate::stub::file::{schema, Fields, Problems};

/// Whether an agents-file entry declares a remote agent.
pub(crate) fn is_remote(item: &Value) -> bool {
    item.get("remote").is_some_and(|r| !r.is_null())
}

const AGENT_FIELDS: &[&str] = &[
    "name",
    "description",
    "input_schema",
    "output_schema",
    "remote",
];

const REMOTE_FIELDS: &[&str] = &[
    "url",
    "token_env",
    "token_file",
    "timeout",
    "max_response_bytes",
    "allow_private",
    "ca_file",
];

/// Checks one remote agent entry.
pub(crate) fn agent(p: &mut Problems, at: String, v: &Value) -> Option<RemoteAgent> {
    let f = Fields::new(p, at, v, AGENT_FIELDS)?;
    let before = p.count();
    let name = f.name(p);
    let description = f.string(p, "description");
    let input_schema = schema(p, &f, "input_schema");
    let output_schema = schema(p, &f, "output_schema");
    let r = Fields::new(p, f.at("remote"), f.get("remote")?, REMOTE_FIELDS)?;
    let url = r.string(p, "url").unwrap_or_else(|| {
        if r.get("url").is_none() {
            p.add(&r.at("url"), "missing: the agent's A2A JSON-RPC URL");
        }
        String::new()
    });
    if !url.is_empty() {
        if let Err(e) = reqwest::Url::parse(&url) {
            p.add(&r.at("url"), format!("not a URL: {e}"));
        }
    }
    let token = match (r.string(p, "token_env"), r.string(p, "token_file")) {
        (Some(_), Some(_)) => {
            p.add(
                &r.at("token_file"),
                "give token_env or token_file, not both",
            );
            None
        }
        (Some(var), None) => Some(TokenSource::Env(var)),
        (None, Some(path)) => Some(TokenSource::File(path.into())),
        (None, None) => None,
    };
    let timeout = match r.string(p, "timeout") {
        None => DEFAULT_TIMEOUT,
        Some(text) => match duration::parse(&text) {
            Ok(d) if d > Duration::ZERO => d,
            Ok(_) => {
                p.add(&r.at("timeout"), "must be more than zero");
                DEFAULT_TIMEOUT
            }
            Err(e) => {
                p.add(&r.at("timeout"), e);
                DEFAULT_TIMEOUT
            }
        },
    };
    let max_response_bytes = match r.get("max_response_bytes") {
        None => DEFAULT_MAX_RESPONSE_BYTES,
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) if n > 0 => n,
            _ => {
                p.add(
                    &r.at("max_response_bytes"),
                    format!("expected a whole number ≥ 1, found {v}"),
                );
                DEFAULT_MAX_RESPONSE_BYTES
            }
        },
    };
    let allow_private = match r.get("allow_private") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            p.add(
                &r.at("allow_private"),
                format!("expected true or false, found {v}"),
            );
            false
        }
    };
    let ca_file = r.string(p, "ca_file").map(std::path::PathBuf::from);
    if ca_file.is_some() && !url.starts_with("https://") {
        p.add(&r.at("ca_file"), "a CA file is for an https:// url");
    }
    (p.count() == before).then_some(RemoteAgent {
        name,
        url,
        token,
        description,
        input_schema,
        output_schema,
        timeout,
        max_response_bytes,
        allow_private,
        ca_file,
    })
}
