//! Fuzzing of templates and conditions, which definitions from any author carry: arbitrary
//! bytes and grammar-built expressions. Every input compiles or is refused with a message,
//! every compiled one evaluates or fails with a message, and nothing nests or grows without
//! bound.
//!
//! `cargo test` runs a bounded number of cases; `FUZZ_CASES=100000 cargo test -p
//! workflow-expr --test fuzz` runs more.

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use workflow_expr::limits::{deeper_than, MAX_NESTING, MAX_TEXT_LEN, MAX_VALUE_DEPTH};
use workflow_expr::{Condition, ExprError, Template, TemplateOptions};

/// Cases per property: `FUZZ_CASES`, or `default` (what a plain `cargo test` runs).
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}

/// `n` levels of arrays around `inner`, built without recursion.
fn nested(n: usize, inner: Value) -> Value {
    let mut v = inner;
    for _ in 0..n {
        v = Value::Array(vec![v]);
    }
    v
}

fn scope() -> Map<String, Value> {
    let Value::Object(m) = json!({
        "workflow": {"input": {"x": 1, "s": "it's \"q\"", "l": [1, "a", null], "o": {"k": [2]},
                               "n": "7", "f": 2.5, "deep": nested(MAX_VALUE_DEPTH - 4, json!(1))}},
        "a": {"output": {"status": "ok", "n": 5, "items": [1, 2, 3], "nothing": null,
                         "json": "{\"a\": [1, 2]}"}},
        "_map_item": {"name": "n"},
        "_loop_iteration": 2,
    }) else {
        unreachable!()
    };
    m
}

/// An error must say what is wrong.
fn assert_clear(e: &ExprError) {
    let text = e.to_string();
    assert!(text.trim().len() > 10, "an unclear error: {text:?}");
}

fn exercise_condition(text: &str) {
    match Condition::compile(text) {
        Ok(c) => match c.evaluate(&scope()) {
            Ok(_) => {}
            Err(e) => {
                assert!(matches!(e, ExprError::Eval { .. }), "{e}");
                assert_clear(&e);
            }
        },
        Err(e) => assert_clear(&e),
    }
}

fn exercise_template(value: &Value) {
    for arithmetic in [false, true] {
        match Template::compile_with(value, TemplateOptions { arithmetic }) {
            Ok(t) => match t.resolve(&scope()) {
                Ok(v) => assert!(!deeper_than(&v, MAX_VALUE_DEPTH), "resolved too deep"),
                Err(e) => assert_clear(&e),
            },
            Err(e) => assert_clear(&e),
        }
    }
}

/// A value the scope holds, by path.
fn path() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a.output.status",
        "a.output.n",
        "a.output.items",
        "a.output.nothing",
        "a.output.missing",
        "a.output.json",
        "workflow.input.x",
        "workflow.input.s",
        "workflow.input.l",
        "workflow.input.o",
        "workflow.input.o.k[0]",
        "workflow.input.n",
        "workflow.input.f",
        "workflow.input.deep",
        "item.name",
        "_loop_iteration",
        "nosuch.output.x",
    ])
}

/// A well-formed condition operand or condition, fully parenthesised, so that every
/// generated text must compile.
fn condition() -> impl Strategy<Value = String> {
    expression(false)
}

/// A well-formed expression: with paths in `{{ }}` (a condition) or bare (inside a template
/// hole, where binary arithmetic is not allowed).
fn expression(bare: bool) -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        path().prop_map(move |p| if bare {
            p.to_string()
        } else {
            format!("{{{{{p}}}}}")
        }),
        path().prop_map(move |p| if bare {
            format!("({p})")
        } else {
            format!("'{{{{{p}}}}}'")
        }),
        any::<i32>().prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "true", "false", "null", "'ok'", "\"x'y\"", "2.5", "''"
        ])
        .prop_map(str::to_string),
    ];
    leaf.prop_recursive(6, 64, 4, move |inner| {
        let cmp = prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">="]);
        let logic = prop::sample::select(vec!["and", "or", "&&", "||"]);
        let arith = if bare {
            prop::sample::select(vec!["==", "!="])
        } else {
            prop::sample::select(vec!["+", "-", "*", "/"])
        };
        prop_oneof![
            (inner.clone(), cmp, inner.clone()).prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (inner.clone(), logic, inner.clone()).prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (inner.clone(), arith, inner.clone()).prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            inner.clone().prop_map(|a| format!("(not {a})")),
            inner.clone().prop_map(|a| format!("(-{a})")),
            (inner.clone(), prop::collection::vec(inner.clone(), 0..4))
                .prop_map(|(a, l)| format!("({a} in [{}])", l.join(", "))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} not in {b})")),
            inner.clone().prop_map(|a| format!("length({a})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("contains({a}, {b})")),
            inner.clone().prop_map(|a| format!("toJSON({a})")),
            inner.clone().prop_map(|a| format!("fromJSON({a})")),
            (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, a, b)| format!("({c} ? {a} : {b})")),
            (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, a, b)| format!("{c} ? {a} : {b} ? {c} : {a}")),
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|l| format!("coalesce({})", l.join(", "))),
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|l| format!("concat({})", l.join(", "))),
        ]
    })
}

/// A template: JSON whose strings hold holes and whose objects may be operators.
fn template() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        path().prop_map(|p| json!(format!("{{{{{p}}}}}"))),
        (path(), ".{0,8}", path())
            .prop_map(|(a, t, b)| json!(format!("{{{{{a}}}}}{t}{{{{{b}}}}}"))),
        ".{0,12}".prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(8, 64, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner.clone(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|l| json!({"coalesce": l})),
            prop::collection::vec(inner, 0..4).prop_map(|l| json!({"concat": l})),
        ]
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_as_conditions_and_templates(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        exercise_condition(&text);
        exercise_template(&json!(text));
        exercise_template(&json!(format!("{{{{{text}}}}}")));
    }

    #[test]
    fn grammar_built_conditions_compile(text in condition()) {
        match Condition::compile(&text) {
            Ok(c) => {
                match c.evaluate(&scope()) {
                    Ok(_) => {}
                    Err(e) => assert_clear(&e),
                }
            }
            // Only a limit may refuse a well-formed condition.
            Err(e) => prop_assert!(matches!(e, ExprError::Limit { .. }), "{}: {}", text, e),
        }
    }

    #[test]
    fn grammar_built_conditions_in_templates(text in condition()) {
        exercise_template(&json!(format!("{{{{{text}}}}}")));
        exercise_template(&json!({"concat": [format!("'{text}'"), text]}));
    }

    #[test]
    fn grammar_built_expressions_in_template_holes_compile(text in expression(true)) {
        for value in [json!(format!("{{{{ {text} }}}}")), json!(format!("x {{{{{text}}}}} y"))] {
            match Template::compile(&value) {
                Ok(t) => match t.resolve(&scope()) {
                    Ok(v) => prop_assert!(!deeper_than(&v, MAX_VALUE_DEPTH)),
                    Err(e) => assert_clear(&e),
                },
                // Only a limit may refuse a well-formed expression.
                Err(e) => prop_assert!(matches!(e, ExprError::Limit { .. }), "{}: {}", text, e),
            }
        }
    }

    #[test]
    fn grammar_built_templates_resolve_bounded(t in template()) {
        match Template::compile(&t) {
            Ok(compiled) => match compiled.resolve(&scope()) {
                Ok(v) => prop_assert!(!deeper_than(&v, MAX_VALUE_DEPTH)),
                Err(e) => {
                    prop_assert!(matches!(e, ExprError::Limit { .. }), "{}", e);
                    assert_clear(&e);
                }
            },
            Err(e) => assert_clear(&e),
        }
    }
}

/// Depth 100 000 in every shape text can nest: refused by a limit, without recursion.
#[test]
fn nesting_100_000_deep_is_refused() {
    const DEEP: usize = 100_000;
    for (open, close) in [
        ("(", ")"),
        ("[", "]"),
        ("length(", ")"),
        ("not (", ")"),
        ("(true ? ", " : 1)"),
        ("coalesce(", ")"),
    ] {
        let text = format!("{}true{}", open.repeat(DEEP), close.repeat(DEEP));
        let err = Condition::compile(&text).unwrap_err();
        assert!(matches!(err, ExprError::Limit { .. }), "{open}: {err}");
    }
    for chain in [
        "not ".repeat(DEEP) + "true",
        "!".repeat(DEEP) + "true",
        "-".repeat(DEEP) + "1",
        "{{".repeat(DEEP) + &"}}".repeat(DEEP),
        "true ? 1 : ".repeat(DEEP) + "2",
        "true ? ".repeat(DEEP) + "1" + &" : 2".repeat(DEEP),
    ] {
        let err = Condition::compile(&chain).unwrap_err();
        assert_clear(&err);
        exercise_template(&json!(chain));
    }
}

#[test]
fn long_texts_name_the_limit() {
    let long = "x".repeat(MAX_TEXT_LEN + 1);
    let err = Condition::compile(&format!("'{long}' == 'x'")).unwrap_err();
    assert!(err.to_string().contains("condition length"), "{err}");
    let err = Template::compile(&json!(format!("{long}{{{{a.b}}}}"))).unwrap_err();
    assert!(err.to_string().contains("template string length"), "{err}");
    assert!(Template::compile(&json!(&long[..MAX_TEXT_LEN])).is_ok());
}

#[test]
fn resolved_values_nest_at_most_max_value_depth() {
    // A template 10 deep around a value 60 deep: 70 levels.
    let mut s = scope();
    s.insert("v".into(), nested(60, json!(1)));
    let t = Template::compile(&nested(10, json!("{{v}}"))).unwrap();
    let err = t.resolve(&s).unwrap_err();
    assert!(
        matches!(
            err,
            ExprError::Limit {
                limit: MAX_VALUE_DEPTH,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("nesting depth"), "{err}");
    // 64 levels exactly resolve.
    let t = Template::compile(&nested(4, json!("{{v}}"))).unwrap();
    assert!(t.resolve(&s).is_ok());
    // A literal template as deep as templates may nest is kept as written.
    let literal = nested(MAX_NESTING, json!(1));
    assert_eq!(
        Template::compile(&literal).unwrap().resolve(&s).unwrap(),
        literal
    );
}

#[test]
fn depth_is_measured_without_recursion() {
    assert!(!deeper_than(&json!(1), 0));
    assert!(deeper_than(&json!([]), 0));
    assert!(!deeper_than(&json!([]), 1));
    assert!(!deeper_than(&json!({"a": [1, {"b": 2}]}), 3));
    assert!(deeper_than(&json!({"a": [1, {"b": []}]}), 3));
    let mut deep = nested(100_000, json!(1));
    assert!(deeper_than(&deep, MAX_VALUE_DEPTH));
    assert!(!deeper_than(&deep, 100_000));
    // serde_json drops values recursively: take the value apart level by level.
    while let Value::Array(mut items) = deep {
        deep = items.pop().unwrap_or(Value::Null);
    }
}
