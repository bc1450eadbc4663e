//! Map nodes.

use super::*;

fn map_wf(items: &str, extra: &str) -> Workflow {
    wf(&format!(
        r#"
name: M
workflow:
  description: d
  nodes:
    - {{id: m, type: map, node: each, {items} {extra}}}
    - {{id: each, type: agent, agent_name: Slow, input: {{x: "{{{{_map_item}}}}", i: "{{{{_map_index}}}}"}}}}
  output_mapping: {{results: "{{{{m.output.results}}}}"}}
"#
    ))
}

#[test]
fn a_map_keeps_item_order_and_respects_its_concurrency_limit() {
    let w = map_wf("items: \"{{workflow.input.xs}}\"", ", concurrency_limit: 3");
    // Later items answer sooner, so completion order is the reverse of item order.
    let mut sim = Sim::new(&w).agent("Slow", |d| {
        let x = d.input["x"].as_u64().unwrap();
        Reply::ok(json!(x * 10)).after(ms(1000 - x * 10))
    });
    let xs: Vec<u64> = (0..10).collect();
    let out = sim.run(json!({"xs": xs}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let want: Vec<u64> = xs.iter().map(|x| x * 10).collect();
    assert_eq!(out.output, Some(json!({"results": want})));
    assert_eq!(sim.max_running, 3);
    let progress = sim
        .commands
        .iter()
        .filter(|c| matches!(c, Command::Progress(Progress::MapProgress { .. })))
        .count();
    assert_eq!(progress, 10);
}

#[test]
fn a_map_over_an_empty_list_succeeds_with_no_results() {
    let w = map_wf("items: \"{{workflow.input.xs}}\"", "");
    let mut sim = Sim::new(&w).agent("Slow", echo);
    let out = sim.run(json!({"xs": []}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(out.output, Some(json!({"results": []})));
    // A missing list is null, which is empty too.
    let out = Sim::new(&w).agent("Slow", echo).run(json!({}));
    assert_eq!(out.output, Some(json!({"results": []})));
}

#[test]
fn with_items_maps_a_literal_list() {
    let w = map_wf("withItems: [a, b]", "");
    let mut sim = Sim::new(&w).agent("Slow", |d| Reply::ok(d.input.clone()));
    let out = sim.run(json!({}));
    assert_eq!(
        out.output,
        Some(json!({"results": [{"x": "a", "i": 0}, {"x": "b", "i": 1}]}))
    );
}

#[test]
fn a_map_fails_on_too_many_items_a_non_list_or_one_failed_item() {
    let w = map_wf("withParam: \"{{workflow.input.xs}}\"", ", max_items: 2");
    let out = Sim::new(&w)
        .agent("Slow", echo)
        .run(json!({"xs": [1, 2, 3]}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("3 items exceed max_items (2)"));
    let out = Sim::new(&w).agent("Slow", echo).run(json!({"xs": "nope"}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("resolved to a string, expected an array"));

    let w = map_wf("items: \"{{workflow.input.xs}}\"", "");
    let mut sim = Sim::new(&w).agent("Slow", |d| {
        if d.input["x"] == json!(2) {
            Reply::fail("bad item").after(ms(5))
        } else {
            Reply::silence()
        }
    });
    let out = sim.run(json!({"xs": [1, 2, 3]}));
    let err = out.error.unwrap();
    assert!(
        err.message.contains("item 1 failed") && err.message.contains("bad item"),
        "{}",
        err.message
    );
    let cancels = sim
        .commands
        .iter()
        .filter(|c| matches!(c, Command::CancelCall { .. }))
        .count();
    assert_eq!(cancels, 2, "the other items are cancelled");
}
