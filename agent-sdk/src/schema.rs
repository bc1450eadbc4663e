//! JSON Schema checks of inputs and outputs, reported as one readable line per violation
//! (`input/items/0: "x" is not of type "number"`).

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

    /// Every violation of `value`, each prefixed with `what` and the JSON pointer of the
    /// offending value (`input/a/0: ...`); empty when `value` conforms.
    pub fn violations(&self, what: &str, value: &Value) -> Vec<String> {
        self.validator
            .iter_errors(value)
            .map(|e| format!("{what}{}: {e}", e.instance_path()))
            .collect()
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
    fn bad_schemas_are_rejected() {
        assert!(Schema::compile(&json!({"type": "nonsense"})).is_err());
        assert!(Schema::compile(&json!("string")).is_err());
        assert!(Schema::compile(&json!(true)).is_ok());
    }
}
