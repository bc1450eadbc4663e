//! Fork and join nodes.

use super::*;

const FORK: &str = r#"
name: F
workflow:
  description: d
  nodes:
    - id: f
      type: fork
      fail_fast: FF
      branches:
        - {id: one, agent_name: A, input: {n: 1}, output_key: first}
        - {id: two, agent_name: B, input: {n: 2}, output_key: second}
  output_mapping: {all: "{{f.output}}"}
"#;

#[test]
fn a_fork_merges_branch_outputs_by_output_key() {
    let w = wf(&FORK.replace("FF", "true"));
    let out = Sim::new(&w)
        .agent("A", echo)
        .agent("B", echo)
        .run(json!({}));
    assert_eq!(
        out.output,
        Some(json!({"all": {"first": {"n": 1}, "second": {"n": 2}}}))
    );
}

#[test]
fn fork_fail_fast_cancels_the_other_branches_and_without_it_waits_for_all() {
    let w = wf(&FORK.replace("FF", "true"));
    let mut sim = Sim::new(&w)
        .agent("A", |_| Reply::fail("a broke"))
        .agent("B", |_| Reply::silence());
    let out = sim.run(json!({}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("branch 'one': agent 'A' failed: a broke"));
    assert!(sim
        .commands
        .iter()
        .any(|c| matches!(c, Command::CancelCall { agent, .. } if agent == "B")));

    let w = wf(&FORK.replace("FF", "false"));
    let mut sim = Sim::new(&w)
        .agent("A", |_| Reply::fail("a broke"))
        .agent("B", |_| Reply::ok(json!({})).after(ms(500)));
    let start = sim.now;
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert_eq!(
        sim.now.0 - start.0,
        500,
        "the fork waited for the slow branch"
    );
    assert!(!sim
        .commands
        .iter()
        .any(|c| matches!(c, Command::CancelCall { .. })));
}

fn join_wf(strategy: &str) -> Workflow {
    wf(&format!(
        r#"
name: J
workflow:
  description: d
  nodes:
    - {{id: fast, type: agent, agent_name: Fast}}
    - {{id: mid, type: agent, agent_name: Mid}}
    - {{id: slow, type: agent, agent_name: Slow}}
    - {{id: j, type: join, depends_on: [fast, mid, slow], wait_for: [fast, mid, slow], {strategy}}}
    - {{id: after, type: agent, agent_name: Fast, depends_on: [j], input: {{}}}}
  output_mapping: {{j: "{{{{j.output}}}}"}}
"#
    ))
}

fn join_sim(w: &Workflow) -> Sim<'_> {
    Sim::new(w)
        .agent("Fast", |_| Reply::ok(json!("f")).after(ms(10)))
        .agent("Mid", |_| Reply::ok(json!("m")).after(ms(20)))
        .agent("Slow", |_| Reply::ok(json!("s")).after(ms(1000)))
}

fn after_started_at(sim: &Sim<'_>) -> u64 {
    let start = sim.events[0].0;
    let d = sim.dispatches();
    let pos = d
        .iter()
        .position(|d| d.node_id == "after")
        .expect("after ran");
    // The dispatch deadline is start time + timeout (300 s default).
    d[pos].deadline.0 - 300_000 - start.0
}

#[test]
fn joins_fire_as_soon_as_their_strategy_is_met() {
    let w = join_wf("strategy: any");
    let mut sim = join_sim(&w);
    assert_eq!(sim.run(json!({})).status, Some(RunStatus::Success));
    assert_eq!(after_started_at(&sim), 10);

    let w = join_wf("strategy: n_of_m, n: 2");
    let mut sim = join_sim(&w);
    let out = sim.run(json!({}));
    assert_eq!(after_started_at(&sim), 20);
    assert_eq!(out.output, Some(json!({"j": {"fast": "f", "mid": "m"}})));

    let w = join_wf("strategy: all");
    let mut sim = join_sim(&w);
    sim.run(json!({}));
    assert_eq!(after_started_at(&sim), 1000);
}
