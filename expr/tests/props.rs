//! Property tests: no input panics, and round trips hold.

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::time::Duration;
use workflow_expr::{duration, Condition, Path, Template, TemplateOptions};

fn scope() -> Map<String, Value> {
    let Value::Object(m) = json!({
        "workflow": {"input": {"x": 1, "s": "it's \"q\"", "l": [1, "a", null], "o": {"k": 2}}},
        "a": {"output": {"status": "ok", "n": "7", "items": [], "nothing": null}},
        "_map_item": {"name": "n"},
    }) else {
        unreachable!()
    };
    m
}

/// Fragments that make up plausible (and implausible) conditions and templates.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{{a.output.status}}".to_string()),
        Just("'{{workflow.input.s}}'".to_string()),
        Just("{{workflow.input.l}}".to_string()),
        Just("{{item.name}}".to_string()),
        Just("{{".to_string()),
        Just("}}".to_string()),
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just("==".to_string()),
        Just("!=".to_string()),
        Just("<".to_string()),
        Just(">=".to_string()),
        Just("and".to_string()),
        Just("or".to_string()),
        Just("not".to_string()),
        Just("in".to_string()),
        Just("!".to_string()),
        Just("-".to_string()),
        Just("+".to_string()),
        Just("*".to_string()),
        Just("/".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(",".to_string()),
        Just("length(".to_string()),
        Just("contains(".to_string()),
        Just("toJSON(".to_string()),
        Just("fromJSON(".to_string()),
        Just("coalesce(".to_string()),
        Just("concat(".to_string()),
        Just("?".to_string()),
        Just(":".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("'ok'".to_string()),
        Just("0".to_string()),
        Just("9223372036854775807".to_string()),
        Just("1e308".to_string()),
        Just(".5".to_string()),
        "[a-z_.\\[\\]0-9 ]{0,8}",
    ]
}

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(fragment(), 0..24).prop_map(|parts| parts.join(" "))
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn exercise_condition(text: &str) {
    if let Ok(c) = Condition::compile(text) {
        let _ = c.evaluate(&scope());
        let _ = c.paths();
    }
}

fn exercise_template(value: &Value) {
    for arithmetic in [false, true] {
        if let Ok(t) = Template::compile_with(value, TemplateOptions { arithmetic }) {
            let _ = t.resolve(&scope());
            let _ = t.paths();
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_strings_never_panic(text in ".*") {
        exercise_condition(&text);
        exercise_template(&Value::String(text.clone()));
        exercise_template(&Value::String(format!("{{{{{text}}}}}")));
        let _ = duration::parse(&text);
        let _ = Path::parse(&text);
    }

    #[test]
    fn token_soup_never_panics(text in soup()) {
        exercise_condition(&text);
        exercise_template(&Value::String(format!("{{{{{text}}}}}")));
        exercise_template(&json!({"concat": [text.clone(), {"coalesce": [text]}]}));
    }

    #[test]
    fn arbitrary_json_templates_never_panic(value in json_value()) {
        exercise_template(&value);
    }

    #[test]
    fn paths_round_trip(
        root in "[A-Za-z0-9_-]{1,8}",
        rest in prop::collection::vec(
            prop_oneof![
                "[A-Za-z0-9_-]{1,8}".prop_map(|k| format!(".{k}")),
                any::<u32>().prop_map(|i| format!("[{i}]")),
            ],
            0..6,
        ),
    ) {
        let text = format!("{root}{}", rest.concat());
        let path = Path::parse(&text).unwrap();
        prop_assert_eq!(path.to_string(), text);
        prop_assert_eq!(path.rest.len(), rest.len());
    }

    #[test]
    fn durations_round_trip(n in 0u64..1_000_000_000) {
        prop_assert_eq!(duration::parse(&format!("{n}ms")).unwrap(), Duration::from_millis(n));
        prop_assert_eq!(duration::parse(&format!("{n}s")).unwrap(), Duration::from_secs(n));
        prop_assert_eq!(duration::parse(&n.to_string()).unwrap(), Duration::from_secs(n));
        let minutes = n % 1_000_000;
        prop_assert_eq!(duration::parse(&format!("{minutes}m")).unwrap(), Duration::from_secs(minutes * 60));
    }

    #[test]
    fn literal_strings_resolve_to_themselves(text in ".*") {
        prop_assume!(!text.contains("{{") && text.len() <= 16 * 1024);
        let t = Template::compile(&Value::String(text.clone())).unwrap();
        prop_assert!(t.is_literal());
        prop_assert_eq!(t.resolve(&scope()).unwrap(), Value::String(text));
    }

    #[test]
    fn whole_template_returns_the_value(value in json_value()) {
        let mut s = Map::new();
        s.insert("v".into(), json!({"x": value.clone()}));
        let t = Template::compile(&json!("{{ v.x }}")).unwrap();
        prop_assert_eq!(t.resolve(&s).unwrap(), value);
    }

    #[test]
    fn interpolation_joins_text(a in ".*", b in ".*") {
        let mut s = Map::new();
        s.insert("v".into(), json!({"a": a.clone(), "b": b.clone()}));
        let t = Template::compile(&json!("<{{v.a}}|{{v.b}}>")).unwrap();
        prop_assert_eq!(t.resolve(&s).unwrap(), Value::String(format!("<{a}|{b}>")));
        let t = Template::compile(&json!({"concat": ["{{v.a}}", "{{v.missing}}", "{{v.b}}"]})).unwrap();
        prop_assert_eq!(t.resolve(&s).unwrap(), Value::String(format!("{a}{b}")));
    }

    #[test]
    fn any_string_compares_in_both_forms(a in ".*", b in ".*") {
        let mut s = Map::new();
        s.insert("v".into(), json!({"a": a.clone(), "b": b.clone()}));
        for text in [
            "{{v.a}} == {{v.b}}",
            "'{{v.a}}' == '{{v.b}}'",
            "\"{{v.a}}\" == {{v.b}}",
            "{{v.a}} in [{{v.b}}, 'zzz-not-there-zzz']",
        ] {
            let c = Condition::compile(text).unwrap();
            prop_assert_eq!(c.evaluate(&s).unwrap(), a == b || (text.contains("zzz") && a == "zzz-not-there-zzz"));
        }
        let c = Condition::compile("{{v.a}} == '{{v.a}}' and {{v.a}} == \"{{v.a}}\"").unwrap();
        prop_assert!(c.evaluate(&s).unwrap());
    }

    #[test]
    fn a_ternary_picks_one_branch_in_conditions_and_templates(
        c in any::<bool>(), a in json_value(), b in json_value(),
    ) {
        let mut s = Map::new();
        s.insert("v".into(), json!({"c": c, "a": a.clone(), "b": b.clone()}));
        let want = if c { &a } else { &b };
        let t = Template::compile(&json!("{{ v.c ? v.a : v.b }}")).unwrap();
        prop_assert_eq!(&t.resolve(&s).unwrap(), want);
        // Nested to the right, and inside a condition.
        let t = Template::compile(&json!("{{ v.c ? v.a : not v.c ? v.b : null }}")).unwrap();
        prop_assert_eq!(&t.resolve(&s).unwrap(), want);
        let cond = Condition::compile("({{v.c}} ? {{v.a}} : {{v.b}}) == {{v.b}}").unwrap();
        prop_assert_eq!(cond.evaluate(&s).unwrap(), !c || a == b || json_equal_numbers(&a, &b));
    }

    #[test]
    fn coalesce_and_concat_functions_match_their_operator_forms(
        values in prop::collection::vec(json_value(), 0..5),
    ) {
        let mut s = Map::new();
        let names: Vec<String> = (0..values.len()).map(|i| format!("v.x{i}")).collect();
        let mut v = Map::new();
        for (i, value) in values.iter().enumerate() {
            v.insert(format!("x{i}"), value.clone());
        }
        s.insert("v".into(), Value::Object(v));
        let holes: Vec<Value> = names.iter().map(|n| json!(format!("{{{{{n}}}}}"))).collect();
        for op in ["coalesce", "concat"] {
            let as_function = Template::compile(&json!(format!("{{{{ {op}({}) }}}}", names.join(", "))))
                .unwrap()
                .resolve(&s);
            let as_operator = Template::compile(&json!({op: holes.clone()})).unwrap().resolve(&s);
            match (as_function, as_operator) {
                (Ok(f), Ok(o)) => prop_assert_eq!(f, o, "{}", op),
                // Too deep a value is refused by either form alike.
                (Err(_), Err(_)) => {}
                (f, o) => prop_assert!(false, "{}: {:?} vs {:?}", op, f, o),
            }
        }
    }

    #[test]
    fn integers_compare_like_integers(x in any::<i64>(), y in any::<i64>()) {
        let mut s = Map::new();
        s.insert("v".into(), json!({"x": x, "y": y, "ys": y.to_string()}));
        let check = |text: &str, expected: bool| -> Result<(), TestCaseError> {
            prop_assert_eq!(Condition::compile(text).unwrap().evaluate(&s).unwrap(), expected, "{}", text);
            Ok(())
        };
        check("{{v.x}} < {{v.y}}", x < y)?;
        check("{{v.x}} == {{v.y}}", x == y)?;
        check("{{v.x}} >= {{v.ys}}", x as f64 >= y as f64)?;
        check("{{v.ys}} == {{v.y}}", false)?;
        check(&format!("{{{{v.x}}}} == {x}"), true)?;
    }
}

/// Whether two values are equal as the language compares them (numbers by value), for the
/// cases where `==` on JSON values says otherwise.
fn json_equal_numbers(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| p == q || json_equal_numbers(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| p == q || json_equal_numbers(p, q)))
        }
        _ => false,
    }
}
