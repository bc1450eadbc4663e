//! Template and condition costs on the engine's hot path: a whole-template resolve, an
//! interpolated string, a coalesce, and a condition evaluate (all precompiled).

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::{json, Map, Value};
use workflow_expr::{Condition, Template};

fn scope() -> Map<String, Value> {
    let Value::Object(m) = json!({
        "workflow": {"input": {"customer": {"name": "Ann", "tier": "gold"}, "n": 7}},
        "fetch": {"output": {"status": "ok", "items": (0..100).collect::<Vec<_>>(),
                             "score": "7", "tags": ["x", "y", "z"]}},
        "_map_item": {"id": "item-1"},
    }) else {
        unreachable!("a JSON object literal")
    };
    m
}

fn templates(c: &mut Criterion) {
    let s = scope();
    let whole = Template::compile(&json!("{{fetch.output.status}}")).expect("compiles");
    c.bench_function("resolve whole template", |b| {
        b.iter(|| whole.resolve(black_box(&s)))
    });
    let text = Template::compile(&json!(
        "Customer {{workflow.input.customer.name}} ({{workflow.input.customer.tier}}) has {{workflow.input.n}} orders, status {{fetch.output.status}}"
    ))
    .expect("compiles");
    c.bench_function("resolve interpolated string", |b| {
        b.iter(|| text.resolve(black_box(&s)))
    });
    let coalesce = Template::compile(&json!({"coalesce": [
        "{{missing.output.x}}", "{{workflow.input.absent}}", "{{_map_item.id}}", "default"
    ]}))
    .expect("compiles");
    c.bench_function("resolve coalesce", |b| {
        b.iter(|| coalesce.resolve(black_box(&s)))
    });
    let condition = Condition::compile(
        "{{fetch.output.status}} == 'ok' and {{fetch.output.score}} > 5 and length({{fetch.output.items}}) > 0 and {{workflow.input.customer.tier}} in ['gold', 'platinum']",
    )
    .expect("compiles");
    c.bench_function("evaluate condition", |b| {
        b.iter(|| condition.evaluate(black_box(&s)))
    });
}

criterion_group!(benches, templates);
criterion_main!(benches);
