//! Fuzzing of workflow definitions through the real parse and
//! validate path, in YAML and in JSON: arbitrary bytes, generated workflows (the property
//! tests' generator) mutated at random, nesting 100 000 deep, alias bombs, and every limit
//! a definition has. A file loads, or is refused with problems that each say what is
//! wrong; nothing panics.
//!
//! `cargo test` runs a bounded number of cases; `FUZZ_CASES=20000 cargo test -p
//! workflow-node --test fuzz_definitions` runs more.

use proptest::prelude::*;
use serde_json::{json, Value};
use workflow_node::definition::{parse_str, Problem};
use workflow_node::limits;

#[allow(dead_code)]
use crate::support::workflows;

use crate::support::fuzz::{config, mutate, mutation, nested};

/// Loads `text` as `origin`; a refusal must list problems, each with a message.
fn exercise(text: &str, origin: &str) -> Result<(), TestCaseError> {
    if let Err(problems) = parse_str(text, origin) {
        prop_assert!(!problems.is_empty(), "refused without a problem");
        for p in &problems {
            prop_assert!(p.message.trim().len() > 3, "unclear problem: {:?}", p);
            prop_assert!(!p.to_string().is_empty());
        }
    }
    Ok(())
}

/// The problems of `text`, displayed; empty when it loads.
fn problems(text: &str, origin: &str) -> Vec<String> {
    parse_str(text, origin)
        .err()
        .unwrap_or_default()
        .iter()
        .map(Problem::to_string)
        .collect()
}

/// A value that trips a parser or a check: wrong types, templates, limits.
fn tricky() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        Just(Value::Null),
        Just(json!(true)),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(1e300)),
        Just(json!(u64::MAX)),
        Just(json!([])),
        Just(json!({})),
        Just(json!("")),
        Just(json!("{{")),
        Just(json!("{{workflow.input.x}}")),
        Just(json!("{{nosuch.output.x}} == 1")),
        Just(json!("{{n0.output}}")),
        Just(json!({"coalesce": ["{{n0.output}}", 1]})),
        Just(json!({"concat": 3})),
        Just(json!("n0")),
        Just(json!("n1")),
        Just(json!(["n0", "n0"])),
        Just(json!("agent")),
        Just(json!("map")),
        Just(json!("loop")),
        Just(json!("5s")),
        Just(json!("-5s")),
        Just(json!("x".repeat(limits::MAX_EXPRESSION_LEN + 1))),
        Just(json!(format!("{{{{a.b}}}}{}", "(".repeat(200)))),
        Just(nested(limits::MAX_JSON_DEPTH + 1)),
        Just(json!({"type": "object", "properties": {"x": {"type": "nope"}}})),
        ".{0,12}".prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
    ]
}

/// Keys a definition has, and others.
fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        prop::sample::select(vec![
            "id",
            "type",
            "depends_on",
            "dependsOn",
            "input",
            "when",
            "max_items",
            "nodes"
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,12}",
    ]
}

/// The generated workflow as a JSON value.
fn generated() -> impl Strategy<Value = Value> {
    workflows::workflow_spec().prop_map(|spec| {
        let (yaml, _) = workflows::build(&spec);
        serde_yaml::from_str(&yaml).expect("the generator writes YAML")
    })
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        exercise(&text, "fuzz.yaml")?;
        exercise(&text, "fuzz.json")?;
    }

    /// The same document loads alike from YAML and JSON, with the same content hash.
    #[test]
    fn generated_workflows_load_alike_from_yaml_and_json(doc in generated()) {
        let yaml = serde_yaml::to_string(&doc).unwrap();
        let json = serde_json::to_string_pretty(&doc).unwrap();
        let a = parse_str(&yaml, "g.yaml");
        let b = parse_str(&json, "g.json");
        prop_assert!(a.is_ok(), "{:?}", a.err());
        prop_assert_eq!(a.unwrap().hash, b.unwrap().hash);
    }

    #[test]
    fn mutated_workflows(doc in generated(), mutations in prop::collection::vec(mutation(key(), tricky()), 1..4)) {
        let mut doc = doc;
        for m in &mutations {
            mutate(&mut doc, m);
        }
        let yaml = serde_yaml::to_string(&doc).unwrap();
        let json = serde_json::to_string(&doc).unwrap();
        exercise(&yaml, "m.yaml")?;
        exercise(&json, "m.json")?;
        // Both forms say the same.
        let a = problems(&yaml, "m.yaml").join("\n").replace("m.yaml: ", "");
        let b = problems(&json, "m.json").join("\n").replace("m.json: ", "");
        prop_assert_eq!(a, b);
    }

    #[test]
    fn truncated_workflows(doc in generated(), cut in any::<prop::sample::Index>()) {
        for (text, origin) in [
            (serde_yaml::to_string(&doc).unwrap(), "t.yaml"),
            (serde_json::to_string(&doc).unwrap(), "t.json"),
        ] {
            let mut at = cut.index(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            exercise(&text[..at], origin)?;
        }
    }
}

const DEEP: usize = 100_000;

#[test]
fn nesting_100_000_deep_is_refused() {
    let flow = format!("{}1{}", "[".repeat(DEEP), "]".repeat(DEEP));
    let map = format!("{}1{}", "{a: ".repeat(DEEP), "}".repeat(DEEP));
    let block = format!("{}1\n", "- ".repeat(DEEP));
    for (text, origin, want) in [
        (&flow, "d.json", "d.json: JSON syntax error at line 1, column 128: recursion limit exceeded (the file nests deeper than 128 levels)"),
        (&flow, "d.yaml", "d.yaml: YAML syntax error at line 1, column 129: '[' and '{' nest deeper than 128 levels"),
        (&map, "d.yaml", "d.yaml: YAML syntax error at line 1, column 513: '[' and '{' nest deeper than 128 levels"),
        (&block, "d.yaml", "d.yaml: YAML syntax error at line 1, column 257: recursion limit exceeded (the file nests deeper than 128 levels)"),
    ] {
        assert_eq!(problems(text, origin), [want], "{origin}");
    }
    // 128 levels pass the scan and the parser, and meet max_json_depth.
    let flow = format!("{}1{}", "[".repeat(128), "]".repeat(128));
    assert_eq!(
        problems(&flow, "d.yaml"),
        ["d.yaml: the nesting depth of the file exceeds max_json_depth (64)"]
    );
}

#[test]
fn a_document_deeper_than_max_json_depth_is_refused() {
    let mut doc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(example("echo.json")).unwrap()).unwrap();
    doc["workflow"]["skills"] = json!([{"id": "s", "name": "s", "x": nested(70)}]);
    let p = problems(&serde_json::to_string(&doc).unwrap(), "deep.json");
    assert_eq!(
        p,
        ["deep.json: the nesting depth of the file exceeds max_json_depth (64)"]
    );
}

fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/workflows")
        .join(name)
}

#[test]
fn yaml_alias_bombs_are_refused() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = i - 1;
        let refs = vec![format!("*a{prev}"); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let p = problems(&text, "bomb.yaml");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("repetition limit exceeded"), "{}", p[0]);
}

/// A chain of `n` agent nodes.
fn chain(n: usize) -> String {
    let mut nodes = String::new();
    for i in 0..n {
        let dep = if i == 0 {
            String::new()
        } else {
            format!(", depends_on: [n{}]", i - 1)
        };
        nodes.push_str(&format!(
            "    - {{id: n{i}, type: agent, agent_name: A{dep}}}\n"
        ));
    }
    format!("name: T\nworkflow:\n  description: d\n  output_mapping: {{}}\n  nodes:\n{nodes}")
}

#[test]
fn max_nodes() {
    assert!(parse_str(&chain(limits::MAX_NODES), "t.yaml").is_ok());
    assert_eq!(
        problems(&chain(limits::MAX_NODES + 1), "t.yaml"),
        ["t.yaml: workflow: nodes: 1001 nodes exceed max_nodes (1000)"]
    );
}

fn one_node(node: &str, extra: &str) -> String {
    format!(
        "name: T\n{extra}workflow:\n  description: d\n  output_mapping: {{}}\n  nodes:\n    - {node}\n    - {{id: e, type: agent, agent_name: E}}\n"
    )
}

#[test]
fn map_items_and_call_depth_have_ceilings() {
    let map = "{id: m, type: map, node: e, items: '{{workflow.input.xs}}', max_items: 1000001}";
    assert_eq!(
        problems(&one_node(map, ""), "t.yaml"),
        ["t.yaml: node 'm': max_items: 1000001 exceeds max_map_items (1000000)"]
    );
    let map = "{id: m, type: map, node: e, items: '{{workflow.input.xs}}'}";
    assert_eq!(
        problems(&one_node(map, "default_max_map_items: 2000000\n"), "t.yaml"),
        ["t.yaml: workflow: default_max_map_items: 2000000 exceeds max_map_items (1000000)"]
    );
    let ok = one_node(map, "default_max_map_items: 1000000\n");
    assert_eq!(
        parse_str(&ok, "t.yaml").unwrap().default_max_map_items,
        1_000_000
    );
    let looped =
        |n: u64| format!("{{id: l, type: loop, node: e, condition: 'true', max_iterations: {n}}}");
    assert_eq!(
        problems(&one_node(&looped(10_001), ""), "t.yaml"),
        ["t.yaml: node 'l': max_iterations: 10001 exceeds max_loop_iterations (10000)"]
    );
    assert!(parse_str(&one_node(&looped(10_000), ""), "t.yaml").is_ok());
    let deep = one_node("{id: a, type: agent, agent_name: A}", "")
        .replace("  nodes:", "  max_call_depth: 101\n  nodes:");
    assert_eq!(
        problems(&deep, "t.yaml"),
        ["t.yaml: workflow: max_call_depth: 101 exceeds the ceiling of max_call_depth (100)"]
    );
}

#[test]
fn template_and_condition_length_at_load() {
    let long = "x".repeat(limits::MAX_EXPRESSION_LEN);
    let node = format!(
        "{{id: a, type: agent, agent_name: A, input: {{v: '{long}{{{{workflow.input.x}}}}'}}}}"
    );
    assert_eq!(
        problems(&one_node(&node, ""), "t.yaml"),
        ["t.yaml: node 'a': input: template string length in bytes exceeds the limit of 16384"]
    );
    let node = format!("{{id: a, type: agent, agent_name: A, when: \"'{long}' == ''\"}}");
    assert_eq!(
        problems(&one_node(&node, ""), "t.yaml"),
        ["t.yaml: node 'a': when: condition length in bytes exceeds the limit of 16384"]
    );
}

/// A key of a megabyte is reported as unknown without being compared with every known
/// spelling (that cost its length times theirs, for each).
#[test]
fn huge_unknown_keys_are_reported() {
    let key = "k".repeat(1 << 20);
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(example("echo.json")).unwrap()).unwrap();
    for node in doc["workflow"]["nodes"].as_array_mut().unwrap() {
        node[&key] = json!(1);
    }
    let p = problems(&serde_json::to_string(&doc).unwrap(), "t.json");
    assert!(!p.is_empty());
    for p in p {
        assert!(p.contains(": unknown field 'kkk"), "{}", &p[..80]);
    }
}
