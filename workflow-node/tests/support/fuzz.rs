//! Shared by the fuzzing tests (`core::fuzz_events`, `definition::fuzz_definitions`): how
//! many cases run, JSON values to generate, and random mutations of a JSON document
//! (replace, remove or add at any location).

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};

/// Cases per property: `FUZZ_CASES`, or `default` (what a plain `cargo test` runs).
pub(crate) fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}

/// `depth` levels of arrays around `1`.
pub(crate) fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = json!([v]);
    }
    v
}

/// Any small JSON value.
pub(crate) fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every location in `v`, as JSON pointers (found without recursion).
pub(crate) fn pointers(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), v)];
    while let Some((at, v)) = stack.pop() {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    let k = k.replace('~', "~0").replace('/', "~1");
                    stack.push((format!("{at}/{k}"), c));
                }
            }
            Value::Array(items) => {
                for (i, c) in items.iter().enumerate() {
                    stack.push((format!("{at}/{i}"), c));
                }
            }
            _ => {}
        }
        out.push(at);
    }
    out
}

/// One change to a document, at a location picked among all of its locations.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    /// The value there becomes this one.
    Replace(Index, Value),
    /// The value there goes.
    Remove(Index),
    /// An object there gets this key (or a new value for it).
    AddKey(Index, String, Value),
}

/// Mutations whose new values come from `values` and new keys from `keys`.
pub(crate) fn mutation(
    keys: impl Strategy<Value = String> + Clone,
    values: impl Strategy<Value = Value> + Clone,
) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), values.clone()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        any::<Index>().prop_map(Mutation::Remove),
        (any::<Index>(), keys, values).prop_map(|(i, k, v)| Mutation::AddKey(i, k, v)),
    ]
}

/// Applies `m` to `doc`.
pub(crate) fn mutate(doc: &mut Value, m: &Mutation) {
    let at = |i: &Index| {
        let all = pointers(doc);
        all[i.index(all.len())].clone()
    };
    match m {
        Mutation::Replace(i, v) => {
            let p = at(i);
            if let Some(slot) = doc.pointer_mut(&p) {
                *slot = v.clone();
            }
        }
        Mutation::Remove(i) => {
            let p = at(i);
            let Some((parent, last)) = p.rsplit_once('/') else {
                return;
            };
            match doc.pointer_mut(parent) {
                Some(Value::Object(m)) => {
                    m.shift_remove(&last.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(items)) => {
                    if let Ok(n) = last.parse::<usize>() {
                        if n < items.len() {
                            items.remove(n);
                        }
                    }
                }
                _ => {}
            }
        }
        Mutation::AddKey(i, k, v) => {
            let p = at(i);
            if let Some(Value::Object(m)) = doc.pointer_mut(&p) {
                m.insert(k.clone(), v.clone());
            }
        }
    }
}
