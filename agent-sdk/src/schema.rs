//! JSON Schema checks of inputs and outputs, reported as one readable line per violation
//! (`input/items/0: "x" is not of type "number"`).
//!
//! A refusal is read by whoever sent the value, stored in records and passed along, so it
//! quotes at most a little of the value ([`MAX_QUOTE`] bytes per violation) and lists at
//! most [`MAX_VIOLATIONS`]: an input of millions of wrong items, or one string of megabytes,
//! gets a short refusal, not a copy of itself per violation.

pub mod defaults;

use std::sync::Arc;

use serde_json::Value;

/// A compiled JSON Schema with its source.
#[derive(Clone)]
pub struct Schema {
    source: Value,
    validator: Arc<jsonschema::Validator>,
    has_defaults: bool,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish()
    }
}

impl Schema {
    /// Compiles `source`; the error says why it is not a valid schema.
    pub fn compile(source: &Value) -> Result<Schema, String> {
        if !source.is_object() && !source.is_boolean() {
            return Err("a JSON Schema must be an object or a boolean".into());
        }
        let validator = jsonschema::validator_for(source).map_err(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })?;
        Ok(Schema {
            source: source.clone(),
            validator: Arc::new(validator),
            has_defaults: defaults::declares_any(source),
        })
    }

    /// Fills in what `value` leaves out with the schema's `default`s (see [`defaults`]).
    pub fn apply_defaults(&self, value: &mut Value) {
        if self.has_defaults {
            defaults::apply(&self.source, value);
        }
    }

    /// The schema as written.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// The violations of `value` (at most [`MAX_VIOLATIONS`], see [`describe`]), each
    /// prefixed with `what` and the JSON pointer of the offending value (`input/a/0: ...`);
    /// empty when `value` conforms.
    pub fn violations(&self, what: &str, value: &Value) -> Vec<String> {
        describe(&self.validator, value, |at| format!("{what}{at}"))
    }
}

/// The most violations a refusal lists; a last line says when there were more.
pub const MAX_VIOLATIONS: usize = 10;

/// The most bytes of the offending value a violation quotes (its JSON, cut with `…`).
pub const MAX_QUOTE: usize = 64;

/// The longest line a violation takes, in bytes (a schema's `enum` or a list of unexpected
/// property names is cut there too).
pub const MAX_VIOLATION_LEN: usize = 300;

/// The violations of `value` under `validator`, one line each (`{place}: {message}`, where
/// `place` is what `at` makes of the JSON pointer of the offending value), each quoting at
/// most [`MAX_QUOTE`] bytes of it and at most [`MAX_VIOLATION_LEN`] long; at most
/// [`MAX_VIOLATIONS`] of them, then "… and more". Empty when `value` conforms.
pub fn describe(
    validator: &jsonschema::Validator,
    value: &Value,
    at: impl Fn(&str) -> String,
) -> Vec<String> {
    let mut lines = Vec::new();
    for e in validator.iter_errors(value) {
        if lines.len() == MAX_VIOLATIONS {
            lines.push(format!(
                "… and more (only the first {MAX_VIOLATIONS} are listed)"
            ));
            break;
        }
        let quoted = quote(e.instance(), MAX_QUOTE);
        let line = format!(
            "{}: {}",
            at(&e.instance_path().to_string()),
            e.masked_with(quoted)
        );
        lines.push(cut(line, MAX_VIOLATION_LEN));
    }
    lines
}

/// How many violations [`describe`] found, in words: "1 violation", "3 violations", or
/// "more than 10 violations" when it stopped listing them.
pub fn counted(violations: &[String]) -> String {
    match violations.len() {
        1 => "1 violation".to_owned(),
        n if n > MAX_VIOLATIONS => format!("more than {MAX_VIOLATIONS} violations"),
        n => format!("{n} violations"),
    }
}

/// `value` as compact JSON, at most `max` bytes of it (then `…`), without writing out more
/// than that.
pub fn quote(value: &Value, max: usize) -> String {
    struct Capped(Vec<u8>, usize);
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = self.1.saturating_sub(self.0.len());
            self.0.extend_from_slice(&buf[..buf.len().min(room)]);
            if buf.len() > room {
                return Err(std::io::Error::other("full"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Capped(Vec::new(), max + 1);
    let _ = serde_json::to_writer(&mut out, value);
    cut(String::from_utf8_lossy(&out.0).into_owned(), max)
}

/// `text` cut to at most `max` bytes, with `…` when cut.
fn cut(text: String, max: usize) -> String {
    match text.len() > max {
        true => messages::inbound::excerpt(&text, max),
        false => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn violations_name_the_place() {
        let s = Schema::compile(&json!({
            "type": "object",
            "required": ["n"],
            "properties": {"n": {"type": "number"}, "xs": {"type": "array", "items": {"type": "string"}}}
        }))
        .unwrap();
        assert!(s.violations("input", &json!({"n": 1})).is_empty());
        let v = s.violations("input", &json!({"n": "a", "xs": ["ok", 3]}));
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v.iter().any(|l| l.starts_with("input/n: ")), "{v:?}");
        assert!(v.iter().any(|l| l.starts_with("input/xs/1: ")), "{v:?}");
        let v = s.violations("output", &json!({}));
        assert!(v[0].starts_with("output: "), "{v:?}");
    }

    #[test]
    fn violations_quote_little_of_the_value_and_are_few() {
        let s = Schema::compile(&json!({
            "type": "object",
            "properties": {"xs": {"type": "array", "items": {"type": "number"}}}
        }))
        .unwrap();
        let big = "x".repeat(1 << 20);
        let v = s.violations("input", &json!({"xs": vec![big; 1000]}));
        assert_eq!(v.len(), MAX_VIOLATIONS + 1, "{v:?}");
        assert!(v.iter().all(|l| l.len() <= MAX_VIOLATION_LEN + 3), "{v:?}");
        assert!(v[0].starts_with("input/xs/0: \"xxxx"), "{}", v[0]);
        assert!(v[0].ends_with("… is not of type \"number\""), "{}", v[0]);
        assert!(v[MAX_VIOLATIONS].contains("and more"), "{v:?}");
        assert_eq!(quote(&json!({"a": 1}), 64), r#"{"a":1}"#);
        let q = quote(&json!("é".repeat(40)), 6);
        assert!(q.len() <= 6 + '…'.len_utf8() && q.ends_with('…'), "{q}");
    }

    #[test]
    fn bad_schemas_are_rejected() {
        assert!(Schema::compile(&json!({"type": "nonsense"})).is_err());
        assert!(Schema::compile(&json!("string")).is_err());
        assert!(Schema::compile(&json!(true)).is_ok());
    }
}
