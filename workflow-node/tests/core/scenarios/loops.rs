//! Loop nodes.

use super::*;

pub(crate) const LOOP: &str = r#"
name: L
workflow:
  description: d
  nodes:
    - id: poll
      type: loop
      node: check
      condition: "{{check.output.ready}} == false"
      max_iterations: MAX
      EXTRA
    - {id: check, type: agent, agent_name: Poller, input: {i: "{{_loop_iteration}}"}}
  output_mapping: {loop: "{{poll.output}}", last: "{{check.output.i}}"}
"#;

pub(crate) fn poller(ready_at: u64) -> impl FnMut(&workflow_node::core::Dispatch) -> Reply {
    move |d| {
        let i = d.input["i"].as_u64().unwrap();
        Reply::ok(json!({"ready": i >= ready_at, "i": i}))
    }
}

#[test]
fn a_loop_repeats_until_its_condition_is_false_and_its_inner_output_stays_addressable() {
    let w = wf(&LOOP.replace("MAX", "10").replace("EXTRA", ""));
    let out = Sim::new(&w).agent("Poller", poller(3)).run(json!({}));
    assert_eq!(
        out.output,
        Some(
            json!({"loop": {"iterations_completed": 4, "stopped_reason": "condition_false"}, "last": 3})
        )
    );
}

#[test]
fn a_loop_reaching_max_iterations_ends_and_succeeds_or_fails_as_told() {
    let w = wf(&LOOP.replace("MAX", "3").replace("EXTRA", ""));
    let mut sim = Sim::new(&w).agent("Poller", poller(100));
    let out = sim.run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(
        out.output.unwrap()["loop"],
        json!({"iterations_completed": 3, "stopped_reason": "max_iterations"})
    );
    assert_eq!(sim.dispatches().len(), 3);

    let w = wf(&LOOP
        .replace("MAX", "3")
        .replace("EXTRA", "on_iterations_exhausted: fail"));
    let out = Sim::new(&w).agent("Poller", poller(100)).run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Failure));
    assert!(out.error.unwrap().message.contains("max_iterations (3)"));
}

#[test]
fn a_loop_waits_its_delay_between_iterations() {
    let w = wf(&LOOP.replace("MAX", "10").replace("EXTRA", "delay: 5s"));
    let mut sim = Sim::new(&w).agent("Poller", poller(2));
    let start = sim.now.0;
    sim.run(json!({}));
    let at: Vec<u64> = sim
        .dispatches()
        .iter()
        .map(|d| d.deadline.0 - 300_000 - start)
        .collect();
    assert_eq!(at, vec![0, 5000, 10000]);
}
