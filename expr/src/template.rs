//! Templates: JSON values whose strings may hold `{{...}}` and whose objects may be
//! `coalesce`/`concat` operators.
//!
//! Compiling walks the value once and keeps a tree in which every string is already split
//! into text and holes, so resolving does no parsing, and a string that is one whole `{{path}}`
//! costs one [`Scope::lookup`].

use crate::ast::Compiled;
use crate::error::{clip, reason, ExprError};
use crate::lex::Mode;
use crate::limits::{deeper_than, MAX_NESTING, MAX_TEXT_LEN, MAX_VALUE_DEPTH};
use crate::path::{is_ident_char, parse_reference};
use crate::value::{concat, push_text};
use crate::{Path, Scope};
use serde_json::{Map, Value};

/// What a template may contain beyond plain paths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TemplateOptions {
    /// Allow arithmetic (`+ - * /`) over paths and literals inside `{{ }}` (stub agents).
    pub arithmetic: bool,
}

/// A compiled template.
#[derive(Debug, Clone)]
pub struct Template {
    source: Value,
    root: Node,
}

/// A part of a string: literal text or a hole.
#[derive(Debug, Clone)]
pub(crate) enum Piece {
    Text(String),
    Hole(Hole),
}

/// What is between `{{` and `}}`.
#[derive(Debug, Clone)]
pub(crate) enum Hole {
    Path(Path),
    /// Arithmetic, with the hole's text for error messages.
    Expr(Box<Compiled>, String),
}

#[derive(Debug, Clone)]
enum Node {
    /// A value without templates or operators.
    Literal(Value),
    /// A string that is exactly one hole: the value keeps its JSON type.
    Whole(Hole),
    /// A string with text and holes: interpolated as text.
    Text(Vec<Piece>),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
    Coalesce(Vec<Node>),
    Concat(Vec<Node>),
}

impl Piece {
    /// The paths this piece names.
    pub(crate) fn paths(&self) -> Box<dyn Iterator<Item = &Path> + '_> {
        match self {
            Piece::Text(_) => Box::new(std::iter::empty()),
            Piece::Hole(h) => h.paths(),
        }
    }
}

impl Hole {
    /// The expression, when the hole is one.
    fn compiled(&self) -> Option<&Compiled> {
        match self {
            Hole::Path(_) => None,
            Hole::Expr(c, _) => Some(c),
        }
    }

    fn paths(&self) -> Box<dyn Iterator<Item = &Path> + '_> {
        match self {
            Hole::Path(p) => Box::new(std::iter::once(p)),
            Hole::Expr(c, _) => Box::new(c.paths()),
        }
    }

    fn resolve(&self, scope: &dyn Scope) -> Result<Value, String> {
        match self {
            Hole::Path(p) => Ok(scope.lookup(p).map_or(Value::Null, |v| v.into_owned())),
            Hole::Expr(c, text) => c
                .eval(scope)
                .map(|v| v.into_owned())
                .map_err(|e| format!("in '{{{{{text}}}}}': {e}")),
        }
    }

    /// Appends the text form of the hole's value.
    fn push(&self, out: &mut String, scope: &dyn Scope) -> Result<(), String> {
        match self {
            Hole::Path(p) => {
                if let Some(v) = scope.lookup(p) {
                    push_text(out, &v);
                }
            }
            Hole::Expr(c, text) => push_text(
                out,
                &*c.eval(scope)
                    .map_err(|e| format!("in '{{{{{text}}}}}': {e}"))?,
            ),
        }
        Ok(())
    }
}

/// Compiles the text between `{{` and `}}`: a path when it is one (the common case, and
/// what a name alone always is), else an expression with bare paths.
fn hole(inner: &str, arithmetic: bool) -> Result<Hole, ExprError> {
    if inner.trim().is_empty() {
        return Err(template_error(inner, "'{{ }}' is empty".into()));
    }
    let path_error = match parse_reference(inner) {
        Ok(path) => return Ok(Hole::Path(path)),
        Err(e) => e,
    };
    let path_shaped = inner
        .trim()
        .chars()
        .all(|c| is_ident_char(c) || matches!(c, '.' | '[' | ']'));
    match Compiled::compile(inner, Mode::Hole { arithmetic }) {
        Ok(compiled) => Ok(Hole::Expr(Box::new(compiled), inner.trim().to_string())),
        Err(e @ ExprError::Limit { .. }) => Err(e),
        Err(_) if path_shaped => Err(template_error(
            inner,
            format!("'{{{{{inner}}}}}' is not a path: {}", reason(&path_error)),
        )),
        Err(e) => Err(e),
    }
}

fn template_error(text: &str, reason: String) -> ExprError {
    ExprError::Parse {
        what: "template",
        text: clip(text),
        reason,
    }
}

/// Splits a string into text and holes. Fails on an unclosed or empty `{{`.
pub(crate) fn split_text(text: &str, arithmetic: bool) -> Result<Vec<Piece>, ExprError> {
    if text.len() > MAX_TEXT_LEN {
        return Err(ExprError::Limit {
            what: "template string length in bytes",
            limit: MAX_TEXT_LEN,
        });
    }
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(template_error(
                text,
                format!(
                    "'{{{{' at byte {} is never closed",
                    text.len() - rest.len() + open
                ),
            ));
        };
        pieces.push(Piece::Hole(hole(&after[..close], arithmetic).map_err(
            |e| match e {
                ExprError::Parse { reason, .. } => template_error(text, reason),
                other => other,
            },
        )?));
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

/// Interpolates `pieces` as text.
pub(crate) fn resolve_pieces(pieces: &[Piece], scope: &dyn Scope) -> Result<String, String> {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Hole(h) => h.push(&mut out, scope)?,
        }
    }
    Ok(out)
}

fn compile_node(value: &Value, options: TemplateOptions, depth: usize) -> Result<Node, ExprError> {
    if depth > MAX_NESTING {
        return Err(ExprError::Limit {
            what: "template nesting depth",
            limit: MAX_NESTING,
        });
    }
    Ok(match value {
        Value::String(s) if s.contains("{{") => {
            let mut pieces = split_text(s, options.arithmetic)?;
            match pieces.as_slice() {
                [Piece::Hole(_)] => match pieces.pop() {
                    Some(Piece::Hole(h)) => Node::Whole(h),
                    _ => Node::Text(pieces),
                },
                _ => Node::Text(pieces),
            }
        }
        Value::String(s) if s.len() > MAX_TEXT_LEN => {
            return Err(ExprError::Limit {
                what: "template string length in bytes",
                limit: MAX_TEXT_LEN,
            })
        }
        Value::Array(items) => {
            let nodes = items
                .iter()
                .map(|v| compile_node(v, options, depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            if nodes.iter().all(|n| matches!(n, Node::Literal(_))) {
                Node::Literal(value.clone())
            } else {
                Node::Array(nodes)
            }
        }
        Value::Object(map) if map.len() == 1 => {
            let (key, operand) = map
                .iter()
                .next()
                .map(|(k, v)| (k.as_str(), v))
                .unwrap_or(("", value));
            match key {
                "coalesce" | "concat" => {
                    let Value::Array(items) = operand else {
                        return Err(template_error(
                            &value.to_string(),
                            format!(
                                "'{key}' takes an array, got {}",
                                crate::value::type_name(operand)
                            ),
                        ));
                    };
                    let nodes = items
                        .iter()
                        .map(|v| compile_node(v, options, depth + 1))
                        .collect::<Result<Vec<_>, _>>()?;
                    if key == "coalesce" {
                        Node::Coalesce(nodes)
                    } else {
                        Node::Concat(nodes)
                    }
                }
                _ => object(map, value, options, depth)?,
            }
        }
        Value::Object(map) => object(map, value, options, depth)?,
        other => Node::Literal(other.clone()),
    })
}

fn object(
    map: &Map<String, Value>,
    value: &Value,
    options: TemplateOptions,
    depth: usize,
) -> Result<Node, ExprError> {
    let members = map
        .iter()
        .map(|(k, v)| Ok((k.clone(), compile_node(v, options, depth + 1)?)))
        .collect::<Result<Vec<_>, ExprError>>()?;
    Ok(
        if members.iter().all(|(_, n)| matches!(n, Node::Literal(_))) {
            Node::Literal(value.clone())
        } else {
            Node::Object(members)
        },
    )
}

impl Node {
    fn resolve(&self, scope: &dyn Scope) -> Result<Value, String> {
        Ok(match self {
            Node::Literal(v) => v.clone(),
            Node::Whole(h) => h.resolve(scope)?,
            Node::Text(pieces) => Value::String(resolve_pieces(pieces, scope)?),
            Node::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|n| n.resolve(scope))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Object(members) => {
                let mut map = Map::with_capacity(members.len());
                for (k, n) in members {
                    map.insert(k.clone(), n.resolve(scope)?);
                }
                Value::Object(map)
            }
            Node::Coalesce(items) => {
                for item in items {
                    let v = item.resolve(scope)?;
                    if !v.is_null() {
                        return Ok(v);
                    }
                }
                Value::Null
            }
            Node::Concat(items) => {
                let mut values = Vec::with_capacity(items.len());
                for item in items {
                    let v = item.resolve(scope)?;
                    if !v.is_null() {
                        values.push(v);
                    }
                }
                concat(values)
            }
        })
    }

    /// Calls `f` on every hole.
    fn holes<'a>(&'a self, f: &mut dyn FnMut(&'a Hole)) {
        match self {
            Node::Literal(_) => {}
            Node::Whole(h) => f(h),
            Node::Text(pieces) => pieces.iter().for_each(|p| {
                if let Piece::Hole(h) = p {
                    f(h)
                }
            }),
            Node::Array(items) | Node::Coalesce(items) | Node::Concat(items) => {
                items.iter().for_each(|n| n.holes(f))
            }
            Node::Object(members) => members.iter().for_each(|(_, n)| n.holes(f)),
        }
    }

    fn paths<'a>(&'a self, out: &mut Vec<&'a Path>) {
        self.holes(&mut |h| out.extend(h.paths()));
    }
}

impl Template {
    /// Compiles `value` with the default options (paths only).
    pub fn compile(value: &Value) -> Result<Template, ExprError> {
        Template::compile_with(value, TemplateOptions::default())
    }

    /// Compiles `value` with `options`.
    pub fn compile_with(value: &Value, options: TemplateOptions) -> Result<Template, ExprError> {
        Ok(Template {
            root: compile_node(value, options, 0)?,
            source: value.clone(),
        })
    }

    /// Resolves the template against `scope`; missing paths are `null`. Fails on arithmetic
    /// that cannot be done (a string times a number), and with an [`ExprError::Limit`] when
    /// the value nests deeper than [`crate::limits::MAX_VALUE_DEPTH`].
    pub fn resolve(&self, scope: &dyn Scope) -> Result<Value, ExprError> {
        let value = self.root.resolve(scope).map_err(|reason| ExprError::Eval {
            text: clip(&self.source.to_string()),
            reason,
        })?;
        // A literal was measured when it was compiled (MAX_NESTING).
        if !self.is_literal() && deeper_than(&value, MAX_VALUE_DEPTH) {
            return Err(ExprError::Limit {
                what: "nesting depth of the value a template resolves to",
                limit: MAX_VALUE_DEPTH,
            });
        }
        Ok(value)
    }

    /// Every path the template names, in order of appearance.
    pub fn paths(&self) -> Vec<&Path> {
        let mut out = Vec::new();
        self.root.paths(&mut out);
        out
    }

    /// Every `path == literal`, `path != literal` and `path in [literals]` inside the
    /// template's expressions (see [`crate::Condition::literal_comparisons`]).
    pub fn literal_comparisons(&self) -> Vec<(&Path, &Value)> {
        let mut out = Vec::new();
        self.root.holes(&mut |h| {
            out.extend(
                h.compiled()
                    .map(Compiled::literal_comparisons)
                    .into_iter()
                    .flatten(),
            )
        });
        out
    }

    /// What is wrong whatever the values, in the template's expressions (see
    /// [`crate::Condition::problems`]).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.root
            .holes(&mut |h| out.extend(h.compiled().map(Compiled::problems).into_iter().flatten()));
        out
    }

    /// The JSON value the template was compiled from.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether the template holds no `{{ }}` and no operator: it resolves to its source.
    pub fn is_literal(&self) -> bool {
        matches!(self.root, Node::Literal(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope() -> Map<String, Value> {
        let Value::Object(m) = json!({
            "workflow": {"input": {"x": 3, "name": "Ann", "items": [{"id": "a"}, {"id": "b"}],
                                   "quote": "it's \"q\"", "nothing": null}},
            "fetch": {"output": {"status": "ok", "list": [1, 2], "obj": {"k": [1]}, "flag": true,
                                 "n": null, "f": 2.5}},
            "_map_item": {"name": "first"},
            "_map_index": 0,
            "input": {"value": 21, "s": "x"},
            "call": 2,
        }) else {
            unreachable!()
        };
        m
    }

    fn resolve(v: Value) -> Value {
        Template::compile(&v).unwrap().resolve(&scope()).unwrap()
    }

    #[test]
    fn whole_template_keeps_type() {
        assert_eq!(resolve(json!("{{workflow.input.x}}")), json!(3));
        assert_eq!(
            resolve(json!("{{ workflow.input.items }}")),
            json!([{"id": "a"}, {"id": "b"}])
        );
        assert_eq!(resolve(json!("{{workflow.input.items[1].id}}")), json!("b"));
        assert_eq!(resolve(json!("{{fetch.output.flag}}")), json!(true));
        assert_eq!(resolve(json!("{{fetch}}")), scope()["fetch"]);
    }

    #[test]
    fn interpolation_is_text() {
        assert_eq!(
            resolve(json!("n={{workflow.input.x}} s={{fetch.output.status}} b={{fetch.output.flag}} f={{fetch.output.f}}")),
            json!("n=3 s=ok b=true f=2.5")
        );
        assert_eq!(resolve(json!("[{{fetch.output.n}}]")), json!("[]"));
        assert_eq!(
            resolve(json!("{{fetch.output.obj}} {{fetch.output.list}}")),
            json!(r#"{"k":[1]} [1,2]"#)
        );
        assert_eq!(
            resolve(json!("{{workflow.input.x}}{{workflow.input.x}}")),
            json!("33")
        );
        assert_eq!(resolve(json!(" {{workflow.input.x}}")), json!(" 3"));
        assert_eq!(
            resolve(json!("q: {{workflow.input.quote}}")),
            json!("q: it's \"q\"")
        );
    }

    #[test]
    fn literals_and_recursion() {
        assert_eq!(resolve(json!("plain }} text {")), json!("plain }} text {"));
        assert_eq!(resolve(json!(42)), json!(42));
        let t = Template::compile(&json!({"a": [1, "x"], "b": null})).unwrap();
        assert!(t.is_literal());
        assert_eq!(
            resolve(json!({"a": ["{{workflow.input.x}}", {"b": "{{_map_item.name}}"}], "c": 1})),
            json!({"a": [3, {"b": "first"}], "c": 1})
        );
    }

    #[test]
    fn missing_is_null_everywhere() {
        for p in [
            "{{workflow.input.missing}}",
            "{{nosuchnode.output.x}}",
            "{{fetch.output.missing}}",
            "{{fetch.output.n.deeper}}",
            "{{workflow.input.items[9].id}}",
            "{{workflow.input.x.y}}",
        ] {
            assert_eq!(resolve(json!(p)), Value::Null, "{p}");
        }
        assert_eq!(resolve(json!("a{{nosuch.x}}b")), json!("ab"));
    }

    #[test]
    fn coalesce() {
        assert_eq!(
            resolve(
                json!({"coalesce": ["{{nosuch.output.x}}", "{{workflow.input.nothing}}", "{{workflow.input.x}}", "later"]})
            ),
            json!(3)
        );
        assert_eq!(resolve(json!({"coalesce": ["{{nosuch.x}}"]})), Value::Null);
        assert_eq!(resolve(json!({"coalesce": []})), Value::Null);
        assert_eq!(resolve(json!({"coalesce": [null, false]})), json!(false));
        // Nested operators and operators inside objects.
        assert_eq!(
            resolve(json!({"out": {"coalesce": [{"concat": ["{{nosuch.a}}"]}, "x"]}})),
            json!({"out": ""})
        );
    }

    #[test]
    fn concat() {
        assert_eq!(
            resolve(
                json!({"concat": ["{{fetch.output.list}}", "{{nosuch.x}}", [3, "{{workflow.input.x}}"]]})
            ),
            json!([1, 2, 3, 3])
        );
        assert_eq!(
            resolve(
                json!({"concat": ["Hi ", "{{workflow.input.name}}", null, ", n=", "{{workflow.input.x}}", " ", "{{fetch.output.obj}}", " ", true]})
            ),
            json!(r#"Hi Ann, n=3 {"k":[1]} true"#)
        );
        assert_eq!(
            resolve(json!({"concat": ["{{fetch.output.list}}", "x"]})),
            json!("[1,2]x")
        );
        assert_eq!(resolve(json!({"concat": []})), json!(""));
        assert_eq!(
            resolve(json!({"concat": [{"coalesce": ["{{nosuch.x}}", "a"]}, "b"]})),
            json!("ab")
        );
        // Not an operator: two keys, or another key.
        assert_eq!(
            resolve(json!({"concat": ["a"], "other": 1})),
            json!({"concat": ["a"], "other": 1})
        );
        let err = Template::compile(&json!({"concat": "a"})).unwrap_err();
        assert!(err.to_string().contains("takes an array"), "{err}");
    }

    #[test]
    fn aliases() {
        assert_eq!(resolve(json!("{{item}}")), json!({"name": "first"}));
        assert_eq!(resolve(json!("{{item.name}}")), json!("first"));
        assert_eq!(resolve(json!("{{workflow.parameters.x}}")), json!(3));
        let t = Template::compile(&json!("{{item.name}}")).unwrap();
        assert_eq!(t.paths()[0].to_string(), "_map_item.name");
    }

    #[test]
    fn paths_in_order() {
        let t = Template::compile(&json!({
            "a": "{{workflow.input.x}} and {{b.output.y}}",
            "c": {"coalesce": ["{{d.output}}", 1]},
            "e": "literal"
        }))
        .unwrap();
        let paths: Vec<String> = t.paths().iter().map(|p| p.to_string()).collect();
        assert_eq!(paths, ["workflow.input.x", "b.output.y", "d.output"]);
        assert_eq!(t.source()["e"], json!("literal"));
    }

    #[test]
    fn parse_errors() {
        for (bad, needle) in [
            ("{{}}", "empty"),
            ("{{  }}", "empty"),
            ("a {{x", "never closed"),
            ("{{a..b}}", "not a path"),
            ("{{a[x]}}", "not a path"),
            ("{{input.value * 2}}", "arithmetic is not allowed"),
            ("{{ (a) + 1 }}", "arithmetic is not allowed"),
            ("{{ nope(a) }}", "unknown function 'nope'"),
            ("{{ a ? b }}", "no ':'"),
            ("{{ length(a, b) }}", "takes 1 argument"),
        ] {
            let err = Template::compile(&json!(bad)).unwrap_err();
            assert!(
                matches!(
                    err,
                    ExprError::Parse {
                        what: "template",
                        ..
                    }
                ),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn arithmetic() {
        let on = TemplateOptions { arithmetic: true };
        let run = |v: Value| Template::compile_with(&v, on).unwrap().resolve(&scope());
        assert_eq!(run(json!("{{input.value * 2}}")), Ok(json!(42)));
        assert_eq!(run(json!("{{ (input.value + 1) / 2 }}")), Ok(json!(11)));
        assert_eq!(run(json!("{{input.value / 2}}")), Ok(json!(10.5)));
        assert_eq!(run(json!("{{input.value - -1}}")), Ok(json!(22)));
        assert_eq!(run(json!("{{call}}")), Ok(json!(2)));
        assert_eq!(run(json!("{{call * 1.5}}")), Ok(json!(3.0)));
        assert_eq!(run(json!("v={{input.value * call}}")), Ok(json!("v=42")));
        assert_eq!(run(json!("{{input.s + 'y'}}")), Ok(json!("xy")));
        let t = Template::compile_with(&json!("{{input.value * call}}"), on).unwrap();
        let paths: Vec<String> = t.paths().iter().map(|p| p.to_string()).collect();
        assert_eq!(paths, ["input.value", "call"]);
        let err = run(json!("{{input.s * 2}}")).unwrap_err();
        assert!(matches!(err, ExprError::Eval { .. }), "{err}");
        assert!(err.to_string().contains("input.s * 2"), "{err}");
        assert!(run(json!("{{call / 0}}")).is_err());
        assert_eq!(run(json!("{{call == 2}}")), Ok(json!(true)));
        for bad in ["{{call *}}", "{{(call}}", "{{call % 2}}", "{{ {{call}} }}"] {
            assert!(Template::compile_with(&json!(bad), on).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits() {
        let long = "x".repeat(MAX_TEXT_LEN + 1);
        assert!(matches!(
            Template::compile(&json!(long)),
            Err(ExprError::Limit { .. })
        ));
        let long = format!("{}{{{{a}}}}", "x".repeat(MAX_TEXT_LEN));
        assert!(matches!(
            Template::compile(&json!(long)),
            Err(ExprError::Limit { .. })
        ));
        let mut deep = json!("{{a.b}}");
        for _ in 0..MAX_NESTING + 1 {
            deep = json!({ "coalesce": [deep] });
        }
        assert!(matches!(
            Template::compile(&deep),
            Err(ExprError::Limit { .. })
        ));
        let mut ok = json!("{{a.b}}");
        for _ in 0..MAX_NESTING - 1 {
            ok = json!([ok]);
        }
        assert!(Template::compile(&ok).is_ok());
    }

    #[test]
    fn expressions_in_holes() {
        assert_eq!(resolve(json!("{{ (workflow.input.x) }}")), json!(3));
        assert_eq!(
            resolve(json!("{{ length(workflow.input.items) }}")),
            json!(2)
        );
        assert_eq!(
            resolve(json!("{{ workflow.input.x > 2 ? 'big' : 'small' }}")),
            json!("big")
        );
        assert_eq!(
            resolve(json!(
                "n is {{ workflow.input.x == 3 ? 'three' : 'other' }}!"
            )),
            json!("n is three!")
        );
        assert_eq!(
            resolve(json!(
                "{{ coalesce(nosuch.output.x, workflow.input.nothing, fetch.output.list) }}"
            )),
            json!([1, 2])
        );
        assert_eq!(
            resolve(json!("{{ concat(fetch.output.list, [3]) }}")),
            json!([1, 2, 3])
        );
        assert_eq!(
            resolve(json!("{{ concat('a-', workflow.input.name, null, 1) }}")),
            json!("a-Ann1")
        );
        assert_eq!(
            resolve(json!("{{ toJSON(fetch.output.obj) }}")),
            json!(r#"{"k":[1]}"#)
        );
        assert_eq!(
            resolve(json!("{{ fromJSON('{\"a\": 1}') }}")),
            json!({"a": 1})
        );
        assert_eq!(
            resolve(json!(
                "{{ contains(fetch.output.list, 2) and not fetch.output.flag }}"
            )),
            json!(false)
        );
        assert_eq!(resolve(json!("{{ coalesce(-1) }}")), json!(-1));
        assert_eq!(
            resolve(json!(
                "{{ workflow.input.x in [1, 3] ? [item.name] : null }}"
            )),
            json!(["first"])
        );
        let t = Template::compile(&json!(
            "{{ fetch.output.flag ? b.output.x : coalesce(c.output, 1) }}"
        ))
        .unwrap();
        let paths: Vec<String> = t.paths().iter().map(|p| p.to_string()).collect();
        assert_eq!(paths, ["fetch.output.flag", "b.output.x", "c.output"]);
        let err = Template::compile(&json!("{{ workflow.input.name ? 1 : 2 }}"))
            .unwrap()
            .resolve(&scope())
            .unwrap_err();
        assert!(err.to_string().contains("'?' needs true or false"), "{err}");
    }

    #[test]
    fn what_is_known_without_values() {
        let t = Template::compile(&json!({
            "a": "{{ a.status == 'success' ? 1 : 2 }}",
            "b": ["{{ length(5) }}", "x {{ b.status in ['failure', 'skiped'] }}"],
            "c": "{{ fromJSON('[1') }}"
        }))
        .unwrap();
        let pairs: Vec<String> = t
            .literal_comparisons()
            .iter()
            .map(|(p, v)| format!("{p}={v}"))
            .collect();
        assert_eq!(
            pairs,
            [
                "a.status=\"success\"",
                "b.status=\"failure\"",
                "b.status=\"skiped\""
            ]
        );
        let problems = t.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("length() always fails"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("fromJSON() always fails"),
            "{problems:?}"
        );
        assert!(Template::compile(&json!("{{ length(a.b) }}"))
            .unwrap()
            .problems()
            .is_empty());
    }

    /// A scope that counts lookups.
    struct Counting(std::cell::Cell<usize>, Map<String, Value>);

    impl Scope for Counting {
        fn lookup(&self, path: &Path) -> Option<std::borrow::Cow<'_, Value>> {
            self.0.set(self.0.get() + 1);
            self.1.lookup(path)
        }
    }

    #[test]
    fn one_lookup_per_hole() {
        let s = Counting(Default::default(), scope());
        let t = Template::compile(&json!("{{workflow.input.items}}")).unwrap();
        assert_eq!(t.resolve(&s).unwrap().as_array().map(Vec::len), Some(2));
        assert_eq!(s.0.get(), 1);
        let t =
            Template::compile(&json!({"coalesce": ["{{workflow.input.x}}", "{{b.c}}"]})).unwrap();
        t.resolve(&s).unwrap();
        assert_eq!(s.0.get(), 2, "coalesce stops at the first non-null value");
    }
}
