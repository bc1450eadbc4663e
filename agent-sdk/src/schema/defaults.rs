//! `default` in JSON Schemas: the workflow's `input_schema`, its
//! `output_schema`, and a node's output contract (`output_schema_override`) fill in what a
//! value leaves out, before the value is validated and before any template sees it; an
//! agent served by this crate completes its input and its output the same way, so an
//! answer that leaves out a field with a default passes the contract it was sent.
//!
//! The rules, which `docs/semantics.md` states for users:
//!
//! - a property absent from an object takes its schema's `default` (a copy); a property
//!   present, even as `null`, is kept;
//! - then each property (present, or just given its default) is completed by its own
//!   schema, so nested objects get their defaults too; array items by `items` (or
//!   `prefixItems`, by position); `allOf` members each in turn; a local `$ref` (`#/...`) is
//!   followed;
//! - a missing object with no `default` of its own is not created for the sake of its
//!   members' defaults;
//! - `anyOf`, `oneOf`, `if`/`then`/`else`, `additionalProperties` and `patternProperties`
//!   are not followed: which of them applies depends on the value;
//! - a `null` value as a whole takes the root's `default`.
//!
//! Pure and deterministic (a definition and a value give one result), so every replica
//! completes a value the same way. Bounded: recursion goes down the value (at most
//! [`workflow_expr::limits::MAX_VALUE_DEPTH`] levels deep), each member once, with at most
//! [`MAX_REF_HOPS`] schemas (`$ref`s and `allOf`s followed) applying to one value.

use serde_json::Value;

/// Most schemas applying to one value (itself, and what its `$ref`s and `allOf`s lead to);
/// beyond that nothing more is followed.
pub const MAX_REF_HOPS: usize = 16;

/// Fills `value` in with the defaults `schema` declares (see the module doc).
pub fn apply(schema: &Value, value: &mut Value) {
    let schemas = applicable(schema, vec![schema]);
    if value.is_null() {
        if let Some(d) = schemas.iter().find_map(|s| s.get("default")) {
            *value = d.clone();
        }
    }
    fill(schema, schemas, value, 0);
}

/// Whether `schema` declares a `default` anywhere (so [`apply`] may change a value).
pub fn declares_any(schema: &Value) -> bool {
    any_key(schema, "default")
}

/// The schemas that apply to one value: `start`, and what their local `$ref`s and `allOf`s
/// lead to, each once, at most [`MAX_REF_HOPS`] of them.
fn applicable<'s>(root: &'s Value, start: Vec<&'s Value>) -> Vec<&'s Value> {
    let mut out: Vec<&Value> = Vec::new();
    let mut todo = start;
    todo.reverse();
    while let Some(s) = todo.pop() {
        if out.len() >= MAX_REF_HOPS {
            break;
        }
        if !s.is_object() || out.iter().any(|o| std::ptr::eq(*o, s)) {
            continue;
        }
        out.push(s);
        if let Some(t) = s.get("$ref").and_then(Value::as_str) {
            todo.extend(t.strip_prefix('#').and_then(|p| root.pointer(p)));
        }
        if let Some(Value::Array(all)) = s.get("allOf") {
            todo.extend(all.iter().rev());
        }
    }
    out
}

/// Fills one value by `schemas` (all applicable to it), each member once: the work is
/// linear in the size of the value, whatever the schemas refer to.
fn fill(root: &Value, schemas: Vec<&Value>, value: &mut Value, depth: usize) {
    if depth > workflow_expr::limits::MAX_VALUE_DEPTH {
        return;
    }
    match value {
        Value::Object(members) => {
            let mut names: Vec<&String> = Vec::new();
            for s in &schemas {
                if let Some(Value::Object(props)) = s.get("properties") {
                    for k in props.keys() {
                        if !names.contains(&k) {
                            names.push(k);
                        }
                    }
                }
            }
            for name in names {
                let start: Vec<&Value> = schemas
                    .iter()
                    .filter_map(|s| s.get("properties")?.get(name.as_str()))
                    .collect();
                let child = applicable(root, start);
                match members.get_mut(name.as_str()) {
                    Some(v) => fill(root, child, v, depth + 1),
                    None => {
                        if let Some(d) = child.iter().find_map(|s| s.get("default")) {
                            let mut v = d.clone();
                            fill(root, child, &mut v, depth + 1);
                            members.insert(name.clone(), v);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let start: Vec<&Value> = schemas
                    .iter()
                    .filter_map(|s| match s.get("prefixItems").and_then(|p| p.get(i)) {
                        Some(by_position) => Some(by_position),
                        None => s.get("items").filter(|it| it.is_object()),
                    })
                    .collect();
                if !start.is_empty() {
                    fill(root, applicable(root, start), item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Every `default` of `schema` that its own (sub)schema rejects, as `(where, why)`: a
/// default must be valid where it stands. Subschemas that use `$ref` are not checked
/// alone (their targets need the root).
pub fn invalid(schema: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, &Value)> = vec![(String::new(), schema)];
    while let Some((at, v)) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(d) = m.get("default") {
                    if !any_key(v, "$ref") {
                        let mut alone = m.clone();
                        alone.remove("default");
                        if let Ok(validator) = jsonschema::validator_for(&Value::Object(alone)) {
                            if let Some(e) = validator.iter_errors(d).next() {
                                out.push((format!("{at}/default"), e.to_string()));
                            }
                        }
                    }
                }
                for (k, c) in m {
                    if k != "default" && k != "examples" && k != "const" && k != "enum" {
                        stack.push((format!("{at}/{k}"), c));
                    }
                }
            }
            Value::Array(items) => {
                for (i, c) in items.iter().enumerate() {
                    stack.push((format!("{at}/{i}"), c));
                }
            }
            _ => {}
        }
    }
    out.sort();
    out
}

/// Whether `schema` has a member named `key` at any depth.
fn any_key(schema: &Value, key: &str) -> bool {
    let mut stack = vec![schema];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if m.contains_key(key) {
                    return true;
                }
                stack.extend(m.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applied(schema: Value, mut value: Value) -> Value {
        apply(&schema, &mut value);
        value
    }

    #[test]
    fn absent_properties_take_their_default_and_present_ones_stay() {
        let s = json!({"type": "object", "properties": {
            "n": {"type": "integer", "default": 3},
            "s": {"type": "string", "default": "x"},
            "none": {"type": "string"}
        }});
        assert_eq!(applied(s.clone(), json!({})), json!({"n": 3, "s": "x"}));
        assert_eq!(
            applied(s.clone(), json!({"n": 7, "s": null})),
            json!({"n": 7, "s": null})
        );
        // Not an object: nothing to fill (validation says what is wrong).
        assert_eq!(applied(s, json!([1])), json!([1]));
    }

    #[test]
    fn nested_objects_arrays_refs_and_all_of() {
        let s = json!({
            "type": "object",
            "$defs": {"opt": {"type": "object", "properties": {"on": {"default": true}}}},
            "properties": {
                "opts": {"type": "object", "default": {}, "properties": {
                    "depth": {"default": 2},
                    "inner": {"type": "object", "default": {"k": 1}, "properties": {"j": {"default": "J"}}}
                }},
                "absent": {"type": "object", "properties": {"x": {"default": 1}}},
                "items": {"type": "array", "items": {"properties": {"w": {"default": 0}}}},
                "pair": {"prefixItems": [{"properties": {"a": {"default": "A"}}}]},
                "r": {"$ref": "#/$defs/opt"},
                "both": {"allOf": [{"properties": {"p": {"default": 1}}}, {"properties": {"q": {"default": 2}}}]}
            }
        });
        let got = applied(
            s,
            json!({"items": [{}, {"w": 5}], "pair": [{}, {}], "r": {}, "both": {}}),
        );
        assert_eq!(
            got,
            json!({
                "items": [{"w": 0}, {"w": 5}],
                "pair": [{"a": "A"}, {}],
                "r": {"on": true},
                "both": {"p": 1, "q": 2},
                "opts": {"depth": 2, "inner": {"k": 1, "j": "J"}}
            })
        );
    }

    #[test]
    fn a_null_value_takes_the_root_default_and_self_reference_ends() {
        let s = json!({"type": "object", "default": {}, "properties": {"a": {"default": 1}}});
        assert_eq!(applied(s, Value::Null), json!({"a": 1}));
        let looped = json!({"$ref": "#", "properties": {"a": {"default": 1}}});
        assert_eq!(applied(looped, json!({})), json!({"a": 1}));
        let tree = json!({"type": "object", "properties": {
            "v": {"default": 0}, "kids": {"type": "array", "items": {"$ref": "#"}}
        }});
        assert_eq!(
            applied(tree, json!({"kids": [{"kids": [{}]}]})),
            json!({"kids": [{"kids": [{"v": 0}], "v": 0}], "v": 0})
        );
    }

    #[test]
    fn declared_and_invalid_defaults() {
        assert!(!declares_any(&json!({"type": "object"})));
        assert!(declares_any(
            &json!({"properties": {"a": {"items": [{"default": 1}]}}})
        ));
        let bad = invalid(&json!({"properties": {
            "n": {"type": "integer", "default": "three"},
            "ok": {"type": "integer", "default": 3},
            "e": {"enum": ["a"], "default": "b"}
        }}));
        let at: Vec<&str> = bad.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(at, ["/properties/e/default", "/properties/n/default"]);
        assert!(bad[1].1.contains("not of type"), "{bad:?}");
    }
}
