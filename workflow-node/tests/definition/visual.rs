//! The views of a workflow: Mermaid diagram (exact output), plan batches and sections, the
//! agent card, and the `plan`/`mermaid`/`card` subcommands end to end.

use std::path::{Path, PathBuf};
use std::process::Command;

use messages::card::{EXT_AGENT_TYPE, EXT_DISPLAY_NAME, EXT_SCHEMAS, EXT_WORKFLOW_VISUALIZATION};
use serde_json::{json, Value};
use workflow_node::definition::{load_file, parse_str, Workflow};
use workflow_node::visual::{self, mermaid::mermaid_id};

fn load(text: &str) -> Workflow {
    match parse_str(text, "t.yaml") {
        Ok(w) => w,
        Err(p) => panic!(
            "invalid test workflow:\n{}",
            p.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// Every node type, a switch, exit handlers, and ids with `-`.
const ALL_KINDS: &str = r#"
name: AllKinds
display_name: All "kinds"
workflow:
  description: Every node type
  version: "2.1.0"
  input_schema: {type: object, properties: {kind: {type: string}}}
  nodes:
    - {id: start-here, type: agent, agent_name: Intake}
    - id: route
      type: switch
      depends_on: [start-here]
      cases:
        - {condition: "{{start-here.output.kind}} == 'a'", node: fan}
        - {condition: "{{start-here.output.kind}} == 'b'", node: sub-flow}
      default: gate
    - id: fan
      type: fork
      depends_on: [route]
      branches:
        - {id: left, agent_name: L, input: {}, output_key: l}
        - {id: right, agent_name: R, input: {}, output_key: r}
    - {id: sub-flow, type: workflow, workflow_name: Child, depends_on: [route]}
    - {id: gate, type: approval, depends_on: [route], approvers: [alice, bob], timeout: 1h,
       on_timeout: approve, message: "say \"yes\""}
    - id: merge
      type: join
      depends_on: [fan, sub-flow, gate]
      wait_for: [fan, sub-flow, gate]
      strategy: n_of_m
      n: 1
    - id: poll
      type: loop
      depends_on: [merge]
      node: check
      condition: "{{check.output.done}} == false"
      max_iterations: 5
      delay: 1s
    - {id: check, type: agent, agent_name: Checker, input: {}}
    - {id: cleanup, type: agent, agent_name: Janitor, input: {}}
    - {id: alert, type: agent, agent_name: Pager, input: {}}
  output_mapping: {}
  on_exit: {always: cleanup, on_failure: alert}
  skills:
    - {id: route_things, name: Route things}
    - {id: full, name: Full, description: Does it all, tags: [a, b], examples: [go]}
"#;

#[test]
fn mermaid_of_every_node_type_is_exact() {
    let got = visual::mermaid(&load(ALL_KINDS));
    let want = r#"graph TD
    Start([Start])
    start_here("<b>Agent</b><br/>Intake")
    route{"<b>Switch</b><br/>Route"}
    fan{{"<b>Fork</b><br/>Fan"}}
    fan_left("<b>Agent</b><br/>L")
    fan_right("<b>Agent</b><br/>R")
    sub_flow[["<b>Workflow</b><br/>Child"]]
    gate[/"<b>Approval</b><br/>Gate"\]
    merge(("<b>Join</b><br/>Merge<br/>1 of 3"))
    poll(["<b>Loop</b><br/>Poll<br/>max 5"])
    check("<b>Agent</b><br/>Checker")
    cleanup("<b>Agent</b><br/>Janitor")
    alert("<b>Agent</b><br/>Pager")
    Finish([Finish])
    Start --> start_here
    start_here --> route
    route -->|Case 1| fan
    route -->|Case 2| sub_flow
    route -->|Default| gate
    fan --> merge
    sub_flow --> merge
    gate --> merge
    merge --> poll
    fan -.->|l| fan_left
    fan -.->|r| fan_right
    poll -.-> check
    check -.->|repeat| poll
    poll --> Finish
    Finish -.->|always| cleanup
    Finish -.->|on_failure| alert
"#;
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn mermaid_conditional_map_and_quotes() {
    let wf = load(
        r#"
name: Small
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: A}
    - id: is_bob
      type: conditional
      depends_on: [a]
      condition: "{{a.output.name}} == \"Bob\" && {{a.output.n}} < 3"
      true_branch: each
      false_branch: end
    - {id: each, type: map, depends_on: [is_bob], items: "{{a.output.items}}", node: one}
    - {id: one, type: agent, agent_name: One, input: {x: "{{_map_item}}"}}
    - {id: end, type: agent, agent_name: Done, depends_on: [is_bob]}
  output_mapping: {}
"#,
    );
    let want = r#"graph TD
    Start([Start])
    a("<b>Agent</b><br/>A")
    is_bob{"<b>Decision</b><br/>Is Bob<br/>{{a.output.name}} == #quot;Bob#quot; && {{a.output.n}} #lt; 3?"}
    each(("<b>Map</b><br/>Each"))
    one("<b>Agent</b><br/>One")
    n_end("<b>Agent</b><br/>Done")
    Finish([Finish])
    Start --> a
    a --> is_bob
    is_bob -->|True| each
    is_bob -->|False| n_end
    each -.->|each item| one
    each --> Finish
    n_end --> Finish
"#;
    assert_eq!(visual::mermaid(&wf), want);
}

/// Every workflow file under `dir` (recursively) that loads; other YAML (stub agents,
/// suites) is skipped.
fn workflows_under(dir: &Path, out: &mut Vec<(PathBuf, Workflow)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            workflows_under(&p, out);
        } else if workflow_node::definition::is_workflow_file(&p) {
            if let Ok(w) = load_file(&p) {
                out.push((p, w));
            }
        }
    }
}

#[test]
fn every_example_diagram_names_every_node() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    workflows_under(&root.join("examples"), &mut found);
    workflows_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/definition/fixtures"),
        &mut found,
    );
    found.push(("ALL_KINDS".into(), load(ALL_KINDS)));
    for (path, wf) in &found {
        let diagram = visual::mermaid(wf);
        assert!(
            diagram.starts_with("graph TD\n    Start([Start])\n"),
            "{}",
            path.display()
        );
        for node in &wf.nodes {
            let id = mermaid_id(&node.id);
            assert!(
                diagram.lines().any(|l| l.trim_start().starts_with(&id)),
                "{}: node {} missing from\n{diagram}",
                path.display(),
                node.id
            );
        }
        // The card carries the same diagram.
        let card = visual::agent_card(wf, "mesh");
        assert_eq!(card.mermaid_source(), Some(diagram.as_str()));
    }
}

#[test]
fn plan_batches_follow_the_longest_dependency_chain() {
    let wf = load(
        r#"
name: Diamond
workflow:
  description: d
  nodes:
    - {id: a, type: agent, agent_name: A}
    - {id: b, type: agent, agent_name: B, depends_on: [a]}
    - {id: c, type: agent, agent_name: C, depends_on: [a]}
    - {id: d, type: agent, agent_name: D, depends_on: [a, b, c], input: {}}
    - {id: e, type: agent, agent_name: E}
  output_mapping: {}
"#,
    );
    let plan = visual::plan(&wf);
    let ids: Vec<Vec<&str>> = plan
        .batches
        .iter()
        .map(|b| b.iter().map(|(id, _)| id.as_str()).collect())
        .collect();
    assert_eq!(ids, vec![vec!["a", "e"], vec!["b", "c"], vec!["d"]]);
    let text = plan.to_string();
    assert!(text.contains("  1: a (agent A), e (agent E)\n"), "{text}");
    assert!(text.contains("  3: d (agent D)\n"), "{text}");
}

#[test]
fn plan_lists_branches_bodies_gates_handlers_and_calls() {
    let wf = load(ALL_KINDS);
    let plan = visual::plan(&wf);
    let text = plan.to_string();
    let inner_or_handler: Vec<&str> = wf
        .nodes
        .iter()
        .filter(|n| ["check", "cleanup", "alert"].contains(&n.id.as_str()))
        .map(|n| n.id.as_str())
        .collect();
    assert_eq!(inner_or_handler.len(), 3);
    for batch in &plan.batches {
        for (id, _) in batch {
            assert!(
                !inner_or_handler.contains(&id.as_str()),
                "{id} is not in the main DAG"
            );
        }
    }
    for needle in [
        "Workflow AllKinds (All \"kinds\") v2.1.0",
        "deadline 30m, default node timeout 5m, fail_fast true",
        "  3: fan (fork), sub-flow (workflow Child), gate (approval)\n",
        "route: switch (first match): case 1: {{start-here.output.kind}} == 'a' -> fan; ",
        "default -> gate",
        "fan: fork (fail fast): left [agent L] -> output.l; right [agent R] -> output.r",
        "merge: join: waits for 1 of fan, sub-flow, gate",
        "poll: loop: runs check then repeats while {{check.output.done}} == false; \
         max_iterations 5, delay 1s, at the limit: succeed",
        "gate: approval by alice, bob; timeout 1h, on timeout approve; message say \"yes\"",
        "  always: cleanup\n  on_failure: alert\n",
        "fan.left: agent L: 1 attempt (no retry), timeout 5m",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn plan_shows_retries_and_map_limits() {
    let wf = load(
        r#"
name: Retry
default_node_timeout_seconds: 90
workflow:
  description: d
  retry_strategy: {limit: 1}
  nodes:
    - id: a
      type: agent
      agent_name: A
      timeout: 250ms
      retry_strategy:
        limit: 4
        retry_policy: OnError
        backoff: {duration: 2s, factor: 3, max_duration: 1m}
        non_retryable_errors: [invalid_input, forbidden]
    - {id: m, type: map, depends_on: [a], withItems: [1, 2, 3], node: x, max_items: 10,
       concurrency_limit: 2}
    - {id: x, type: agent, agent_name: X, input: {v: "{{_map_item}}"}}
  output_mapping: {}
"#,
    );
    let text = visual::plan(&wf).to_string();
    for needle in [
        "a: agent A: 5 attempts (OnError, backoff 2s x3 max 1m, non-retryable: invalid_input, \
         forbidden), timeout 250ms",
        "m: map: runs x once per item of 3 literal items; max_items 10, concurrency 2",
        "x: agent X: 2 attempts (Always, backoff 1s x2), timeout 1m30s",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn card_has_the_three_extensions_and_the_file_as_written() {
    let wf = load(ALL_KINDS);
    let card = visual::agent_card(&wf, "acme");
    assert_eq!(card.name, "AllKinds");
    assert_eq!(card.description, "Every node type");
    assert_eq!(card.version, "2.1.0");
    assert_eq!(card.url, "nats:acme.a2a.v1.agent.request.AllKinds");
    assert_eq!(card.protocol_version, "0.3.0");
    assert_eq!(card.agent_type(), Some("workflow"));
    assert_eq!(
        card.schemas(),
        (
            Some(json!({"type": "object", "properties": {"kind": {"type": "string"}}})),
            None
        )
    );
    assert_eq!(card.workflow_config(), Some(&wf.source));
    assert_eq!(card.display_name(), Some("All \"kinds\""));
    let uris: Vec<&str> = card
        .capabilities
        .extensions
        .iter()
        .map(|e| e.uri.as_str())
        .collect();
    assert_eq!(
        uris,
        [
            EXT_AGENT_TYPE,
            EXT_SCHEMAS,
            EXT_WORKFLOW_VISUALIZATION,
            EXT_DISPLAY_NAME
        ]
    );

    let skills = serde_json::to_value(&card.skills).unwrap();
    assert_eq!(
        skills,
        json!([
            {"id": "route_things", "name": "Route things", "description": "Every node type",
             "tags": ["workflow"]},
            {"id": "full", "name": "Full", "description": "Does it all", "tags": ["a", "b"],
             "examples": ["go"]}
        ])
    );
    // The card reads back through the messages types.
    let back: messages::AgentCard =
        serde_json::from_value(serde_json::to_value(&card).unwrap()).unwrap();
    assert_eq!(back, card);
}

#[test]
fn card_without_schemas_or_display_name_leaves_those_extensions_out() {
    let wf = load(
        "name: Bare\nworkflow:\n  description: d\n  output_mapping: {}\n  nodes:\n    \
         - {id: only, type: agent, agent_name: A}\n",
    );
    let card = visual::agent_card(&wf, "mesh");
    let uris: Vec<&str> = card
        .capabilities
        .extensions
        .iter()
        .map(|e| e.uri.as_str())
        .collect();
    assert_eq!(uris, [EXT_AGENT_TYPE, EXT_WORKFLOW_VISUALIZATION]);
    assert_eq!(card.schemas(), (None, None));
    assert!(card.skills.is_empty());
    assert_eq!(
        card.mermaid_source(),
        Some(
            "graph TD\n    Start([Start])\n    only(\"<b>Agent</b><br/>A\")\n    \
             Finish([Finish])\n    Start --> only\n    only --> Finish\n"
        )
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn subcommands_print_on_stdout_and_report_problems_on_stderr() {
    let dir = std::env::temp_dir().join(format!("visual-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = write(&dir, "good.yaml", ALL_KINDS);
    let good = good.to_str().unwrap();
    let bad = write(
        &dir,
        "bad.yaml",
        "name: Bad\nworkflow:\n  description: d\n  output_mapping: {}\n  nodes:\n    \
         - {id: a, type: agent, agent_name: A, depends_on: [ghost]}\n",
    );
    let bad = bad.to_str().unwrap();

    let (code, out, err) = run(&["mermaid", good]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, visual::mermaid(&load(ALL_KINDS)));

    let (code, out, _) = run(&["plan", good]);
    assert_eq!(code, 0);
    assert_eq!(out, visual::plan(&load(ALL_KINDS)).to_string());

    let (code, out, _) = run(&["card", "--namespace", "acme", good]);
    assert_eq!(code, 0);
    let card: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(card["url"], "nats:acme.a2a.v1.agent.request.AllKinds");

    let (code, out, _) = run(&["card", good, good]);
    assert_eq!(code, 0);
    let cards: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cards.as_array().map(Vec::len), Some(2));

    for cmd in ["mermaid", "plan", "card"] {
        let (code, out, err) = run(&[cmd, good, bad]);
        assert_eq!(code, 1, "{cmd}");
        assert_eq!(out, "", "{cmd}");
        assert!(
            err.contains("bad.yaml: node 'a': depends_on"),
            "{cmd}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
