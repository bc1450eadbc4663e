//! Prompts and completions as OpenTelemetry's GenAI conventions record them on a model
//! call's span, for an agent that opted in (`record_content`, or
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`): `gen_ai.input.messages` and
//! `gen_ai.output.messages`, JSON text (span attributes cannot be structured), each
//! message `{role, parts: [...]}` with parts `{type: text, content}`, `{type: tool_call,
//! id, name, arguments}` and `{type: tool_call_response, id, response}`; an output
//! message adds its `finish_reason`. Off by default: prompts carry users' data.

use serde_json::{json, Value};

use super::client::Completion;

/// The chat-completions `messages` sent, in the conventions' shape.
pub(crate) fn input_messages(messages: &[Value]) -> String {
    let converted: Vec<Value> = messages.iter().map(message).collect();
    Value::from(converted).to_string()
}

/// The answer, as one output message.
pub(crate) fn output_messages(c: &Completion) -> String {
    let mut parts = Vec::new();
    if !c.content.is_empty() {
        parts.push(json!({"type": "text", "content": c.content}));
    }
    for call in &c.tool_calls {
        parts.push(
            json!({"type": "tool_call", "id": call.id, "name": call.name,
                          "arguments": arguments(&call.arguments)}),
        );
    }
    json!([{"role": "assistant", "parts": parts, "finish_reason": c.finish_reason}]).to_string()
}

/// Arguments as JSON when they are, else as the text the model wrote.
fn arguments(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::from(text))
}

fn message(m: &Value) -> Value {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    let text = m.get("content").and_then(Value::as_str);
    let mut parts = Vec::new();
    if role == "tool" {
        parts.push(json!({"type": "tool_call_response",
                          "id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                          "response": text.map(arguments).unwrap_or(Value::Null)}));
    } else if let Some(t) = text.filter(|t| !t.is_empty()) {
        parts.push(json!({"type": "text", "content": t}));
    }
    for call in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = call.get("function").unwrap_or(&Value::Null);
        parts.push(json!({
            "type": "tool_call",
            "id": call.get("id").cloned().unwrap_or(Value::Null),
            "name": f.get("name").cloned().unwrap_or(Value::Null),
            "arguments": arguments(f.get("arguments").and_then(Value::as_str).unwrap_or("")),
        }));
    }
    json!({"role": role, "parts": parts})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_messages_become_role_and_parts() {
        let sent = [
            json!({"role": "system", "content": "Be terse."}),
            json!({"role": "user", "content": "Double 2"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "Doubler", "arguments": "{\"value\":2}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "{\"value\":4}"}),
        ];
        let v: Value = serde_json::from_str(&input_messages(&sent)).unwrap();
        assert_eq!(
            v,
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "Be terse."}]},
                {"role": "user", "parts": [{"type": "text", "content": "Double 2"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "Doubler", "arguments": {"value": 2}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": {"value": 4}}]},
            ])
        );
        let answer = Completion {
            content: "four".into(),
            finish_reason: "stop".into(),
            ..Completion::default()
        };
        let v: Value = serde_json::from_str(&output_messages(&answer)).unwrap();
        assert_eq!(
            v,
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "four"}], "finish_reason": "stop"}])
        );
    }
}
