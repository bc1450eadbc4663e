//! Turning a card's JSON Schema into the parameter schemas LLM tool-calling APIs take, and
//! the rules each API applies to a declaration, written down as checks.
//!
//! - OpenAI-style and Anthropic-style tools take JSON Schema with an object root: the
//!   schema passes through with its meta keywords (`$schema`, `$id`, `$comment`) removed.
//! - Gemini's function declarations take a subset of OpenAPI 3.0 ([`gemini_schema`]):
//!   local `$ref`s are inlined (a recursive one becomes a plain object), `allOf` merged,
//!   `oneOf` read as `anyOf`, a type list with `null` becomes `nullable`, `const` a
//!   one-value enum, types are upper case, and every other keyword is dropped and listed.
//!
//! The checks ([`check_openai`], [`check_anthropic`], [`check_gemini`]) return every way a
//! declaration breaks its API's documented rules (names, root type, keywords); empty when
//! it is accepted.

use serde_json::{json, Map, Value};

/// Keywords Gemini's `Schema` (an OpenAPI 3.0 subset) accepts.
pub const GEMINI_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "example",
    "default",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "anyOf",
    "propertyOrdering",
];

/// Gemini's types.
pub const GEMINI_TYPES: &[&str] = &[
    "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL",
];

/// Formats Gemini accepts, by type.
fn gemini_format_ok(ty: &str, format: &str) -> bool {
    matches!(
        (ty, format),
        ("STRING", "enum" | "date-time")
            | ("NUMBER", "float" | "double")
            | ("INTEGER", "int32" | "int64")
    )
}

/// Whether Gemini accepts `name` as a property name: a letter or `_`, then at most 63 of
/// `[A-Za-z0-9_]`.
pub fn is_gemini_property_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Meta keywords no tool API needs.
const META: &[&str] = &["$schema", "$id", "$comment"];

/// Whether `name` is a portable tool name: `^[A-Za-z_][A-Za-z0-9_-]{0,63}$`, accepted by
/// OpenAI, Anthropic and Gemini alike.
pub fn is_portable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The portable tool name of an agent name: characters outside `[A-Za-z0-9_-]` become
/// `_`, a leading digit or `-` gets a `_` before it, and the result is cut to 64.
pub fn portable_name(agent: &str) -> String {
    let mut name: String = agent
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '-' {
            true => c,
            false => '_',
        })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        name.insert(0, '_');
    }
    name.chars().take(64).collect()
}

/// `schema` without its meta keywords (at the root: nested ones are harmless).
pub fn strip_meta(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !META.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether a schema's root describes objects (`type: object`, or properties and no type).
pub fn is_object_schema(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(_) => false,
        None => schema.get("properties").is_some(),
    }
}

/// `schema` (JSON Schema) as Gemini's `Schema`, and what had to be dropped, each as
/// `{JSON pointer}: {what}`.
pub fn gemini_schema(schema: &Value) -> (Value, Vec<String>) {
    let mut dropped = Vec::new();
    let mut stack = Vec::new();
    let converted = convert(schema, schema, "", &mut stack, &mut dropped);
    (converted, dropped)
}

fn convert(
    schema: &Value,
    root: &Value,
    path: &str,
    stack: &mut Vec<String>,
    dropped: &mut Vec<String>,
) -> Value {
    let Some(obj) = schema.as_object() else {
        if schema != &Value::Bool(true) {
            dropped.push(format!("{path}: the boolean schema {schema}"));
        }
        return json!({});
    };
    let mut obj = obj.clone();
    if let Some(Value::String(reference)) = obj.remove("$ref") {
        if stack.contains(&reference) {
            dropped.push(format!(
                "{path}: the recursive $ref {reference} (left as an object)"
            ));
            return json!({"type": "OBJECT"});
        }
        let Some(target) = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .and_then(Value::as_object)
        else {
            dropped.push(format!("{path}: the unresolvable $ref {reference}"));
            return json!({});
        };
        let mut merged = target.clone();
        merged.extend(obj);
        stack.push(reference);
        let out = convert(&Value::Object(merged), root, path, stack, dropped);
        stack.pop();
        return out;
    }
    if let Some(Value::Array(parts)) = obj.remove("allOf") {
        for part in parts {
            let part = convert(&part, root, &format!("{path}/allOf"), stack, dropped);
            merge_into(&mut obj, part);
        }
    }
    if let Some(one_of) = obj.remove("oneOf") {
        obj.entry("anyOf").or_insert(one_of);
    }
    let mut out = Map::new();
    // The type first: format and enum depend on it.
    let mut ty = None;
    match obj.remove("type") {
        Some(Value::String(t)) => ty = Some(t.to_uppercase()),
        Some(Value::Array(types)) => {
            let mut names: Vec<String> = types
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_uppercase)
                .collect();
            if names.iter().any(|t| t == "NULL") {
                names.retain(|t| t != "NULL");
                out.insert("nullable".into(), json!(true));
            }
            match names.len() {
                0 => ty = Some("NULL".into()),
                1 => ty = names.pop(),
                _ => {
                    let any: Vec<Value> = names.iter().map(|t| json!({"type": t})).collect();
                    obj.entry("anyOf").or_insert(Value::Array(any));
                }
            }
        }
        Some(other) => dropped.push(format!("{path}: the type {other}")),
        None => {}
    }
    if let Some(t) = &ty {
        out.insert("type".into(), json!(t));
    }
    if let Some(c) = obj.remove("const") {
        match c {
            Value::String(_) => {
                out.insert("enum".into(), json!([c]));
            }
            other => dropped.push(format!("{path}: const {other} (not a string)")),
        }
    }
    for (key, value) in obj {
        let here = format!("{path}/{key}");
        match key.as_str() {
            "$defs" | "definitions" => {} // inlined where referred to
            "properties" => {
                let props: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, s)| {
                        let at = format!("{here}/{name}");
                        if !is_gemini_property_name(name) {
                            // Renaming would need the arguments mapped back: kept, and said.
                            dropped.push(format!(
                                "{at}: the property name is not one Gemini accepts (kept)"
                            ));
                        }
                        (name.clone(), convert(s, root, &at, stack, dropped))
                    })
                    .collect();
                out.insert(key, Value::Object(props));
            }
            "items" if value.is_object() || value.is_boolean() => {
                out.insert(key, convert(&value, root, &here, stack, dropped));
            }
            "anyOf" => {
                let any: Vec<Value> = value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, s)| convert(s, root, &format!("{here}/{i}"), stack, dropped))
                    .collect();
                out.insert(key, Value::Array(any));
            }
            "enum" => match value.as_array() {
                Some(vs) if vs.iter().all(Value::is_string) => {
                    out.insert(key, value);
                }
                _ => dropped.push(format!("{here} (not all strings)")),
            },
            "format" => match (&ty, value.as_str()) {
                (Some(t), Some(f)) if gemini_format_ok(t, f) => {
                    out.insert(key, value);
                }
                _ => dropped.push(format!("{here} {value}")),
            },
            k if GEMINI_KEYWORDS.contains(&k) => {
                out.insert(key, value);
            }
            _ => dropped.push(here),
        }
    }
    Value::Object(out)
}

/// Merges an `allOf` member into `obj`: properties and required lists are joined, other
/// keywords already in `obj` win.
fn merge_into(obj: &mut Map<String, Value>, part: Value) {
    let Value::Object(part) = part else { return };
    for (key, value) in part {
        match (key.as_str(), obj.get_mut(&key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (k, v) in theirs {
                    mine.entry(k).or_insert(v);
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for v in theirs {
                    if !mine.contains(&v) {
                        mine.push(v);
                    }
                }
            }
            // The member was converted already: its type is upper case.
            ("type", None, Value::String(t)) => {
                obj.insert(key, Value::String(t.to_lowercase()));
            }
            (_, None, value) => {
                obj.insert(key, value);
            }
            _ => {}
        }
    }
}

/// Every way `tool` breaks the rules of OpenAI's Chat Completions `tools` entries:
/// `{type: "function", function: {name, description?, parameters?, strict?}}`, a name
/// of 1 to 64 of `[A-Za-z0-9_-]`, and parameters a JSON Schema whose root is an object
/// (no `anyOf`, `oneOf`, `allOf`, `enum` or `not` at the root).
pub fn check_openai(tool: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if tool.get("type") != Some(&json!("function")) {
        problems.push("type must be \"function\"".into());
    }
    let Some(function) = tool.get("function").and_then(Value::as_object) else {
        problems.push("function must be an object".into());
        return problems;
    };
    only_keys(
        function,
        &["name", "description", "parameters", "strict"],
        "function",
        &mut problems,
    );
    check_plain_name(function.get("name"), "function.name", &mut problems);
    if let Some(p) = function.get("parameters") {
        check_json_schema_root(p, "function.parameters", &mut problems);
        for k in ["anyOf", "oneOf", "allOf", "enum", "not"] {
            if p.get(k).is_some() {
                problems.push(format!(
                    "function.parameters: {k} is not allowed at the root"
                ));
            }
        }
    }
    problems
}

/// Every way `tool` breaks the rules of Anthropic's Messages `tools` entries:
/// `{name, description?, input_schema, ...}`, a name of 1 to 64 of `[A-Za-z0-9_-]`, and
/// an input schema that is a JSON Schema with `type: "object"` at the root.
pub fn check_anthropic(tool: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(tool) = tool.as_object() else {
        return vec!["a tool must be an object".into()];
    };
    only_keys(
        tool,
        &[
            "name",
            "description",
            "input_schema",
            "strict",
            "cache_control",
            "type",
        ],
        "tool",
        &mut problems,
    );
    check_plain_name(tool.get("name"), "name", &mut problems);
    match tool.get("input_schema") {
        Some(s) => check_json_schema_root(s, "input_schema", &mut problems),
        None => problems.push("input_schema is required".into()),
    }
    problems
}

/// Every way `declaration` breaks the rules of Gemini's `FunctionDeclaration`: `{name,
/// description?, parameters?}`, a name starting with a letter or `_` followed by at most
/// 63 of `[A-Za-z0-9_.:-]`, and parameters of type OBJECT using only
/// [`GEMINI_KEYWORDS`], [`GEMINI_TYPES`], string enums and the formats Gemini knows.
pub fn check_gemini(declaration: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(decl) = declaration.as_object() else {
        return vec!["a function declaration must be an object".into()];
    };
    only_keys(
        decl,
        &["name", "description", "parameters"],
        "declaration",
        &mut problems,
    );
    let name = decl.get("name").and_then(Value::as_str).unwrap_or("");
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c));
    if !ok {
        problems.push(format!("name {name:?} is not a Gemini function name"));
    }
    if let Some(p) = decl.get("parameters") {
        if p.get("type") != Some(&json!("OBJECT")) {
            problems.push("parameters: the root must be of type OBJECT".into());
        }
        check_gemini_schema(p, "parameters", &mut problems);
    }
    problems
}

fn check_gemini_schema(schema: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        problems.push(format!("{path}: a schema must be an object"));
        return;
    };
    for (key, value) in obj {
        let here = format!("{path}.{key}");
        if !GEMINI_KEYWORDS.contains(&key.as_str()) {
            problems.push(format!("{here}: not a Gemini Schema field"));
            continue;
        }
        match key.as_str() {
            "type" if !value.as_str().is_some_and(|t| GEMINI_TYPES.contains(&t)) => {
                problems.push(format!("{here}: {value} is not a Gemini type"));
            }
            "enum"
                if !value
                    .as_array()
                    .is_some_and(|v| v.iter().all(Value::is_string)) =>
            {
                problems.push(format!("{here}: enum values must be strings"));
            }
            "format" => {
                let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
                if !value.as_str().is_some_and(|f| gemini_format_ok(ty, f)) {
                    problems.push(format!("{here}: format {value} is not accepted for {ty}"));
                }
            }
            "properties" => match value.as_object() {
                Some(props) => {
                    for (name, s) in props {
                        if !is_gemini_property_name(name) {
                            problems
                                .push(format!("{here}: {name:?} is not a Gemini property name"));
                        }
                        check_gemini_schema(s, &format!("{here}.{name}"), problems);
                    }
                }
                None => problems.push(format!("{here}: must be an object")),
            },
            "items" => check_gemini_schema(value, &here, problems),
            "anyOf" => match value.as_array() {
                Some(list) => {
                    for (i, s) in list.iter().enumerate() {
                        check_gemini_schema(s, &format!("{here}[{i}]"), problems);
                    }
                }
                None => problems.push(format!("{here}: must be an array")),
            },
            _ => {}
        }
    }
}

fn only_keys(obj: &Map<String, Value>, allowed: &[&str], what: &str, problems: &mut Vec<String>) {
    for key in obj.keys() {
        if !allowed.contains(&key.as_str()) {
            problems.push(format!("{what}: unknown field {key}"));
        }
    }
}

fn check_plain_name(name: Option<&Value>, what: &str, problems: &mut Vec<String>) {
    let name = name.and_then(Value::as_str).unwrap_or("");
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        problems.push(format!("{what} {name:?} must be 1 to 64 of [A-Za-z0-9_-]"));
    }
}

fn check_json_schema_root(schema: &Value, what: &str, problems: &mut Vec<String>) {
    if schema.get("type") != Some(&json!("object")) {
        problems.push(format!("{what}: the root must have type \"object\""));
    }
    if let Err(e) = crate::schema::Schema::compile(schema) {
        problems.push(format!("{what}: not a valid JSON Schema: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_made_portable() {
        assert_eq!(portable_name("Order_Flow-2"), "Order_Flow-2");
        assert_eq!(portable_name("2fast"), "_2fast");
        assert_eq!(portable_name("-x"), "_-x");
        assert_eq!(portable_name(&"a".repeat(80)).len(), 64);
        for n in ["Order_Flow-2", "_2fast", "_-x"] {
            assert!(is_portable_name(n), "{n}");
        }
        for n in ["", "2fast", "a.b", "a b", &"a".repeat(65)] {
            assert!(!is_portable_name(n), "{n}");
        }
    }

    #[test]
    fn gemini_inlines_refs_and_lists_what_it_drops() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "item": {"type": "object", "properties": {"sku": {"type": "string", "minLength": 1}},
                         "required": ["sku"], "additionalProperties": false},
                "tree": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}
            },
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "uniqueItems": true},
                "note": {"type": ["string", "null"], "format": "email"},
                "mode": {"const": "fast"},
                "n": {"type": "integer", "format": "int64", "exclusiveMinimum": 0},
                "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "both": {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                                   {"properties": {"b": {"type": "number"}}}]},
                "tree": {"$ref": "#/$defs/tree"}
            },
            "required": ["items"]
        });
        let (g, dropped) = gemini_schema(&schema);
        assert!(
            check_gemini(&json!({"name": "t", "parameters": g})).is_empty(),
            "{g:#}"
        );
        assert!(!g.to_string().contains("$ref"), "{g}");
        assert_eq!(
            g["properties"]["items"]["items"]["properties"]["sku"]["type"],
            "STRING"
        );
        assert_eq!(
            g["properties"]["items"]["items"]["required"],
            json!(["sku"])
        );
        assert_eq!(g["properties"]["note"]["nullable"], true);
        assert_eq!(g["properties"]["note"]["type"], "STRING");
        assert_eq!(g["properties"]["mode"]["enum"], json!(["fast"]));
        assert_eq!(g["properties"]["n"]["format"], "int64");
        assert_eq!(g["properties"]["either"]["anyOf"][1]["type"], "NUMBER");
        assert_eq!(g["properties"]["both"]["required"], json!(["a"]));
        assert_eq!(g["properties"]["both"]["properties"]["b"]["type"], "NUMBER");
        let tree = &g["properties"]["tree"]["properties"]["kids"]["items"];
        assert_eq!(tree["type"], "OBJECT");
        for expected in [
            "/$schema",
            "/properties/items/items/additionalProperties",
            "/properties/items/uniqueItems",
            "/properties/note/format \"email\"",
            "/properties/n/exclusiveMinimum",
            "recursive $ref #/$defs/tree",
        ] {
            assert!(
                dropped.iter().any(|d| d.contains(expected)),
                "{expected} not in {dropped:#?}"
            );
        }
    }

    #[test]
    fn the_checks_catch_what_each_api_refuses() {
        let bad_gemini = json!({"name": "9x", "parameters": {"type": "object",
            "properties": {"a": {"type": "STRING", "format": "email", "$ref": "#/x"},
                           "b-c": {"type": "NUMBER", "enum": [1, 2]}}}});
        let p = check_gemini(&bad_gemini);
        // The name, the root's type (twice: not OBJECT, not a Gemini type), the format,
        // the $ref, the property name b-c, the number enum.
        assert_eq!(p.len(), 7, "{p:#?}");
        assert!(
            p.iter()
                .any(|l| l.contains("\"b-c\" is not a Gemini property name")),
            "{p:#?}"
        );
        assert!(p.iter().any(|l| l.contains("$ref")), "{p:#?}");
        let bad_openai = json!({"type": "function", "function": {"name": "a b",
            "parameters": {"anyOf": [{"type": "object"}]}}});
        assert_eq!(
            check_openai(&bad_openai).len(),
            3,
            "{:?}",
            check_openai(&bad_openai)
        );
        let bad_anthropic = json!({"name": "x", "parameters": {}});
        assert_eq!(check_anthropic(&bad_anthropic).len(), 2);
    }
}
