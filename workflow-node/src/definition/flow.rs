//! Flow control across a workflow's runs: `max_concurrent_runs` (runs of the workflow in
//! flight at once, over all replicas), `concurrency_key` (at most `max` runs in flight per
//! value of a template over the input, e.g. one customer at a time) and `priority` (which
//! waiting run goes first). A workflow with either limit starts its runs *queued*; they
//! take a slot in the order (priority, arrival) as slots free up (see `core::flow`).
//!
//! The key is a template over the run's input only (`{{workflow.input.customer}}`): it is
//! resolved once, when the run arrives, and must give a string (or a number, written as
//! text) of at most [`MAX_KEY_BYTES`]; otherwise the run fails at once, naming the key.

use serde_json::Value;
use workflow_expr::{Segment, Template};

use super::fields::Fields;
use super::problem::Sink;

/// The most bytes a resolved concurrency key may have.
pub const MAX_KEY_BYTES: usize = 256;
/// The most runs one workflow may allow in flight, or per key.
pub const MAX_SLOTS: u64 = 10_000;
/// The most urgent priority: waiting runs with a lower number go first.
pub const HIGHEST_PRIORITY: u8 = 1;
/// The least urgent priority.
pub const LOWEST_PRIORITY: u8 = 5;
/// The priority of a run when neither the workflow nor the request says.
pub const DEFAULT_PRIORITY: u8 = 3;
/// The field of a start request's `metadata` that carries the run's own priority.
pub const PRIORITY_METADATA: &str = "priority";

/// A workflow's flow control; [`FlowControl::gated`] tells whether its runs queue at all.
#[derive(Debug, Clone)]
pub struct FlowControl {
    /// `max_concurrent_runs`: runs of this workflow in flight at once; `None` is unlimited.
    pub max_runs: Option<u32>,
    /// `concurrency_key`: the key template and the most runs in flight per key.
    pub key: Option<KeyLimit>,
    /// `priority` (1 to 5, lower first; default 3): the priority of a run whose request
    /// names none.
    pub priority: u8,
}

/// `concurrency_key: {key: "{{workflow.input.customer}}", max: 1}`.
#[derive(Debug, Clone)]
pub struct KeyLimit {
    /// The template giving a run's key, over `workflow.input` only.
    pub key: Template,
    /// The most runs in flight with one key.
    pub max: u32,
}

impl FlowControl {
    /// Whether runs of the workflow wait for a slot before they start.
    pub fn gated(&self) -> bool {
        self.max_runs.is_some() || self.key.is_some()
    }

    /// The limits in words, for `workflow-node plan`: none without flow control.
    pub fn describe(&self) -> Option<String> {
        if !self.gated() {
            return None;
        }
        let mut words = Vec::new();
        if let Some(n) = self.max_runs {
            words.push(format!("max_concurrent_runs {n}"));
        }
        if let Some(k) = &self.key {
            words.push(format!(
                "at most {} per concurrency key {}",
                k.max,
                k.key.source()
            ));
        }
        words.push(format!("priority {} (1 first, 5 last)", self.priority));
        Some(format!("runs queue: {}", words.join(", ")))
    }

    /// The most runs in flight with one key, if the workflow limits runs per key.
    pub fn per_key(&self) -> Option<u32> {
        self.key.as_ref().map(|k| k.max)
    }
}

impl Default for FlowControl {
    fn default() -> Self {
        FlowControl {
            max_runs: None,
            key: None,
            priority: DEFAULT_PRIORITY,
        }
    }
}

/// Reads `max_concurrent_runs`, `concurrency_key` and `priority` from the workflow block,
/// reporting every problem.
pub(super) fn parse_flow(w: &mut Fields<'_>, sink: &mut Sink) -> FlowControl {
    let max_runs = w
        .int_at_most(
            sink,
            "max_concurrent_runs",
            1,
            ("the ceiling of max_concurrent_runs", MAX_SLOTS),
        )
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let key = match w.get(sink, "concurrency_key", &[]) {
        None => None,
        Some(Value::Object(map)) => {
            let mut f = Fields::new(map, None, "concurrency_key.");
            let limit = parse_key(&mut f, sink);
            f.finish(sink, "concurrency_key", &[]);
            limit
        }
        Some(v) => {
            w.wrong(
                sink,
                "concurrency_key",
                "a mapping {key: \"{{workflow.input.x}}\", max: N}",
                v,
            );
            None
        }
    };
    let priority = w
        .int_at_most(
            sink,
            "priority",
            u64::from(HIGHEST_PRIORITY),
            ("the lowest priority", u64::from(LOWEST_PRIORITY)),
        )
        .map_or(DEFAULT_PRIORITY, |n| {
            u8::try_from(n).unwrap_or(LOWEST_PRIORITY)
        });
    FlowControl {
        max_runs,
        key,
        priority,
    }
}

fn parse_key(f: &mut Fields<'_>, sink: &mut Sink) -> Option<KeyLimit> {
    let max = match f.required(sink, "max", &[]) {
        Some(_) => f.int_at_most(
            sink,
            "max",
            1,
            ("the ceiling of concurrency_key.max", MAX_SLOTS),
        ),
        None => None,
    };
    let key = match f.required(sink, "key", &[]) {
        Some(v) => f.compile_template(sink, "key", v),
        None => None,
    };
    if let Some(t) = &key {
        check_key_paths(f, sink, t);
        if t.is_literal() {
            f.problem(
                sink,
                "key",
                "a key without a template is one key for every run: use max_concurrent_runs",
            );
        }
    }
    Some(KeyLimit {
        key: key?,
        max: u32::try_from(max?).unwrap_or(u32::MAX),
    })
}

/// The key is resolved when the run arrives, before any node has run: it may read the
/// run's input only.
fn check_key_paths(f: &Fields<'_>, sink: &mut Sink, t: &Template) {
    for path in t.paths() {
        let input = matches!(path.rest.first(), Some(Segment::Key(k)) if k == "input");
        if path.root != "workflow" || !input {
            f.problem(
                sink,
                "key",
                format!("a concurrency key names only workflow.input; found '{path}'"),
            );
        }
    }
}

/// The run's priority as a start request's `metadata.priority` gives it: a whole number
/// from [`HIGHEST_PRIORITY`] to [`LOWEST_PRIORITY`].
pub fn request_priority(v: &Value) -> Result<u8, String> {
    match v.as_u64() {
        Some(n) if (u64::from(HIGHEST_PRIORITY)..=u64::from(LOWEST_PRIORITY)).contains(&n) => {
            Ok(u8::try_from(n).unwrap_or(LOWEST_PRIORITY))
        }
        _ => Err(format!(
            "metadata.{PRIORITY_METADATA} must be a whole number from {HIGHEST_PRIORITY} \
             (first) to {LOWEST_PRIORITY} (last), found {}",
            short(v)
        )),
    }
}

/// The priority a start request's `metadata` asks for: `None` when it names none.
pub fn priority_of(
    metadata: Option<&serde_json::Map<String, Value>>,
) -> Result<Option<u8>, String> {
    match metadata.and_then(|m| m.get(PRIORITY_METADATA)) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => request_priority(v).map(Some),
    }
}

/// A value as shown in an error, cut to a few characters.
fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

/// A resolved key as the gate keeps it: a string as is, a number or a boolean written as
/// text; anything else, or a key longer than [`MAX_KEY_BYTES`], is refused.
pub fn key_text(v: &Value) -> Result<String, String> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => {
            return Err(format!(
                "concurrency_key.key must give a string, found {}",
                short(other)
            ))
        }
    };
    if text.len() > MAX_KEY_BYTES {
        return Err(format!(
            "concurrency_key.key gives {} bytes, more than {MAX_KEY_BYTES}",
            text.len()
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::parse_str;
    use serde_json::json;

    fn file(flow: &str) -> String {
        format!(
            "name: F\nworkflow:\n  description: d\n{flow}  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
        )
    }

    fn problems(flow: &str) -> String {
        let p = parse_str(&file(flow), "f.yaml").unwrap_err();
        p.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_fields_are_read() {
        let wf = parse_str(
            &file("  max_concurrent_runs: 4\n  concurrency_key: {key: \"{{workflow.input.customer}}\", max: 2}\n  priority: 2\n"),
            "f.yaml",
        )
        .expect("valid");
        assert_eq!(wf.flow.max_runs, Some(4));
        assert_eq!(wf.flow.per_key(), Some(2));
        assert_eq!(wf.flow.priority, 2);
        assert!(wf.flow.gated());
        let plain = parse_str(&file(""), "f.yaml").expect("valid");
        assert!(!plain.flow.gated());
        assert_eq!(plain.flow.priority, DEFAULT_PRIORITY);
    }

    #[test]
    fn every_flow_problem_is_reported_at_once() {
        let text = problems(
            "  max_concurrent_runs: 0\n  concurrency_key: {key: \"{{a.output.x}}\", colour: red}\n  priority: 9\n",
        );
        for expected in [
            "max_concurrent_runs: must be at least 1, found 0",
            "concurrency_key.max: missing field",
            "concurrency_key.key: a concurrency key names only workflow.input; found 'a.output.x'",
            "concurrency_key.colour",
            "priority: 9 exceeds the lowest priority (5)",
        ] {
            assert!(text.contains(expected), "{expected} not in:\n{text}");
        }
        let text = problems("  concurrency_key: {key: fixed, max: 0}\n");
        assert!(
            text.contains("concurrency_key.max: must be at least 1"),
            "{text}"
        );
        assert!(text.contains("a key without a template"), "{text}");
        let text = problems("  concurrency_key: \"{{workflow.input.c}}\"\n");
        assert!(
            text.contains("concurrency_key: expected a mapping"),
            "{text}"
        );
    }

    #[test]
    fn a_request_priority_and_a_key_are_checked() {
        assert_eq!(request_priority(&json!(1)), Ok(1));
        assert!(request_priority(&json!(0)).is_err());
        assert!(request_priority(&json!("high")).is_err());
        assert!(request_priority(&json!(2.5)).is_err());
        assert_eq!(key_text(&json!("acme")), Ok("acme".into()));
        assert_eq!(key_text(&json!(7)), Ok("7".into()));
        assert!(key_text(&json!(null)).is_err());
        assert!(key_text(&json!({"a": 1})).is_err());
        assert!(key_text(&json!("x".repeat(300))).is_err());
    }
}
