//! A2A 1.0's JSON shapes, translated to and from 0.3's at the door's edge: the door works
//! in 0.3 (the mesh's own dialect) and writes 1.0 only for a request that spoke 1.0.
//!
//! What changes (A2A 1.0 `whats-new-v1`, `a2a.proto`): no `kind` (the member present
//! tells the type); one `Part` with `text` | `data` | `url` | `raw` plus `mediaType`,
//! `filename`, `metadata`; enums `ROLE_USER`, `TASK_STATE_COMPLETED`; stream items wrapped
//! as `{task}`, `{message}`, `{statusUpdate}`, `{artifactUpdate}`, with no `final` (the
//! stream's end says it).

use serde_json::{json, Map, Value};

/// A 1.0 message (from a request) in the 0.3 shape.
pub(super) fn message_to_v03(message: Value) -> Result<Value, String> {
    let Value::Object(mut m) = message else {
        return Err("must be an object".into());
    };
    let role = match m.get("role").and_then(Value::as_str) {
        Some("ROLE_USER") | Some("user") => "user",
        Some("ROLE_AGENT") | Some("agent") => "agent",
        other => return Err(format!("role {other:?} is not ROLE_USER or ROLE_AGENT")),
    };
    m.insert("role".into(), json!(role));
    m.insert("kind".into(), json!("message"));
    let parts = match m.remove("parts") {
        Some(Value::Array(parts)) => parts,
        _ => return Err("parts must be an array".into()),
    };
    let parts: Result<Vec<Value>, String> = parts.into_iter().map(part_to_v03).collect();
    m.insert("parts".into(), Value::Array(parts?));
    Ok(Value::Object(m))
}

/// A 1.0 part in the 0.3 shape: `data` that is not an object travels as `{"value": …}`,
/// as the mesh wraps any input that is not an object.
fn part_to_v03(part: Value) -> Result<Value, String> {
    let Value::Object(p) = part else {
        return Err("a part must be an object".into());
    };
    let mut out = Map::new();
    if let Some(meta) = p.get("metadata").filter(|m| m.is_object()) {
        out.insert("metadata".into(), meta.clone());
    }
    if let Some(text) = p.get("text") {
        out.insert("kind".into(), json!("text"));
        out.insert("text".into(), text.clone());
    } else if let Some(data) = p.get("data") {
        out.insert("kind".into(), json!("data"));
        let data = match data {
            Value::Object(_) => data.clone(),
            other => {
                out.insert("metadata".into(), json!({"mesh_wrapped": true}));
                json!({"value": other})
            }
        };
        out.insert("data".into(), data);
    } else if p.get("url").is_some() || p.get("raw").is_some() {
        let mut file = Map::new();
        if let Some(url) = p.get("url") {
            file.insert("uri".into(), url.clone());
        }
        if let Some(raw) = p.get("raw") {
            file.insert("bytes".into(), raw.clone());
        }
        if let Some(name) = p.get("filename") {
            file.insert("name".into(), name.clone());
        }
        if let Some(media) = p.get("mediaType") {
            file.insert("mimeType".into(), media.clone());
        }
        out.insert("kind".into(), json!("file"));
        out.insert("file".into(), Value::Object(file));
    } else {
        return Err("a part needs one of text, data, url or raw".into());
    }
    Ok(Value::Object(out))
}

/// A 0.3 task state as 1.0 names it.
fn state(state: &str) -> String {
    match state {
        "unknown" => "TASK_STATE_UNSPECIFIED".into(),
        s => format!("TASK_STATE_{}", s.replace('-', "_").to_ascii_uppercase()),
    }
}

/// A 0.3 part in the 1.0 shape.
fn part(p: &Value) -> Value {
    let mut out = Map::new();
    if let Some(meta) = p.get("metadata").filter(|m| m.is_object()) {
        out.insert("metadata".into(), meta.clone());
    }
    match p.get("kind").and_then(Value::as_str) {
        Some("text") => {
            out.insert("text".into(), p["text"].clone());
        }
        Some("data") => {
            out.insert("data".into(), p["data"].clone());
        }
        Some("file") => {
            let file = &p["file"];
            if let Some(uri) = file.get("uri") {
                out.insert("url".into(), uri.clone());
            }
            if let Some(bytes) = file.get("bytes") {
                out.insert("raw".into(), bytes.clone());
            }
            if let Some(name) = file.get("name") {
                out.insert("filename".into(), name.clone());
            }
            if let Some(media) = file.get("mimeType") {
                out.insert("mediaType".into(), media.clone());
            }
        }
        _ => {}
    }
    Value::Object(out)
}

fn parts(v: &Value) -> Value {
    Value::Array(
        v.as_array()
            .map(|a| a.iter().map(part).collect())
            .unwrap_or_default(),
    )
}

/// A 0.3 message in the 1.0 shape.
pub(super) fn message(m: &Value) -> Value {
    let mut out = m.as_object().cloned().unwrap_or_default();
    out.remove("kind");
    let role = match m.get("role").and_then(Value::as_str) {
        Some("agent") => "ROLE_AGENT",
        _ => "ROLE_USER",
    };
    out.insert("role".into(), json!(role));
    out.insert("parts".into(), parts(&m["parts"]));
    Value::Object(out)
}

fn status(s: &Value) -> Value {
    let mut out = s.as_object().cloned().unwrap_or_default();
    out.insert(
        "state".into(),
        json!(state(s["state"].as_str().unwrap_or("unknown"))),
    );
    if let Some(m) = s.get("message").filter(|m| m.is_object()) {
        out.insert("message".into(), message(m));
    }
    Value::Object(out)
}

fn artifact(a: &Value) -> Value {
    let mut out = a.as_object().cloned().unwrap_or_default();
    out.insert("parts".into(), parts(&a["parts"]));
    Value::Object(out)
}

/// A 0.3 task in the 1.0 shape.
pub(super) fn task(t: &Value) -> Value {
    let mut out = t.as_object().cloned().unwrap_or_default();
    out.remove("kind");
    out.insert("status".into(), status(&t["status"]));
    if let Some(Value::Array(a)) = t.get("artifacts") {
        out.insert(
            "artifacts".into(),
            Value::Array(a.iter().map(artifact).collect()),
        );
    }
    if let Some(Value::Array(h)) = t.get("history") {
        out.insert(
            "history".into(),
            Value::Array(h.iter().map(message).collect()),
        );
    }
    Value::Object(out)
}

/// A 0.3 stream item (task, message, status or artifact update) as 1.0's `StreamResponse`.
pub(super) fn stream_item(item: &Value) -> Value {
    match item.get("kind").and_then(Value::as_str) {
        Some("task") => json!({"task": task(item)}),
        Some("message") => json!({"message": message(item)}),
        Some("status-update") => {
            let mut u = item.as_object().cloned().unwrap_or_default();
            u.remove("kind");
            u.remove("final");
            u.insert("status".into(), status(&item["status"]));
            json!({"statusUpdate": u})
        }
        Some("artifact-update") => {
            let mut u = item.as_object().cloned().unwrap_or_default();
            u.remove("kind");
            u.insert("artifact".into(), artifact(&item["artifact"]));
            json!({"artifactUpdate": u})
        }
        _ => item.clone(),
    }
}

/// The answer of a `SendMessage`: `{task}` or `{message}`.
pub(super) fn send_result(reply: &Value) -> Value {
    stream_item(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_lose_kind_and_gain_enums() {
        let t = json!({"kind": "task", "id": "t", "contextId": "c",
            "status": {"state": "input-required", "message": {"kind": "message",
                "messageId": "m", "role": "agent", "parts": [{"kind": "text", "text": "hi"},
                {"kind": "data", "data": {"a": 1}}]}},
            "artifacts": [{"artifactId": "output", "parts": [{"kind": "file",
                "file": {"uri": "nats-object://b/o", "mimeType": "application/json"}}]}]});
        let v = task(&t);
        assert!(v.get("kind").is_none());
        assert_eq!(v["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(v["status"]["message"]["role"], "ROLE_AGENT");
        assert_eq!(
            v["status"]["message"]["parts"],
            json!([{"text": "hi"}, {"data": {"a": 1}}])
        );
        assert_eq!(
            v["artifacts"][0]["parts"][0],
            json!({"url": "nats-object://b/o", "mediaType": "application/json"})
        );
    }

    #[test]
    fn stream_items_are_wrapped_without_final() {
        let u = json!({"kind": "status-update", "taskId": "t", "contextId": "c",
            "status": {"state": "completed"}, "final": true});
        assert_eq!(
            stream_item(&u),
            json!({"statusUpdate": {"taskId": "t", "contextId": "c",
                "status": {"state": "TASK_STATE_COMPLETED"}}})
        );
    }

    #[test]
    fn request_parts_come_back_to_0_3() {
        let m = json!({"messageId": "m", "role": "ROLE_USER",
            "parts": [{"data": 5}, {"url": "https://x/y", "filename": "y"}]});
        let v = message_to_v03(m).unwrap();
        assert_eq!(v["parts"][0]["data"], json!({"value": 5}));
        assert_eq!(
            v["parts"][1],
            json!({"kind": "file", "file": {"uri": "https://x/y", "name": "y"}})
        );
        assert!(message_to_v03(json!({"role": "ROLE_X", "parts": []})).is_err());
        assert!(message_to_v03(json!({"role": "ROLE_USER", "parts": [{}]})).is_err());
    }
}
