//! A condition, and a template string, compiled and evaluated against a small scope.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use workflow_expr::{Condition, Template, TemplateOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Value::Object(scope) = json!({
        "workflow": {"input": {"x": 1, "s": "it's", "l": [1, "a", null], "o": {"k": [2]}}},
        "a": {"output": {"status": "ok", "n": "7", "json": "{\"a\": [1]}"}},
        "_map_item": {"name": "n"},
    }) else {
        return;
    };
    if let Ok(c) = Condition::compile(text) {
        let _ = c.evaluate(&scope);
        let _ = (c.problems(), c.literal_comparisons());
    }
    for arithmetic in [false, true] {
        let options = TemplateOptions { arithmetic };
        if let Ok(t) = Template::compile_with(&Value::String(text.to_string()), options) {
            let _ = t.resolve(&scope);
        }
        // The same text as an expression inside one hole (`{{ a ? b : c }}`).
        let hole = Value::String(format!("{{{{{text}}}}}"));
        if let Ok(t) = Template::compile_with(&hole, options) {
            let _ = t.resolve(&scope);
            let _ = (t.problems(), t.literal_comparisons());
        }
    }
});
