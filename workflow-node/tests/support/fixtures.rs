//! Workflows and stub agents more than one test runs, each written once. A stub agent is a
//! macro giving its entry of a stub file's `agents:` list as a literal, so a test's stub
//! file stays a `const` built with `concat!` from the shared agents and its own.

/// Stub agent `Echo`: answers with its input.
#[allow(unused_macros)] // each binary uses some of the stub agents
macro_rules! echo {
    () => {
        r#"
  - name: Echo
    rules: [{output: "{{input}}"}]
"#
    };
}
#[allow(unused_imports)]
pub(crate) use echo;

/// Stub agent `Doubler`: `{value: v}` in, `{value: 2v}` out.
#[allow(unused_macros)] // each binary uses some of the stub agents
macro_rules! doubler {
    () => {
        r#"
  - name: Doubler
    rules: [{output: {value: "{{input.value * 2}}"}}]
"#
    };
}
#[allow(unused_imports)]
pub(crate) use doubler;

/// Stub agent `Doubler` that refuses an input without a numeric `value` (its input schema).
#[allow(unused_macros)] // each binary uses some of the stub agents
macro_rules! checked_doubler {
    () => {
        r#"
  - name: Doubler
    input_schema: {type: object, properties: {value: {type: number}}, required: [value]}
    rules: [{output: {value: "{{input.value * 2}}"}}]
"#
    };
}
#[allow(unused_imports)]
pub(crate) use checked_doubler;

/// Stub agents with one agent, `Echo`, that answers with its input.
pub(crate) const ECHO_STUBS: &str = concat!("agents:", echo!());

/// Two `Doubler` calls in a row: `{value: v}` in, `{value: 4v}` out.
pub(crate) const CHAIN: &str = r#"
name: Chain
workflow:
  description: two agents in a row
  nodes:
    - {id: double, type: agent, agent_name: Doubler, input: {value: "{{workflow.input.value}}"}}
    - {id: again, type: agent, agent_name: Doubler, depends_on: [double]}
  output_mapping: {value: "{{again.output.value}}"}
"#;

/// One call of a `Fatal` agent (each test brings its own, failing its own way).
pub(crate) const BROKEN: &str = r#"
name: Broken
workflow:
  description: an agent that always fails
  nodes:
    - {id: call, type: agent, agent_name: Fatal}
  output_mapping: {ok: "{{call.output.ok}}"}
"#;

/// An approval by `alice`, then an `Echo` call: `{went: true}` once approved.
pub(crate) const GATE: &str = r#"
name: Gate
workflow:
  description: an approval, then an agent
  nodes:
    - {id: gate, type: approval, approvers: [alice], message: "ok to go?", timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: true}}
  output_mapping: {went: "{{go.output.went}}"}
"#;

/// The nodes of a chain of `n` Echo nodes `n0`..`n{n-1}`, each given input `{i: i}` and
/// `extra` (more flow-map entries, such as `, timeout: 1h`), as YAML lines for `nodes:`.
pub(crate) fn chain_nodes(n: usize, extra: &str) -> String {
    let mut nodes = String::new();
    for i in 0..n {
        let deps = if i == 0 {
            String::new()
        } else {
            format!(", depends_on: [n{}]", i - 1)
        };
        nodes.push_str(&format!(
            "    - {{id: n{i}, type: agent, agent_name: Echo, input: {{i: {i}}}{extra}{deps}}}\n"
        ));
    }
    nodes
}
