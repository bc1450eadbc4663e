//! Reading workflow files: shapes, defaults, snake_case and camelCase keys, aliases, unknown
//! keys, wrong types, and the file-level settings.

use std::time::Duration;

use workflow_node::definition::{
    parse_str, CallTarget, JoinStrategy, MapItems, NodeKind, OnExhausted, OnTimeout, RetryPolicy,
};

use crate::support;
use crate::support::definition::{assert_problems, doc, load, problems, problems_of};

const AGENT: &str = "- id: a\n  type: agent\n  agent_name: Echo\n";

#[test]
fn file_defaults() {
    let w = load(&doc(AGENT, ""));
    assert_eq!(w.name, "T");
    assert_eq!(w.display_name, None);
    assert_eq!(w.max_execution_time, Duration::from_secs(1800));
    assert_eq!(w.default_node_timeout, Duration::from_secs(300));
    assert_eq!(w.default_max_map_items, 100);
    assert_eq!(w.version, "1.0.0");
    assert!(w.fail_fast);
    assert_eq!(w.max_call_depth, 10);
    assert!(w.retry_strategy.is_none());
    assert_eq!(w.concurrency, None);
    assert!(w.input_schema.is_none());
    assert_eq!(w.on_exit, Default::default());
}

#[test]
fn file_settings_are_read() {
    let text = format!(
        "name: Orders\ndisplay_name: Order processing\nmax_workflow_execution_time_seconds: 60\ndefault_node_timeout_seconds: 2.5\ndefault_max_map_items: 7\nworkflow:\n  description: d\n  version: \"2.0\"\n  output_mapping: {{}}\n  fail_fast: false\n  max_call_depth: 3\n  concurrency: 4\n  nodes:\n{}\n",
        support::definition::indent(AGENT, 4)
    );
    let w = load(&text);
    assert_eq!(w.display_name.as_deref(), Some("Order processing"));
    assert_eq!(w.max_execution_time, Duration::from_secs(60));
    assert_eq!(w.default_node_timeout, Duration::from_millis(2500));
    assert_eq!(w.default_max_map_items, 7);
    assert_eq!(w.version, "2.0");
    assert!(!w.fail_fast);
    assert_eq!(w.max_call_depth, 3);
    assert_eq!(w.concurrency, Some(4));
}

#[test]
fn retry_strategy_defaults() {
    let w = load(&doc(AGENT, "retry_strategy: {}"));
    let r = w.retry_strategy.expect("a workflow retry strategy");
    assert_eq!(r.limit, 3);
    assert_eq!(r.policy, RetryPolicy::Always);
    assert_eq!(r.backoff.duration, Duration::from_secs(1));
    assert_eq!(r.backoff.factor, 2.0);
    assert_eq!(r.backoff.max_duration, None);
    assert!(r.non_retryable_errors.is_empty());
}

#[test]
fn retry_strategy_fields() {
    let nodes = "- id: a\n  type: agent\n  agent_name: Echo\n  timeout: 30\n  retry_strategy:\n    limit: 5\n    retry_policy: OnError\n    backoff: {duration: 2, factor: 3, max_duration: 10}\n    non_retryable_errors: [bad_input]\n";
    let w = load(&doc(nodes, ""));
    let NodeKind::Call(call) = &w.nodes[0].kind else {
        panic!("a call")
    };
    assert_eq!(call.timeout, Some(Duration::from_secs(30)));
    let r = call.retry_strategy.as_ref().expect("a retry strategy");
    assert_eq!(r.limit, 5);
    assert_eq!(r.policy, RetryPolicy::OnError);
    assert_eq!(r.backoff.duration, Duration::from_secs(2));
    assert_eq!(r.backoff.factor, 3.0);
    assert_eq!(r.backoff.max_duration, Some(Duration::from_secs(10)));
    assert_eq!(r.non_retryable_errors, vec!["bad_input".to_string()]);
    assert!(w.retry_strategy_for(call).is_some());
}

#[test]
fn duration_strings() {
    let nodes = "- id: a\n  type: agent\n  agent_name: Echo\n  timeout: 5m\n  retryStrategy: {backoff: {duration: 250ms, maxDuration: 1h}}\n";
    let w = load(&doc(nodes, ""));
    let NodeKind::Call(call) = &w.nodes[0].kind else {
        panic!("a call")
    };
    assert_eq!(call.timeout, Some(Duration::from_secs(300)));
    let r = call.retry_strategy.as_ref().expect("a retry strategy");
    assert_eq!(r.backoff.duration, Duration::from_millis(250));
    assert_eq!(r.backoff.max_duration, Some(Duration::from_secs(3600)));
}

#[test]
fn bad_durations() {
    let got = problems("- id: a\n  type: agent\n  agent_name: Echo\n  timeout: 0\n- id: b\n  type: agent\n  agent_name: Echo\n  timeout: [1]\n");
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': timeout: must be greater than zero",
            "t.yaml: node 'b': timeout: expected a duration such as \"30s\" or a number of seconds, found a list",
        ],
    );
    let got = problems("- id: a\n  type: agent\n  agent_name: Echo\n  timeout: soon\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("t.yaml: node 'a': timeout: "), "{got:?}");
    assert!(got[0].contains("soon"), "{got:?}");
}

#[test]
fn node_type_defaults() {
    let nodes = "\
- id: m
  type: map
  items: '{{workflow.input.xs}}'
  node: each
- id: each
  type: agent
  agent_name: Doubler
  input: {value: '{{_map_item}}'}
- id: f
  type: fork
  branches:
    - {id: left, agent_name: Echo}
    - {id: right, workflow_name: Sub, output_key: r}
- id: l
  type: loop
  node: body
  condition: '{{body.output.again}} == true'
- id: body
  type: agent
  agent_name: Echo
- id: g
  type: approval
- id: j
  type: join
  depends_on: [m, f]
  wait_for: [m, f]
";
    let text = format!(
        "name: T\ndefault_max_map_items: 7\nworkflow:\n  description: d\n  output_mapping: {{}}\n  nodes:\n{}\n",
        support::definition::indent(nodes, 4)
    );
    let w = load(&text);
    let NodeKind::Map(m) = &w.nodes[0].kind else {
        panic!("a map")
    };
    assert_eq!(m.max_items, 7);
    assert_eq!(m.concurrency_limit, None);
    assert!(matches!(m.items, MapItems::Template(_)));
    let NodeKind::Fork {
        branches,
        fail_fast,
    } = &w.nodes[2].kind
    else {
        panic!("a fork")
    };
    assert!(*fail_fast);
    assert_eq!(branches[0].output_key, "left");
    assert_eq!(branches[1].output_key, "r");
    assert_eq!(branches[1].call.target, CallTarget::Workflow("Sub".into()));
    let NodeKind::Loop(l) = &w.nodes[3].kind else {
        panic!("a loop")
    };
    assert_eq!(l.max_iterations, 100);
    assert_eq!(l.on_exhausted, OnExhausted::Succeed);
    assert_eq!(l.delay, None);
    let NodeKind::Approval(a) = &w.nodes[5].kind else {
        panic!("an approval")
    };
    assert_eq!(a.on_timeout, OnTimeout::Reject);
    assert!(a.approvers.is_empty());
    let NodeKind::Join { strategy, .. } = &w.nodes[6].kind else {
        panic!("a join")
    };
    assert_eq!(*strategy, JoinStrategy::All);
}

/// One file using every field, written in snake_case; [`camel_file`] is the same in camelCase.
const SNAKE: &str = "\
name: Both
display_name: Both spellings
max_workflow_execution_time_seconds: 100
default_node_timeout_seconds: 10
default_max_map_items: 5
workflow:
  description: d
  input_schema: {type: object}
  output_schema: {type: object}
  fail_fast: false
  max_call_depth: 4
  retry_strategy: {limit: 1, retry_policy: OnFailure, backoff: {duration: 2, factor: 1.5, max_duration: 9}, non_retryable_errors: [x]}
  on_exit: {always: done, on_success: ok, on_failure: bad, on_cancel: stop}
  output_mapping: {r: '{{a.output}}'}
  nodes:
    - id: a
      type: agent
      agent_name: Echo
      input_schema_override: {type: object}
      output_schema_override: {type: object}
      retry_strategy: {limit: 2, retry_policy: OnError}
    - id: m
      type: map
      depends_on: [a]
      with_items: [1, 2]
      node: each
      concurrency_limit: 2
      max_items: 3
    - id: each
      type: agent
      agent_name: Doubler
    - id: p
      type: map
      dependencies: [a]
      with_param: '{{a.output.list}}'
      node: each2
    - id: each2
      type: agent
      agent_name: Doubler
    - id: c
      type: conditional
      depends_on: [a]
      condition: '{{a.output.ok}} == true'
      true_branch: t
      false_branch: e
    - {id: t, type: agent, agent_name: Echo, depends_on: [c]}
    - {id: e, type: agent, agent_name: Echo, depends_on: [c]}
    - id: j
      type: join
      depends_on: [t, e]
      wait_for: [t, e]
      strategy: n_of_m
      n: 1
    - id: l
      type: loop
      depends_on: [j]
      node: body
      condition: '{{body.output.more}} == true'
      max_iterations: 3
      delay: 1
      on_iterations_exhausted: fail
    - {id: body, type: agent, agent_name: Echo}
    - id: g
      type: approval
      depends_on: [l]
      approvers: [ann]
      timeout: 60
      on_timeout: approve
    - id: f
      type: fork
      depends_on: [g]
      fail_fast: false
      branches:
        - {id: b1, agent_name: Echo, output_key: one, retry_strategy: {limit: 1}}
    - {id: done, type: agent, agent_name: Echo}
    - {id: ok, type: agent, agent_name: Echo}
    - {id: bad, type: agent, agent_name: Echo}
    - {id: stop, type: agent, agent_name: Echo}
";

fn camel_file() -> String {
    let pairs = [
        ("display_name", "displayName"),
        ("input_schema_override", "inputSchemaOverride"),
        ("output_schema_override", "outputSchemaOverride"),
        ("input_schema", "inputSchema"),
        ("output_schema", "outputSchema"),
        ("fail_fast", "failFast"),
        ("max_call_depth", "maxCallDepth"),
        ("retry_strategy", "retryStrategy"),
        ("retry_policy", "retryPolicy"),
        ("max_duration", "maxDuration"),
        ("non_retryable_errors", "nonRetryableErrors"),
        ("on_exit", "onExit"),
        ("on_success", "onSuccess"),
        ("on_failure", "onFailure"),
        ("on_cancel", "onCancel"),
        ("output_mapping", "outputMapping"),
        ("agent_name", "agentName"),
        ("depends_on", "dependsOn"),
        ("with_items", "withItems"),
        ("with_param", "withParam"),
        ("concurrency_limit", "concurrencyLimit"),
        ("max_items", "maxItems"),
        ("true_branch", "trueBranch"),
        ("false_branch", "falseBranch"),
        ("wait_for", "waitFor"),
        ("max_iterations", "maxIterations"),
        ("on_iterations_exhausted", "onIterationsExhausted"),
        ("on_timeout", "onTimeout"),
        ("output_key", "outputKey"),
    ];
    let mut text = SNAKE.to_string();
    for (s, c) in pairs {
        text = text.replace(&format!("{s}:"), &format!("{c}:"));
    }
    // n_of_m is a value, not a key.
    text
}

#[test]
fn camel_and_snake_case_give_equal_workflows() {
    let camel = camel_file();
    assert!(camel.contains("retryStrategy:") && !camel.contains("retry_strategy:"));
    let a = load(SNAKE);
    let b = load(&camel);
    assert_eq!(format!("{:?}", a.nodes), format!("{:?}", b.nodes));
    assert_eq!(a.on_exit, b.on_exit);
    assert_eq!(a.retry_strategy, b.retry_strategy);
    assert_eq!(
        (
            a.fail_fast,
            a.max_call_depth,
            a.display_name.clone(),
            a.max_execution_time
        ),
        (
            b.fail_fast,
            b.max_call_depth,
            b.display_name.clone(),
            b.max_execution_time
        )
    );
    assert_eq!(a.graph.index, b.graph.index);
    assert_eq!(a.graph.roles, b.graph.roles);
    assert_eq!(a.graph.dependents, b.graph.dependents);
    assert_eq!(a.graph.topo_order, b.graph.topo_order);
    assert_eq!(
        format!("{:?}", a.input_schema),
        format!("{:?}", b.input_schema)
    );
    // The source keeps the spelling as written.
    assert!(b.source.get("outputMapping").is_some());
    assert!(a.source.get("output_mapping").is_some());
}

#[test]
fn switch_case_aliases() {
    let nodes = "\
- id: s
  type: switch
  cases:
    - {when: 'true', then: x}
    - {condition: 'false', node: y}
  default: x
- {id: x, type: agent, agent_name: Echo, depends_on: [s]}
- {id: y, type: agent, agent_name: Echo, depends_on: [s]}
";
    let w = load(&doc(nodes, ""));
    let NodeKind::Switch { cases, default } = &w.nodes[0].kind else {
        panic!("a switch")
    };
    assert_eq!(cases[1].target, "y");
    assert_eq!(default.as_deref(), Some("x"));
}

#[test]
fn unknown_field_with_did_you_mean() {
    let got = problems("- id: a\n  type: agent\n  agent_name: Echo\n  retryStratgy: {limit: 1}\n");
    assert_problems(
        got,
        &["t.yaml: node 'a': retryStratgy: unknown field 'retryStratgy' (did you mean 'retryStrategy'?)"],
    );
}

#[test]
fn unknown_field_of_another_node_type() {
    let got =
        problems("- id: a\n  type: agent\n  agent_name: Echo\n  condition: 'true'\n  bogus: 1\n");
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': condition: unknown field 'condition' (not a field of agent nodes)",
            "t.yaml: node 'a': bogus: unknown field 'bogus'",
        ],
    );
}

#[test]
fn unknown_fields_at_every_level() {
    let text = "name: T\nnam: x\nworkflow:\n  description: d\n  output_mapping: {}\n  failfast: true\n  on_exit: {allways: a}\n  nodes:\n    - {id: a, type: agent, agent_name: Echo, retry_strategy: {limt: 1, backoff: {factr: 2}}}\n";
    assert_problems(
        problems_of(text),
        &[
            "t.yaml: workflow: nam: unknown field 'nam' (did you mean 'name'?)",
            "t.yaml: node 'a': retry_strategy.backoff.factr: unknown field 'factr' (did you mean 'factor'?)",
            "t.yaml: node 'a': retry_strategy.limt: unknown field 'limt' (did you mean 'limit'?)",
            "t.yaml: workflow: on_exit.allways: unknown field 'allways' (did you mean 'always'?)",
            "t.yaml: workflow: failfast: unknown field 'failfast' (did you mean 'failFast'?)",
        ],
    );
}

#[test]
fn key_and_alias_both_given() {
    let got = problems(
        "- {id: a, type: agent, agent_name: Echo}\n- {id: b, type: agent, agent_name: Echo, depends_on: [a], dependencies: [a]}\n- {id: c, type: agent, agent_name: Echo, timeout: 1, agentName: Echo}\n",
    );
    assert_problems(
        got,
        &[
            "t.yaml: node 'b': depends_on: 'depends_on' and 'dependencies' are the same field; give only one",
            "t.yaml: node 'c': agent_name: 'agent_name' and 'agentName' are the same field; give only one",
        ],
    );
}

#[test]
fn wrong_types() {
    let got = problems("- id: a\n  type: agent\n  agent_name: 3\n  depends_on: b\n- {id: b, type: loop, node: a, condition: 'true', max_iterations: -1}\n");
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': depends_on: expected a list of strings, found a string",
            "t.yaml: node 'a': agent_name: expected a string, found a number",
            "t.yaml: node 'b': max_iterations: must be a whole number of at least 1, found -1",
        ],
    );
}

#[test]
fn required_workflow_fields() {
    let text = "name: T\nworkflow:\n  nodes: []\n";
    assert_problems(
        problems_of(text),
        &[
            "t.yaml: workflow: description: missing field",
            "t.yaml: workflow: nodes: a workflow needs at least one node",
            "t.yaml: workflow: output_mapping: missing field",
        ],
    );
    assert_problems(
        problems_of("workflow: {description: d, output_mapping: {}, nodes: [{id: a, type: agent, agent_name: E}]}\n"),
        &["t.yaml: workflow: name: missing field"],
    );
    assert_problems(
        problems_of("name: T\n"),
        &["t.yaml: workflow: workflow: missing field"],
    );
    assert_problems(
        problems_of("- a\n"),
        &["t.yaml: expected a mapping with 'name' and 'workflow' at the top level, found a list"],
    );
}

#[test]
fn names_and_ids() {
    let text = "name: my.workflow\nworkflow:\n  description: d\n  output_mapping: {}\n  nodes:\n    - {id: 'a b', type: agent, agent_name: E}\n    - {id: '', type: agent, agent_name: E}\n    - {type: agent, agent_name: E}\n    - {id: workflow, type: agent, agent_name: E}\n";
    assert_problems(
        problems_of(text),
        &[
            "t.yaml: workflow: name: 'my.workflow' is not a valid agent name: use only letters, digits, '_' and '-' (it is a NATS subject token)",
            "t.yaml: node 'a b': id: 'a b' is not a valid id: use only letters, digits, '_' and '-'",
            "t.yaml: workflow: nodes[1].id: must not be empty",
            "t.yaml: workflow: nodes[2].id: missing field",
            "t.yaml: node 'workflow': id: 'workflow' is reserved for templates; choose another id",
        ],
    );
}

#[test]
fn node_types_and_required_fields() {
    let got = problems("- {id: a, type: agnet}\n- {id: b}\n- {id: c, type: agent}\n- {id: d, type: conditional}\n- {id: e, type: loop}\n");
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': type: unknown node type 'agnet' (expected one of: agent, workflow, conditional, switch, map, fork, join, loop, approval, wait)",
            "t.yaml: node 'b': type: missing field",
            "t.yaml: node 'c': agent_name: missing field",
            "t.yaml: node 'd': condition: missing field",
            "t.yaml: node 'd': true_branch: missing field",
            "t.yaml: node 'e': node: missing field",
            "t.yaml: node 'e': condition: missing field",
        ],
    );
}

#[test]
fn workflow_node_needs_workflow_name() {
    let got = problems("- {id: a, type: workflow, agent_name: Sub}\n");
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': workflow_name: missing field",
            "t.yaml: node 'a': agent_name: unknown field 'agent_name' (not a field of workflow nodes)",
        ],
    );
    let w = load(&doc("- {id: a, type: workflow, workflowName: Sub}\n", ""));
    let NodeKind::Call(c) = &w.nodes[0].kind else {
        panic!("a call")
    };
    assert_eq!(c.target, CallTarget::Workflow("Sub".into()));
}

#[test]
fn map_item_sources() {
    let each = "- {id: each, type: agent, agent_name: Doubler}\n";
    let got = problems(&format!(
        "- {{id: m, type: map, node: each, items: [1, 2]}}\n{each}"
    ));
    assert_problems(
        got,
        &["t.yaml: node 'm': items: a literal list is not allowed here; use withItems for a literal list"],
    );
    let got = problems(&format!("- {{id: m, type: map, node: each, items: '{{{{workflow.input.x}}}}', withItems: [1]}}\n{each}"));
    assert_problems(
        got,
        &["t.yaml: node 'm': items: give exactly one of items, withParam or withItems"],
    );
    let got = problems(&format!("- {{id: m, type: map, node: each}}\n{each}"));
    assert_problems(
        got,
        &["t.yaml: node 'm': items: missing field: give exactly one of items, withParam or withItems"],
    );
    let got = problems(&format!(
        "- {{id: m, type: map, node: each, withParam: [1]}}\n{each}"
    ));
    assert_problems(
        got,
        &["t.yaml: node 'm': with_param: expected a template string, found a list"],
    );
    let w = load(&doc(
        &format!("- {{id: m, type: map, node: each, withItems: [1, 2]}}\n{each}"),
        "",
    ));
    let NodeKind::Map(m) = &w.nodes[0].kind else {
        panic!("a map")
    };
    assert!(matches!(&m.items, MapItems::Literal(v) if v.len() == 2));
    load(&doc(
        &format!("- {{id: m, type: map, node: each, items: {{coalesce: ['{{{{workflow.input.a}}}}', '{{{{workflow.input.b}}}}']}}}}\n{each}"),
        "",
    ));
}

#[test]
fn numeric_limits() {
    let text = doc(
        "- {id: m, type: map, node: e, withItems: [], concurrency_limit: 0, max_items: 0}\n- {id: e, type: agent, agent_name: E}\n",
        "concurrency: 0\nmax_call_depth: 0",
    );
    assert_problems(
        problems_of(&text),
        &[
            "t.yaml: node 'm': concurrency_limit: must be at least 1, found 0",
            "t.yaml: node 'm': max_items: must be at least 1, found 0",
            "t.yaml: workflow: max_call_depth: must be at least 1, found 0",
            "t.yaml: workflow: concurrency: must be at least 1, found 0",
        ],
    );
}

#[test]
fn fork_branches() {
    let got = problems(
        "- id: f\n  type: fork\n  branches:\n    - {id: a, agent_name: E}\n    - {id: a, agent_name: E, output_key: x}\n    - {id: c, agent_name: E, output_key: x}\n    - {id: d}\n    - {id: e, agent_name: E, workflow_name: W}\n",
    );
    assert_problems(
        got,
        &[
            "t.yaml: node 'f': branches[1].id: duplicate branch id 'a'",
            "t.yaml: node 'f': branches[2].output_key: duplicate output key 'x'",
            "t.yaml: node 'f': branches[3].agent_name: missing field (or workflow_name)",
            "t.yaml: node 'f': branches[4].agent_name: give either agent_name or workflow_name, not both",
        ],
    );
    assert_problems(
        problems("- {id: f, type: fork, branches: []}\n"),
        &["t.yaml: node 'f': branches: a fork needs at least one branch"],
    );
}

#[test]
fn join_strategy_and_n() {
    let base = "- {id: a, type: agent, agent_name: E}\n- {id: b, type: agent, agent_name: E}\n";
    let j = |extra: &str| {
        format!("{base}- {{id: j, type: join, depends_on: [a, b], wait_for: [a, b]{extra}}}\n")
    };
    assert_problems(
        problems(&j(", strategy: n_of_m")),
        &["t.yaml: node 'j': n: missing field (strategy n_of_m needs n)"],
    );
    assert_problems(
        problems(&j(", strategy: n_of_m, n: 3")),
        &["t.yaml: node 'j': n: must be between 1 and the 2 nodes of wait_for, found 3"],
    );
    assert_problems(
        problems(&j(", strategy: n_of_m, n: 0")),
        &["t.yaml: node 'j': n: must be between 1 and the 2 nodes of wait_for, found 0"],
    );
    assert_problems(
        problems(&j(", strategy: any, n: 1")),
        &["t.yaml: node 'j': n: n is only used with strategy n_of_m"],
    );
    assert_problems(
        problems(&j(", strategy: most")),
        &["t.yaml: node 'j': strategy: unknown join strategy 'most' (expected all, any or n_of_m)"],
    );
    let w = load(&doc(&j(", strategy: n_of_m, n: 2"), ""));
    let NodeKind::Join { strategy, .. } = &w.nodes[2].kind else {
        panic!("a join")
    };
    assert_eq!(*strategy, JoinStrategy::NOfM(2));
}

#[test]
fn enumerated_values() {
    let got = problems(
        "- {id: a, type: agent, agent_name: E, retry_strategy: {retry_policy: Sometimes}}\n- {id: g, type: approval, on_timeout: maybe}\n- {id: l, type: loop, node: a, condition: 'true', on_iterations_exhausted: retry}\n",
    );
    assert_problems(
        got,
        &[
            "t.yaml: node 'a': retry_strategy.retry_policy: unknown retry policy 'Sometimes' (expected Always, OnFailure or OnError)",
            "t.yaml: node 'g': on_timeout: expected reject or approve, found 'maybe'",
            "t.yaml: node 'l': on_iterations_exhausted: expected succeed or fail, found 'retry'",
        ],
    );
}

#[test]
fn schemas_must_compile() {
    let text = doc(
        "- {id: a, type: agent, agent_name: E, output_schema_override: {type: strin}}\n",
        "input_schema: {type: object, properties: {x: {minimum: 'a'}}}\noutput_schema: 3",
    );
    let got = problems_of(&text);
    assert_eq!(got.len(), 3, "{got:#?}");
    assert!(
        got[0].starts_with("t.yaml: workflow: input_schema: not a valid JSON Schema: "),
        "{got:#?}"
    );
    assert_eq!(
        got[1],
        "t.yaml: workflow: output_schema: expected a JSON Schema (a mapping), found a number"
    );
    assert!(
        got[2].starts_with("t.yaml: node 'a': output_schema_override: not a valid JSON Schema: "),
        "{got:#?}"
    );
}

#[test]
fn json_files_and_syntax_errors() {
    let json = r#"{"name": "J", "workflow": {"description": "d", "outputMapping": {}, "nodes": [{"id": "a", "type": "agent", "agentName": "Echo"}]}}"#;
    let w = parse_str(json, "w.json").expect("valid JSON workflow");
    assert_eq!(w.name, "J");
    let err = parse_str("{\"name\": \"J\",\n  \"workflow\": }", "w.json").expect_err("bad JSON");
    assert_eq!(err.len(), 1);
    assert!(
        err[0]
            .to_string()
            .starts_with("w.json: JSON syntax error at line 2, column 15: "),
        "{}",
        err[0]
    );
    let err = parse_str("name: T\nworkflow:\n  - a\n b: c\n", "w.yaml").expect_err("bad YAML");
    assert_eq!(err.len(), 1);
    assert!(
        err[0]
            .to_string()
            .starts_with("w.yaml: YAML syntax error at line 4, column "),
        "{}",
        err[0]
    );
}

#[test]
fn skills_are_kept() {
    let w = load(&doc(
        AGENT,
        "skills:\n  - {id: s, name: S, description: does things, tags: [a]}",
    ));
    assert_eq!(w.skills.len(), 1);
    assert_problems(
        problems_of(&doc(AGENT, "skills:\n  - {name: S}")),
        &["t.yaml: workflow: skills[0].id: missing field"],
    );
}
