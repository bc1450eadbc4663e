//! Structural validation: unique ids, references, cycles, branch targets, joins, roles of
//! inner nodes and exit handlers, implicit inputs, the derived graph, and what templates may
//! name.

use workflow_node::definition::NodeRole;

use crate::support::definition::{assert_problems, doc, load, problems, problems_of};

#[test]
fn unique_ids() {
    let got =
        problems("- {id: a, type: agent, agent_name: E}\n- {id: a, type: agent, agent_name: F}\n");
    assert_problems(
        got,
        &["t.yaml: node 'a': id: duplicate id 'a': ids must be unique"],
    );
}

#[test]
fn dependencies_are_listed_once() {
    let got = problems(
        "- {id: a, type: agent, agent_name: E}\n- {id: b, type: agent, agent_name: E, depends_on: [a, a]}\n",
    );
    assert_problems(got, &["t.yaml: node 'b': depends_on: 'a' is listed twice"]);
}

#[test]
fn references_must_exist() {
    let got = problems_of(&doc(
        "\
- {id: a, type: agent, agent_name: E, depends_on: [ghost]}
- {id: c, type: conditional, condition: 'true', true_branch: nowhere, false_branch: nope}
- id: s
  type: switch
  cases: [{when: 'true', then: missing}]
  default: absent
- {id: m, type: map, withItems: [1], node: nobody}
- {id: l, type: loop, condition: 'true', node: noone}
- {id: j, type: join, depends_on: [a], wait_for: [a, zz]}
",
        "on_exit: {always: gone, on_failure: aa}",
    ));
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': depends_on: unknown node 'ghost'",
            "t.yaml: node 'c': true_branch: unknown node 'nowhere'",
            "t.yaml: node 'c': false_branch: unknown node 'nope'",
            "t.yaml: node 's': cases[0].then: unknown node 'missing'",
            "t.yaml: node 's': default: unknown node 'absent'",
            "t.yaml: node 'm': node: unknown node 'nobody'",
            "t.yaml: node 'l': node: unknown node 'noone'",
            "t.yaml: node 'j': wait_for: unknown node 'zz'",
            "t.yaml: workflow: on_exit.always: unknown node 'gone'",
            "t.yaml: workflow: on_exit.on_failure: unknown node 'aa' (did you mean 'a'?)",
        ],
    );
    assert_problems(
        problems_of(&doc(
            "- {id: a, type: agent, agent_name: E}\n",
            "on_exit: cleanup",
        )),
        &["t.yaml: workflow: on_exit: unknown node 'cleanup'"],
    );
}

#[test]
fn a_node_with_a_bad_type_is_not_reported_missing() {
    let got = problems(
        "- {id: a, type: robot}\n- {id: b, type: agent, agent_name: E, depends_on: [a]}\n",
    );
    assert_problems(
        got,
        &["t.yaml: node 'a': type: unknown node type 'robot' (expected one of: agent, workflow, conditional, switch, map, fork, join, loop, approval, wait)"],
    );
}

#[test]
fn cycles_are_printed() {
    let got = problems(
        "\
- {id: start, type: agent, agent_name: E}
- {id: a, type: agent, agent_name: E, depends_on: [c]}
- {id: b, type: agent, agent_name: E, depends_on: [a]}
- {id: c, type: agent, agent_name: E, depends_on: [b], input: {}}
- {id: s, type: agent, agent_name: E, depends_on: [s]}
",
    );
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': depends_on: dependency cycle: a -> b -> c -> a",
            "t.yaml: node 's': depends_on: dependency cycle: s -> s",
        ],
    );
}

#[test]
fn branch_targets_depend_on_their_branching_node() {
    let got = problems(
        "\
- {id: c, type: conditional, condition: 'true', true_branch: t, false_branch: f}
- {id: t, type: agent, agent_name: E, depends_on: [c]}
- {id: f, type: agent, agent_name: E}
- {id: s, type: switch, cases: [{when: 'true', then: x}], default: t}
- {id: x, type: agent, agent_name: E}
",
    );
    assert_problems(
        got,
        &[
            "t.yaml: node 'c': false_branch: branch target 'f' must list 'c' in its depends_on; otherwise 'f' would run immediately instead of waiting for the branch decision",
            "t.yaml: node 's': cases[0].then: branch target 'x' must list 's' in its depends_on; otherwise 'x' would run immediately instead of waiting for the branch decision",
            "t.yaml: node 's': default: branch target 't' must list 's' in its depends_on; otherwise 't' would run immediately instead of waiting for the branch decision",
        ],
    );
}

#[test]
fn join_waits_within_depends_on() {
    let got = problems(
        "\
- {id: a, type: agent, agent_name: E}
- {id: b, type: agent, agent_name: E}
- {id: j, type: join, depends_on: [a], wait_for: [a, b]}
",
    );
    assert_problems(
        got,
        &["t.yaml: node 'j': wait_for: 'b' is not in depends_on: a join can wait only for nodes it depends on"],
    );
}

#[test]
fn inner_nodes_must_be_calls_with_one_owner() {
    let got = problems(
        "\
- {id: m, type: map, withItems: [1], node: j}
- {id: j, type: join, wait_for: [m], depends_on: [m]}
- {id: m2, type: map, withItems: [1], node: e}
- {id: l, type: loop, condition: 'true', node: e}
- {id: e, type: agent, agent_name: E}
",
    );
    assert_problems(
        got,
        &[
            "t.yaml: node 'm': node: the inner node of a map must be an agent or workflow node, but 'j' is a join node",
            "t.yaml: node 'l': node: 'e' is already the inner node of 'm2'; a node can belong to only one map or loop",
            "t.yaml: node 'j': depends_on: 'm' is not upstream of 'm': the inner node of a map or loop may depend only on nodes its owner depends on",
        ],
    );
}

#[test]
fn an_inner_node_cannot_be_an_exit_handler() {
    let got = problems_of(&doc(
        "- {id: m, type: map, withItems: [1], node: e}\n- {id: e, type: agent, agent_name: E}\n",
        "on_exit: e",
    ));
    assert_problems(
        got,
        &["t.yaml: workflow: on_exit: 'e' is the inner node of 'm' and cannot also be an exit handler"],
    );
}

#[test]
fn who_may_depend_on_whom() {
    let got = problems_of(&doc(
        "\
- {id: a, type: agent, agent_name: E}
- {id: b, type: agent, agent_name: E}
- {id: m, type: map, depends_on: [a], withItems: [1], node: each}
- {id: each, type: agent, agent_name: E, depends_on: [b]}
- {id: after, type: agent, agent_name: E, depends_on: [each]}
- {id: late, type: agent, agent_name: E, depends_on: [cleanup]}
- {id: cleanup, type: agent, agent_name: E, depends_on: [each]}
",
        "on_exit: cleanup",
    ));
    assert_problems(
        got,
        &[
            "t.yaml: node 'each': depends_on: 'b' is not upstream of 'm': the inner node of a map or loop may depend only on nodes its owner depends on",
            "t.yaml: node 'after': depends_on: 'each' is the inner node of 'm' and runs only inside it; depend on 'm' instead",
            "t.yaml: node 'late': depends_on: 'cleanup' is an exit handler and runs only after the workflow ends; no node of the main DAG can depend on it",
            "t.yaml: node 'cleanup': depends_on: 'each' is not a node of the main DAG: an exit handler may depend only on main nodes",
        ],
    );
}

#[test]
fn ambiguous_implicit_input() {
    let got = problems(
        "\
- {id: a, type: agent, agent_name: E}
- {id: b, type: agent, agent_name: E}
- {id: c, type: agent, agent_name: E, depends_on: [a, b]}
- {id: d, type: workflow, workflow_name: W, depends_on: [a, b], input: {x: 1}}
",
    );
    assert_problems(
        got,
        &["t.yaml: node 'c': input: missing field: with 2 dependencies (a, b) the implicit input would be ambiguous; map the input explicitly"],
    );
}

#[test]
fn graph_roles_roots_and_order() {
    let w = load(&doc(
        "\
- {id: z, type: agent, agent_name: E, depends_on: [b]}
- {id: b, type: agent, agent_name: E}
- {id: a, type: agent, agent_name: E}
- {id: m, type: map, depends_on: [a], withItems: [1], node: each}
- {id: each, type: agent, agent_name: E}
- {id: done, type: agent, agent_name: E}
- {id: fail, type: agent, agent_name: E, depends_on: [a]}
",
        "on_exit: {always: done, on_failure: fail}",
    ));
    let g = &w.graph;
    assert_eq!(g.index["m"], 3);
    assert_eq!(g.roles[4], NodeRole::Inner { owner: 3 });
    assert_eq!(g.roles[5], NodeRole::ExitHandler);
    assert_eq!(g.roles[6], NodeRole::ExitHandler);
    assert_eq!(g.roles[0], NodeRole::Main);
    // Exit handlers without dependencies are not roots: they never run at start.
    assert_eq!(g.roots, vec![1, 2]);
    assert_eq!(g.topo_order, vec![1, 0, 2, 3]);
    assert_eq!(g.dependents[1], vec![0]);
    assert_eq!(g.dependents[2], vec![3, 6]);
    assert!(w.node("each").is_some());
}

#[test]
fn templates_name_only_upstream_nodes_and_valid_roots() {
    let got = problems_of(&doc(
        "\
- {id: a, type: agent, agent_name: E, input: {x: '{{workflow.input.x}}', y: '{{b.output.y}}'}}
- {id: b, type: agent, agent_name: E, depends_on: [a], input: {v: '{{a.output.v}}', w: '{{nobody.output}}'}}
- {id: c, type: agent, agent_name: E, depends_on: [b], when: '{{_map_item}} == 1', instruction: 'Do {{_loop_iteration}}'}
- {id: d, type: agent, agent_name: E, depends_on: [c], input: {s: '{{workflow.status}}', q: '{{workflow.foo}}'}}
",
        "output_mapping: {r: '{{d.output}}'}",
    ));
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': input: '{{b.output.y}}' names node 'b', which is not upstream of this node (add it to depends_on, directly or through another node)",
            "t.yaml: node 'b': input: '{{nobody.output}}' names unknown node 'nobody'",
            "t.yaml: node 'c': when: '{{_map_item}}' is available only in the inner node of a map",
            "t.yaml: node 'c': instruction: '{{_loop_iteration}}' is available only in the inner node of a loop and in the loop's condition",
            "t.yaml: node 'd': input: '{{workflow.status}}' is available only in exit handlers",
            "t.yaml: node 'd': input: '{{workflow.foo}}' names nothing: a template can use workflow.input, workflow.name, workflow.version (and workflow.status, workflow.error in exit handlers)",
        ],
    );
}

#[test]
fn templates_in_maps_loops_exit_handlers_and_output_mapping() {
    load(&doc(
        "\
- {id: a, type: agent, agent_name: E}
- {id: m, type: map, depends_on: [a], items: '{{a.output.list}}', node: each}
- {id: each, type: agent, agent_name: E, input: {i: '{{_map_item.x}}', n: '{{_map_index}}', a: '{{a.output.k}}'}}
- id: l
  type: loop
  depends_on: [m]
  node: body
  condition: '{{body.output.more}} == true && {{_loop_iteration}} < 3'
- {id: body, type: agent, agent_name: E, input: {prev: '{{body.output}}', it: '{{_loop_iteration}}', r: '{{m.output.results}}'}}
- {id: after, type: agent, agent_name: E, depends_on: [l], input: '{{body.output}}'}
- {id: report, type: agent, agent_name: E, input: {s: '{{workflow.status}}', e: '{{workflow.error.message}}', last: '{{after.output}}'}}
",
        "on_exit: report\noutput_mapping: {r: '{{after.output}}', b: '{{body.output}}', m: '{{m.output.results}}'}",
    ));
    let got = problems_of(&doc(
        "\
- {id: a, type: agent, agent_name: E}
- {id: m, type: map, withItems: [1], node: each}
- {id: each, type: agent, agent_name: E, input: {a: '{{a.output}}', i: '{{_loop_iteration}}'}}
",
        "output_mapping: {x: '{{each.output}}', y: '{{_map_item}}', s: '{{workflow.status}}'}",
    ));
    assert_problems(
        got,
        &[
            "t.yaml: node 'each': input: '{{a.output}}' names node 'a', which is not upstream of this node (add it to depends_on, directly or through another node)",
            "t.yaml: node 'each': input: '{{_loop_iteration}}' is available only in the inner node of a loop and in the loop's condition",
            "t.yaml: workflow: output_mapping: '{{each.output}}' names 'each', which is not a node of the main DAG",
            "t.yaml: workflow: output_mapping: '{{_map_item}}' is available only in the inner node of a map",
            "t.yaml: workflow: output_mapping: '{{workflow.status}}' is available only in exit handlers",
        ],
    );
}

#[test]
fn conditions_are_checked_like_templates() {
    let got = problems(
        "\
- {id: c, type: conditional, condition: '{{later.output.ok}} == true', true_branch: later}
- {id: later, type: agent, agent_name: E, depends_on: [c]}
- {id: l, type: loop, node: body, condition: '{{other.output.x}} > 1'}
- {id: body, type: agent, agent_name: E}
- {id: other, type: agent, agent_name: E}
",
    );
    assert_problems(
        got,
        &[
            "t.yaml: node 'c': condition: '{{later.output.ok}}' names node 'later', which is not upstream of this node (add it to depends_on, directly or through another node)",
            "t.yaml: node 'l': condition: '{{other.output.x}}' names node 'other', which is not upstream of this node (add it to depends_on, directly or through another node)",
        ],
    );
}

#[test]
fn bad_templates_and_conditions_do_not_parse() {
    let got = problems(
        "- {id: a, type: agent, agent_name: E, input: {x: '{{workflow.input.x'}, when: '{{a.output}} =='}\n",
    );
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(got[0].starts_with("t.yaml: node 'a': when: "), "{got:#?}");
    assert!(got[1].starts_with("t.yaml: node 'a': input: "), "{got:#?}");
}

#[test]
fn all_problems_at_once() {
    let got = problems(
        "\
- {id: a, type: agent, agent_name: E, retryStratgy: {}}
- {id: b, type: agent, agent_name: E, depends_on: [ghost]}
- {id: c, type: agent, agent_name: E, timeout: -5}
- {id: d, type: agent, agent_name: E, depends_on: [e], input: {}}
- {id: e, type: agent, agent_name: E, depends_on: [d], input: {}}
- {id: f, type: join, depends_on: [a], wait_for: [a], strategy: n_of_m, n: 2}
",
    );
    assert_eq!(got.len(), 5, "{got:#?}");
}
