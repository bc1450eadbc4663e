//! Properties of defaults from schemas over random nested schemas and
//! values: completing is idempotent, never changes what a value gives, fills in every
//! property with a default, and a value completed from nothing by valid defaults is valid.

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use workflow_node::definition::Schema;

/// A schema of nested objects whose leaves are typed and may have a default of their type.
fn schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        (any::<bool>(), any::<i32>()).prop_map(|(d, n)| if d {
            json!({"type": "integer", "default": n})
        } else {
            json!({"type": "integer"})
        }),
        (any::<bool>(), "[a-z]{0,6}").prop_map(|(d, s)| if d {
            json!({"type": "string", "default": s})
        } else {
            json!({"type": "string"})
        }),
        Just(
            json!({"type": "array", "items": {"type": "object", "properties": {"w": {"type": "integer", "default": 0}}}})
        ),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        (
            prop::collection::btree_map("[a-e]", inner, 0..5),
            any::<bool>(),
        )
            .prop_map(|(props, with_default)| {
                let mut s = json!({"type": "object", "properties": Value::Object(props.into_iter().collect())});
                if with_default {
                    s["default"] = json!({});
                }
                s
            })
    })
}

/// A value that may or may not give each property (and puts arrays where the schema says).
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::String),
        Just(Value::Null),
        prop::collection::vec(Just(json!({})), 0..3).prop_map(Value::Array),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop::collection::btree_map("[a-e]", inner, 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
    })
}

/// Whether `completed` keeps everything `given` gives (members may be added, never changed
/// or removed; arrays keep their length).
fn keeps(given: &Value, completed: &Value) -> bool {
    match (given, completed) {
        (Value::Object(g), Value::Object(c)) => {
            g.iter().all(|(k, v)| c.get(k).is_some_and(|w| keeps(v, w)))
        }
        (Value::Array(g), Value::Array(c)) => {
            g.len() == c.len() && g.iter().zip(c).all(|(v, w)| keeps(v, w))
        }
        _ => given == completed,
    }
}

proptest! {
    #[test]
    fn completing_is_idempotent_and_keeps_what_is_given(source in schema(), given in value()) {
        let schema = Schema::compile(&source).expect("a valid schema");
        let mut once = given.clone();
        schema.apply_defaults(&mut once);
        let mut twice = once.clone();
        schema.apply_defaults(&mut twice);
        prop_assert_eq!(&once, &twice);
        if !given.is_null() {
            prop_assert!(keeps(&given, &once), "{} -> {}", given, once);
        }
    }

    #[test]
    fn every_property_with_a_default_is_filled_and_the_result_is_valid(source in schema()) {
        prop_assume!(source["type"] == "object");
        let schema = Schema::compile(&source).expect("a valid schema");
        let mut completed = json!({});
        schema.apply_defaults(&mut completed);
        if let Some(Value::Object(props)) = source.get("properties") {
            for (name, prop) in props {
                if prop.get("default").is_some() {
                    prop_assert!(completed.get(name).is_some(), "{} missing in {}", name, completed);
                }
            }
        }
        prop_assert!(schema.violations_as_is(&completed).is_empty(), "{}", completed);
    }
}
