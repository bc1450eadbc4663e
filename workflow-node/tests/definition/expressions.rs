//! What `validate` tells about expressions: node statuses, run and
//! workflow metadata, ternaries and functions load; unknown functions, wrong arities,
//! unknown nodes and fields, a status compared with a string that is no status, and a
//! function applied to literals it fails on are each a problem, all reported at once.

use crate::support::definition::{assert_problems, doc, load, problems_of};

#[test]
fn statuses_metadata_ternaries_and_functions_load() {
    load(&doc(
        "\
- {id: a, type: agent, agent_name: E, input: {run: '{{run.id}}', at: '{{run.started_at}}', wf: '{{workflow.name}}@{{workflow.version}}'}}
- id: b
  type: agent
  agent_name: E
  depends_on: [a]
  when: \"{{a.status}} == 'success' and length(coalesce({{a.output.items}}, [])) > 0\"
  input:
    label: \"{{ a.status == 'success' ? 'ok' : 'not ok' }}\"
    n: '{{ length(a.output.items) }}'
    text: '{{ toJSON(a.output) }}'
    parsed: '{{ fromJSON(a.output.json) }}'
    has: \"{{ contains(a.output.tags, 'x') }}\"
    first: '{{ coalesce(a.output.x, a.output.y, 0) }}'
    all: '{{ concat(a.output.items, [1]) }}'
    why: '{{a.error}}'
- {id: report, type: agent, agent_name: E, input: {ok: \"{{ workflow.status == 'success' ? b.status : 'failure' }}\"}}
",
        "on_exit: report\noutput_mapping: {s: '{{b.status}}', r: \"{{ b.status in ['success', 'skipped'] }}\"}",
    ));
}

#[test]
fn a_node_named_run_keeps_its_name() {
    load(&doc(
        "\
- {id: run, type: agent, agent_name: E}
- {id: b, type: agent, agent_name: E, depends_on: [run], input: {x: '{{run.output.x}}', s: '{{run.status}}'}}
",
        "",
    ));
    let got = problems_of(&doc(
        "\
- {id: run, type: agent, agent_name: E}
- {id: b, type: agent, agent_name: E, depends_on: [run], input: {x: '{{run.id}}'}}
",
        "",
    ));
    assert_problems(
        got,
        &["t.yaml: node 'b': input: '{{run.id}}' names no field of node 'run': a node has output, status and error (its output's fields are under output, as in {{run.output.x}})"],
    );
}

#[test]
fn every_problem_of_every_expression_is_reported_at_once() {
    let got = problems_of(&doc(
        "\
- {id: a, type: agent, agent_name: E}
- {id: b, type: agent, agent_name: E, depends_on: [a], when: \"lenght({{a.output.items}}) > 0\"}
- {id: c, type: agent, agent_name: E, depends_on: [a], when: \"contains({{a.output.items}}) == true\"}
- {id: d, type: agent, agent_name: E, depends_on: [a], when: \"{{a.status}} == 'sucess'\", input: {x: '{{a.result}}', y: '{{nobody.output}}', z: '{{run.owner}}'}}
- {id: e, type: agent, agent_name: E, depends_on: [a], when: \"{{a.status}} in ['success', 'done'] or {{a.status}} != 1\"}
- {id: f, type: agent, agent_name: E, depends_on: [a], input: {n: '{{ length(5) }}', s: '{{a.status.code}}'}, instruction: '{{ size(a.output) }}'}
- {id: g, type: agent, agent_name: E, depends_on: [a], input: {t: \"{{ a.status == 'succeeded' ? 1 : 2 }}\"}, instruction: '{{ true ? 1 }}'}
",
        "on_exit: h\noutput_mapping: {v: '{{workflow.nme}}'}",
    )
    .replace("nodes:\n", "nodes:\n    - {id: h, type: agent, agent_name: E, when: \"{{workflow.status}} == 'failed'\"}\n"));
    assert_problems(
        got,
        &[
            "t.yaml: node 'b': when: cannot parse condition 'lenght({{a.output.items}}) > 0': unknown function 'lenght' (the functions are length, contains, toJSON, fromJSON, coalesce, concat)",
            "t.yaml: node 'c': when: cannot parse condition 'contains({{a.output.items}}) == true': contains() takes 2 arguments, got 1",
            "t.yaml: node 'f': instruction: cannot parse template '{{ size(a.output) }}': unknown function 'size' (the functions are length, contains, toJSON, fromJSON, coalesce, concat)",
            "t.yaml: node 'g': instruction: cannot parse template '{{ true ? 1 }}': a '?' has no ':' after it (write a ? b : c)",
            "t.yaml: node 'h': when: '{{workflow.status}}' is compared with 'failed', which is not a status (statuses: success, failure, cancelled, timed_out)",
            "t.yaml: node 'd': when: '{{a.status}}' is compared with 'sucess', which is not a status (did you mean 'success'?)",
            "t.yaml: node 'd': input: '{{a.result}}' names no field of node 'a': a node has output, status and error (its output's fields are under output, as in {{a.output.x}})",
            "t.yaml: node 'd': input: '{{nobody.output}}' names unknown node 'nobody'",
            "t.yaml: node 'd': input: '{{run.owner}}' names nothing: the run has run.id and run.started_at",
            "t.yaml: node 'e': when: '{{a.status}}' is compared with 'done', which is not a status (statuses: pending, running, waiting, success, failure, skipped, cancelled, timed_out)",
            "t.yaml: node 'e': when: '{{a.status}}' is compared with 1, but a status is a string (pending, running, waiting, success, failure, skipped, cancelled, timed_out)",
            "t.yaml: node 'f': input: '{{a.status.code}}': a node's status is a string, with nothing inside it",
            "t.yaml: node 'f': input: length() always fails here: length() of a number (5)",
            "t.yaml: node 'g': input: '{{a.status}}' is compared with 'succeeded', which is not a status (statuses: pending, running, waiting, success, failure, skipped, cancelled, timed_out)",
            "t.yaml: workflow: output_mapping: '{{workflow.nme}}' names nothing: a template can use workflow.input, workflow.name, workflow.version (and workflow.status, workflow.error in exit handlers)",
        ],
    );
}

#[test]
fn a_default_that_its_own_schema_rejects_is_a_problem() {
    let got = problems_of(&doc(
        "- {id: a, type: agent, agent_name: E, output_schema_override: {type: object, properties: {c: {type: number, default: high}}}}",
        "input_schema: {type: object, properties: {mode: {enum: [fast, careful], default: slow}, o: {type: object, default: {}, properties: {n: {type: integer, default: 1}}}}}",
    ));
    assert_problems(
        got,
        &[
            "t.yaml: workflow: input_schema: the default at /properties/mode/default does not match its schema: \"slow\" is not one of \"fast\" or \"careful\"",
            "t.yaml: node 'a': output_schema_override: the default at /properties/c/default does not match its schema: \"high\" is not of type \"number\"",
        ],
    );
}
