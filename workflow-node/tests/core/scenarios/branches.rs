//! Conditional and switch nodes.

use super::*;

pub(crate) const BRANCHY: &str = r#"
name: Branchy
workflow:
  description: d
  nodes:
    - id: check
      type: conditional
      condition: "'{{workflow.input.label}}' == \"it's\""
      true_branch: yes
      false_branch: no
    - {id: yes, type: agent, agent_name: Echo, depends_on: [check], input: {side: yes}}
    - {id: no, type: agent, agent_name: Echo, depends_on: [check], input: {side: no}}
    - id: merge
      type: agent
      agent_name: Echo
      depends_on: [yes, no]
      input: {side: {coalesce: ["{{yes.output.side}}", "{{no.output.side}}"]}}
  output_mapping: {side: "{{merge.output.side}}"}
"#;

#[test]
fn a_conditional_over_a_value_with_a_quote_takes_one_branch_and_the_merge_runs() {
    let w = wf(BRANCHY);
    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"label": "it's"}));
    assert_eq!(out.status, Some(RunStatus::Success), "{:?}", out.error);
    assert_eq!(status(&sim, "yes"), NodeStatus::Success);
    assert_eq!(status(&sim, "no"), NodeStatus::Skipped);
    assert_eq!(out.output, Some(json!({"side": "yes"})));

    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"label": "other"}));
    assert_eq!(status(&sim, "yes"), NodeStatus::Skipped);
    assert_eq!(out.output, Some(json!({"side": "no"})));
}

const SWITCH: &str = r#"
name: Switchy
workflow:
  description: d
  nodes:
    - id: route
      type: switch
      cases:
        - {when: "{{workflow.input.n}} < 10", then: small}
        - {when: "{{workflow.input.n}} < 100", then: medium}
      DEFAULT
    - {id: small, type: agent, agent_name: Echo, depends_on: [route]}
    - {id: medium, type: agent, agent_name: Echo, depends_on: [route]}
    - {id: large, type: agent, agent_name: Echo, depends_on: [route]}
  output_mapping: {n: {coalesce: ["{{small.output.n}}", "{{medium.output.n}}", "{{large.output.n}}"]}}
"#;

#[test]
fn a_switch_takes_the_first_matching_case_or_the_default() {
    let w = wf(&SWITCH.replace("DEFAULT", "default: large"));
    for (n, taken) in [(5, "small"), (50, "medium"), (500, "large")] {
        let mut sim = Sim::new(&w).agent("Echo", echo);
        let out = sim.run(json!({"n": n}));
        assert_eq!(out.output, Some(json!({"n": n})));
        for node in ["small", "medium", "large"] {
            let want = if node == taken {
                NodeStatus::Success
            } else {
                NodeStatus::Skipped
            };
            assert_eq!(status(&sim, node), want, "n={n} node={node}");
        }
    }
}

#[test]
fn a_switch_without_match_or_default_skips_every_target_and_the_run_ends_once() {
    // Without a default, `large` is no target of the switch: it just depends on it.
    let w = wf(&SWITCH.replace("DEFAULT", ""));
    let mut sim = Sim::new(&w).agent("Echo", echo);
    let out = sim.run(json!({"n": 1000}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(
        out.finishes, 1,
        "a run whose last node is skipped ends exactly once"
    );
    assert_eq!(status(&sim, "small"), NodeStatus::Skipped);
    assert_eq!(status(&sim, "medium"), NodeStatus::Skipped);
    assert_eq!(dispatched(&sim), vec!["large"]);
    assert_eq!(out.output, Some(json!({"n": 1000})));
}
