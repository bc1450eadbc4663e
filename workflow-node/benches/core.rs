//! criterion benchmarks of the core: the cost of `apply` for one event must not grow with
//! the size of the workflow. One agent result on a 10-node and a 1,000-node DAG (wide: every
//! node running at once; chain: the middle node of a chain), and one item result in a
//! 100-item and a 10,000-item map. States are built with the simulator and cloned per
//! iteration (outside the timing); the state is dropped outside the timing too.
//!
//! `cargo bench -p workflow-node --bench core -- --quick`

use std::hint::black_box;

use criterion::{criterion_main, BatchSize, BenchmarkId, Criterion};
use serde_json::{json, Value};
use workflow_node::core::sim::{Reply, Sim};
use workflow_node::core::{apply, Event, Execution, Millis, RunStatus, Slot, TaskKey};
use workflow_node::definition::{parse_str, Workflow};

fn load(yaml: &str) -> Workflow {
    parse_str(yaml, "bench.yaml").unwrap_or_else(|p| panic!("invalid bench workflow: {p:?}"))
}

/// `n` independent agent nodes (all roots, all dispatched at start).
fn wide(n: usize) -> Workflow {
    let mut yaml = String::from("name: Wide\nworkflow:\n  description: d\n  nodes:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "    - {{id: n{i}, type: agent, agent_name: A, input: {{i: {i}}}}}\n"
        ));
    }
    yaml.push_str("  output_mapping: {last: \"{{n0.output}}\"}\n");
    load(&yaml)
}

/// A chain `n0 -> n1 -> ... -> n{n-1}`.
fn chain(n: usize) -> Workflow {
    let mut yaml = String::from("name: Chain\nworkflow:\n  description: d\n  nodes:\n");
    yaml.push_str("    - {id: n0, type: agent, agent_name: A}\n");
    for i in 1..n {
        yaml.push_str(&format!(
            "    - {{id: n{i}, type: agent, agent_name: A, depends_on: [n{}]}}\n",
            i - 1
        ));
    }
    yaml.push_str(&format!(
        "  output_mapping: {{last: \"{{{{n{}.output}}}}\"}}\n",
        n - 1
    ));
    load(&yaml)
}

/// A map over `workflow.input.xs`.
fn map(max_items: usize) -> Workflow {
    load(&format!(
        r#"
name: Map
workflow:
  description: d
  nodes:
    - {{id: m, type: map, node: each, items: "{{{{workflow.input.xs}}}}", max_items: {max_items}}}
    - {{id: each, type: agent, agent_name: A, input: {{x: "{{{{_map_item}}}}"}}}}
  output_mapping: {{results: "{{{{m.output.results}}}}"}}
"#
    ))
}

/// Runs `w` on the simulator for `events` events (agents answer at once up to `answered`
/// calls, then stay silent) and returns the state with the time.
fn state_after(w: &Workflow, input: Value, answered: usize, events: usize) -> (Execution, Millis) {
    let mut calls = 0;
    let mut sim = Sim::new(w).agent("A", move |d| {
        calls += 1;
        if calls <= answered {
            Reply::ok(d.input.clone())
        } else {
            Reply::silence()
        }
    });
    sim.check_replay = false;
    sim.max_events = events;
    sim.run(input);
    assert_eq!(sim.state.status, RunStatus::Running);
    (sim.state, sim.now)
}

fn result(task: TaskKey) -> Event {
    Event::CallSucceeded {
        task,
        attempt: 1,
        output: json!({"ok": true}),
    }
}

fn bench_one(
    c: &mut Criterion,
    group: &str,
    param: usize,
    w: &Workflow,
    state: &Execution,
    now: Millis,
    event: &Event,
) {
    // The event must be a live one: it changes the state.
    let mut probe = state.clone();
    let _ = apply(w, &mut probe, event.clone(), now);
    assert_ne!(
        &probe, state,
        "{group}/{param}: the benchmarked event is a no-op"
    );
    let mut g = c.benchmark_group(group);
    g.bench_with_input(BenchmarkId::from_parameter(param), &param, |b, _| {
        b.iter_batched(
            || (state.clone(), event.clone()),
            |(mut s, e)| {
                let commands = apply(w, &mut s, e, now);
                (s, black_box(commands))
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn agent_result(c: &mut Criterion) {
    for n in [10, 1000] {
        let w = wide(n);
        let (state, now) = state_after(&w, json!({}), 0, 1);
        let event = result(TaskKey::single(&format!("n{}", n / 2)));
        bench_one(c, "agent_result_wide", n, &w, &state, now, &event);

        let w = chain(n);
        // Started plus n/2 answers: n{n/2} is running.
        let (state, now) = state_after(&w, json!({}), n / 2, n / 2 + 1);
        let event = result(TaskKey::single(&format!("n{}", n / 2)));
        bench_one(c, "agent_result_chain", n, &w, &state, now, &event);
    }
}

fn map_item_result(c: &mut Criterion) {
    for n in [100, 10_000] {
        let w = map(n);
        let xs: Vec<usize> = (0..n).collect();
        let (state, now) = state_after(&w, json!({"xs": xs}), 0, 1);
        let task = TaskKey {
            node: "each".into(),
            slot: Slot::Item(n as u32 / 2),
        };
        bench_one(c, "map_item_result", n, &w, &state, now, &result(task));
    }
}

// The macro defines an undocumented `pub fn benches`.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::agent_result, super::map_item_result);
}
criterion_main!(group::benches);
