//! End-to-end tests of the workflow node over a real nats-server with JetStream: stub
//! agents from the agent SDK, the node, and a caller, all on one server started per test.

use std::path::PathBuf;
use std::time::Duration;

use agent_sdk::workflow::{invoke, RunResult};
use futures::StreamExt;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::workflow::{Decision, WorkflowApprovalDecision, WorkflowDataPart};
use messages::{headers, subjects};
use serde_json::{json, Value};
use workflow_node::definition::{parse_str, Workflow};
use workflow_node::shell::{Config, WorkflowNode};

use crate::support;
use crate::support::fixtures::{checked_doubler, echo};

const TIMEOUT: Duration = Duration::from_secs(30);

struct Mesh {
    _server: test_harness::NatsServer,
    client: async_nats::Client,
    node: Option<WorkflowNode>,
    _stubs: Vec<agent_sdk::AgentHandle>,
    _dir: tempfile::TempDir,
}

fn wf(yaml: &str) -> Workflow {
    parse_str(yaml, "test.yaml").unwrap_or_else(|p| panic!("{p:?}"))
}

const STUBS: &str = concat!(
    "agents:",
    echo!(),
    checked_doubler!(),
    r#"
  - name: Flaky
    fail_first: 2
    error: upstream unavailable
    error_kind: transient
    rules: [{output: {ok: true, call: "{{call}}"}}]
  - name: Fatal
    fail_first: 5
    error: bad request
    error_kind: invalid
    rules: [{output: {ok: true}}]
  - name: Liar
    output_schema: {type: object, required: [answer]}
    rules: [{output: {nonsense: 1}}]
  - name: Sleepy
    delay: 20s
    rules: [{output: {late: true}}]
"#,
);

async fn mesh(workflows: &[&str]) -> Mesh {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let dir = tempfile::tempdir().expect("tempdir");
    let stub_path: PathBuf = dir.path().join("stubs.yaml");
    std::fs::write(&stub_path, STUBS).expect("write stubs");
    let file = agent_sdk::stub::load_stub_file(&stub_path).expect("stub file");
    let stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", file)
        .await
        .expect("stubs");
    let workflows: Vec<Workflow> = workflows.iter().map(|y| wf(y)).collect();
    let config = support::mesh::trusting(Config {
        card_wait: Duration::from_millis(500),
        ..Config::default()
    });
    let node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .expect("node");
    Mesh {
        _server: server,
        client,
        node: Some(node),
        _stubs: stubs,
        _dir: dir,
    }
}

impl Mesh {
    async fn run(&self, workflow: &str, input: Value) -> RunResult {
        invoke(&self.client, "mesh", workflow, &input, TIMEOUT, |_| {})
            .await
            .expect("a result")
    }
}

const CHAIN: &str = r#"
name: Chain
workflow:
  description: two agents in a row
  input_schema: {type: object, properties: {value: {type: number}}, required: [value]}
  nodes:
    - {id: double, type: agent, agent_name: Doubler, input: {value: "{{workflow.input.value}}"}}
    - {id: again, type: agent, agent_name: Doubler, depends_on: [double]}
  output_mapping: {value: "{{again.output.value}}"}
"#;

#[tokio::test]
async fn a_chain_runs_end_to_end() {
    let m = mesh(&[CHAIN]).await;
    let r = m.run("Chain", json!({"value": 3})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"value": 12})));
    assert_eq!(r.nodes.get("double").map(String::as_str), Some("success"));
}

#[tokio::test]
async fn invalid_input_is_refused_at_once_listing_the_violation() {
    let m = mesh(&[CHAIN]).await;
    let r = m.run("Chain", json!({"value": "three"})).await;
    assert_eq!(r.status, "failure");
    let e = r.error.unwrap();
    assert!(e.contains("input_schema") && e.contains("/value"), "{e}");
    assert!(r.execution_id.is_none(), "no run was created");
}

const BRANCHES: &str = r#"
name: Branches
workflow:
  description: every control node
  nodes:
    - {id: check, type: conditional, condition: "{{workflow.input.n}} > 10", true_branch: big, false_branch: small}
    - {id: big, type: agent, agent_name: Echo, depends_on: [check], input: {size: big}}
    - {id: small, type: agent, agent_name: Echo, depends_on: [check], input: {size: small}}
    - id: route
      type: switch
      cases: [{when: "{{workflow.input.n}} in [1, 2, 3]", then: few}]
      default: many
    - {id: few, type: agent, agent_name: Echo, depends_on: [route], input: {count: few}}
    - {id: many, type: agent, agent_name: Echo, depends_on: [route], input: {count: many}}
    - {id: each, type: map, items: "{{workflow.input.list}}", node: one, concurrency_limit: 2}
    - {id: one, type: agent, agent_name: Doubler, input: {value: "{{_map_item}}"}}
    - id: both
      type: fork
      branches:
        - {id: a, agent_name: Doubler, input: {value: 1}, output_key: first}
        - {id: b, agent_name: Echo, input: {v: 2}, output_key: second}
    - {id: j, type: join, depends_on: [big, small, few, many], wait_for: [big, small, few, many], strategy: n_of_m, n: 2}
    - {id: l, type: loop, node: step, condition: "{{_loop_iteration}} < 2", max_iterations: 5, delay: 50ms}
    - {id: step, type: agent, agent_name: Echo, input: {i: "{{_loop_iteration}}"}}
  output_mapping:
    size: {coalesce: ["{{big.output.size}}", "{{small.output.size}}"]}
    count: {coalesce: ["{{few.output.count}}", "{{many.output.count}}"]}
    doubled: "{{each.output.results}}"
    fork: "{{both.output}}"
    joined: "{{j.output}}"
    loop: "{{l.output}}"
    last_step: "{{step.output.i}}"
"#;

#[tokio::test]
async fn every_control_node_works_over_nats() {
    let m = mesh(&[BRANCHES]).await;
    let r = m.run("Branches", json!({"n": 2, "list": [1, 2, 3]})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(
        r.output,
        Some(json!({
            "size": "small",
            "count": "few",
            "doubled": [{"value": 2}, {"value": 4}, {"value": 6}],
            "fork": {"first": {"value": 2}, "second": {"v": 2}},
            "joined": {"small": {"size": "small"}, "few": {"count": "few"}},
            "loop": {"iterations_completed": 3, "stopped_reason": "condition_false"},
            "last_step": 2
        }))
    );
    assert_eq!(r.nodes.get("big").map(String::as_str), Some("skipped"));
}

const RETRY: &str = r#"
name: Retry
workflow:
  description: retries
  nodes:
    - id: flaky
      type: agent
      agent_name: Flaky
      input: {}
      retry_strategy: {limit: 3, backoff: {duration: 10ms}, non_retryable_errors: [invalid]}
    - id: fatal
      type: agent
      agent_name: Fatal
      depends_on: [flaky]
      input: {}
      retry_strategy: {limit: 3, backoff: {duration: 10ms}, non_retryable_errors: [invalid]}
  output_mapping: {flaky: "{{flaky.output}}"}
"#;

#[tokio::test]
async fn retries_back_off_and_non_retryable_kinds_stop_them() {
    let m = mesh(&[RETRY]).await;
    let r = m.run("Retry", json!({})).await;
    assert_eq!(r.status, "failure");
    let e = r.error.unwrap();
    assert!(
        e.contains("fatal") && e.contains("bad request") && e.contains("attempt 1 of 4"),
        "{e}"
    );
    assert_eq!(
        r.nodes.get("flaky").map(String::as_str),
        Some("success"),
        "flaky succeeded on its third call"
    );
}

const BAD_AGENTS: &str = r#"
name: BadAgents
workflow:
  description: agents that misbehave
  fail_fast: false
  nodes:
    - {id: liar, type: agent, agent_name: Liar, input: {}}
    - {id: ghost, type: agent, agent_name: Ghost, input: {}}
    - {id: sleepy, type: agent, agent_name: Sleepy, input: {}, timeout: 200ms, retry_strategy: {limit: 1, retry_policy: OnError, backoff: {duration: 10ms}}}
  output_mapping: {}
"#;

#[tokio::test]
async fn schema_violations_missing_agents_and_timeouts_fail_with_clear_errors() {
    let m = mesh(&[BAD_AGENTS]).await;
    let mut errors = Vec::new();
    let r = invoke(&m.client, "mesh", "BadAgents", &json!({}), TIMEOUT, |p| {
        if let WorkflowDataPart::NodeExecutionResult(n) = p {
            errors.push((
                n.node_id.clone(),
                n.error_message.clone().unwrap_or_default(),
            ));
        }
    })
    .await
    .unwrap();
    assert_eq!(r.status, "failure");
    let find = |id: &str| {
        errors
            .iter()
            .find(|(n, _)| n == id)
            .map(|(_, e)| e.clone())
            .unwrap_or_default()
    };
    assert!(find("liar").contains("answer"), "liar: {}", find("liar"));
    assert!(
        find("ghost").contains("has no card on the mesh"),
        "ghost: {}",
        find("ghost")
    );
    assert!(
        find("sleepy").contains("timed out after 0.2 s")
            && find("sleepy").contains("attempt 2 of 2"),
        "sleepy: {}",
        find("sleepy")
    );
}

const GATE: &str = r#"
name: Gate
workflow:
  description: an approval, and a cancellable wait
  nodes:
    - {id: gate, type: approval, approvers: [alice], message: "ok to go?", timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: true}}
  output_mapping: {went: "{{go.output.went}}", by: "{{gate.output.by}}"}
"#;

async fn send(client: &async_nats::Client, workflow: &str, request: &Request) -> Value {
    let subject = subjects::agent_request("mesh", workflow);
    let reply = client
        .request(subject, serde_json::to_vec(request).unwrap().into())
        .await
        .unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

#[tokio::test]
async fn approvals_reach_the_run_and_bad_decisions_are_refused() {
    let m = mesh(&[GATE]).await;
    let client = m.client.clone();
    let run =
        tokio::spawn(
            async move { invoke(&client, "mesh", "Gate", &json!({}), TIMEOUT, |_| {}).await },
        );
    // Wait for the approval request on the approvals subject.
    let mut approvals = m
        .client
        .subscribe(subjects::approvals("mesh", "Gate"))
        .await
        .unwrap();
    let msg = approvals.next().await.unwrap();
    let part: Part = serde_json::from_slice(&msg.payload).unwrap();
    let execution = part.as_data().unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let decide = |by: &str| {
        let d = WorkflowApprovalDecision {
            execution_id: execution.clone(),
            node_id: "gate".into(),
            decision: Decision::Approve,
            by: Some(by.into()),
            comment: None,
        };
        let message = Message::new(
            format!("decision-{by}"),
            Role::User,
            vec![Part::data_part(&d)],
        );
        Request::message_send(format!("d-{by}").as_str(), message)
    };
    // Unsigned, a decision that says it is alice's is refused; signed by another key, too.
    let refused = send(&m.client, "Gate", &decide("alice")).await;
    assert_eq!(refused["result"]["status"]["state"], "failed", "{refused}");
    assert!(refused.to_string().contains("is not signed"), "{refused}");
    let mallory = agent_sdk::Signer::generate();
    let refused = support::mesh::ask_signed(&m.client, "Gate", &decide("mallory"), &mallory).await;
    assert_eq!(refused["result"]["status"]["state"], "failed", "{refused}");
    assert!(refused.to_string().contains("may not decide"), "{refused}");
    let accepted =
        support::mesh::ask_signed(&m.client, "Gate", &decide("alice"), support::mesh::alice())
            .await;
    assert_eq!(
        accepted["result"]["status"]["state"], "completed",
        "{accepted}"
    );
    let r = run.await.unwrap().unwrap();
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"went": true, "by": "alice"})));
}

#[tokio::test]
async fn cancel_reaches_the_run_and_it_ends_cancelled() {
    let m = mesh(&[GATE]).await;
    let mut approvals = m
        .client
        .subscribe(subjects::approvals("mesh", "Gate"))
        .await
        .unwrap();
    let client = m.client.clone();
    let run =
        tokio::spawn(
            async move { invoke(&client, "mesh", "Gate", &json!({}), TIMEOUT, |_| {}).await },
        );
    let msg = approvals.next().await.unwrap();
    let part: Part = serde_json::from_slice(&msg.payload).unwrap();
    let execution = part.as_data().unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    // By its execution id: an operator's cancel (unsigned, it is refused).
    let cancel = Request::tasks_cancel("c1", execution.as_str());
    let refused = send(&m.client, "Gate", &cancel).await;
    assert!(
        refused.to_string().contains("operator's signature"),
        "{refused}"
    );
    let answer =
        support::mesh::ask_signed(&m.client, "Gate", &cancel, support::mesh::operator()).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let r = run.await.unwrap().unwrap();
    assert_eq!(r.status, "cancelled");
    assert_eq!(r.nodes.get("gate").map(String::as_str), Some("cancelled"));
    assert_eq!(r.nodes.get("go").map(String::as_str), Some("skipped"));
}

#[tokio::test]
async fn the_same_request_twice_makes_one_run() {
    let m = mesh(&[CHAIN]).await;
    let inbox = m.client.new_inbox();
    let mut replies = m.client.subscribe(inbox.clone()).await.unwrap();
    let message = Message::new(
        "same-message",
        Role::User,
        vec![messages::payload::wrap(json!({"value": 1}))],
    );
    let request = serde_json::to_vec(&Request::message_send("r1", message)).unwrap();
    for _ in 0..2 {
        m.client
            .publish_with_reply(
                subjects::agent_request("mesh", "Chain"),
                inbox.clone(),
                request.clone().into(),
            )
            .await
            .unwrap();
    }
    let first = replies.next().await.unwrap();
    let v: Value = serde_json::from_slice(&first.payload).unwrap();
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    // A second, different run finishes after the first; if the duplicate had made a run,
    // its reply would have reached the inbox before this one's.
    let r = m.run("Chain", json!({"value": 2})).await;
    assert_eq!(r.status, "success");
    m.client.flush().await.unwrap();
    let extra = tokio::time::timeout(Duration::from_millis(200), replies.next()).await;
    assert!(extra.is_err(), "a second reply arrived: {extra:?}");
}

const OUTER: &str = r#"
name: Outer
workflow:
  description: calls Chain as a workflow node
  nodes:
    - {id: sub, type: workflow, workflow_name: Chain, input: {value: "{{workflow.input.value}}"}}
  output_mapping: {value: "{{sub.output.value}}"}
"#;

#[tokio::test]
async fn a_workflow_node_calls_another_workflow_as_an_agent() {
    let m = mesh(&[CHAIN, OUTER]).await;
    let r = m.run("Outer", json!({"value": 5})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"value": 20})));
}

#[tokio::test]
async fn requests_deeper_than_max_call_depth_are_refused() {
    let m = mesh(&[CHAIN]).await;
    let message = Message::new(
        "deep",
        Role::User,
        vec![messages::payload::wrap(json!({"value": 1}))],
    );
    let request = Request::message_send("deep", message);
    let mut h = async_nats::HeaderMap::new();
    h.insert(headers::CALL_DEPTH, "11");
    let reply = m
        .client
        .request_with_headers(
            subjects::agent_request("mesh", "Chain"),
            h,
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v["result"]["status"]["state"], "failed");
    assert!(v.to_string().contains("max_call_depth"), "{v}");
}

#[tokio::test]
async fn the_node_publishes_its_card_when_pinged() {
    let m = mesh(&[CHAIN]).await;
    let mut cards = m
        .client
        .subscribe(subjects::agent_cards("mesh"))
        .await
        .unwrap();
    m.client.flush().await.unwrap();
    m.client
        .publish(subjects::discovery_ping("mesh"), "".into())
        .await
        .unwrap();
    loop {
        let msg = cards.next().await.unwrap();
        let card: messages::card::AgentCard = serde_json::from_slice(&msg.payload).unwrap();
        if card.name == "Chain" {
            assert!(card.is_workflow());
            assert!(card.mermaid_source().is_some());
            assert!(card.schemas().0.is_some());
            break;
        }
    }
    drop(m.node);
}

#[tokio::test]
async fn an_ended_run_leaves_no_timer_in_the_bucket() {
    let m = mesh(&[CHAIN]).await;
    let r = m.run("Chain", json!({"value": 1})).await;
    assert_eq!(r.status, "success");
    let js = async_nats::jetstream::new(m.client.clone());
    let timers = js
        .get_key_value(workflow_node::shell::run::names::wakes_bucket("mesh"))
        .await
        .unwrap();
    // The disarming purges are published before the final reply's event is acked; wait for
    // the bucket to show them, boundedly.
    let mut left = Vec::new();
    for _ in 0..100 {
        let keys = timers.keys().await.unwrap();
        left = keys
            .filter_map(|k| async { k.ok() })
            .collect::<Vec<_>>()
            .await;
        if left.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
        m.client.flush().await.unwrap();
    }
    assert!(left.is_empty(), "timers left behind: {left:?}");
}

#[tokio::test]
async fn an_unreadable_timer_entry_is_purged() {
    let m = mesh(&[CHAIN]).await;
    let js = async_nats::jetstream::new(m.client.clone());
    let timers = js
        .get_key_value(workflow_node::shell::run::names::wakes_bucket("mesh"))
        .await
        .unwrap();
    timers
        .put("Chain.garbage.t1", "not a timer".into())
        .await
        .unwrap();
    // Every replica watching the bucket purges it; poll the bucket for up to 10 s.
    let mut purged = false;
    for _ in 0..200 {
        if timers.get("Chain.garbage.t1").await.unwrap().is_none() {
            purged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(purged, "the garbage entry is still in the timers bucket");
}

const GHOST: &str = r#"
name: Ghostly
workflow:
  description: calls an agent that has no card
  nodes:
    - {id: ghost, type: agent, agent_name: Ghost, input: {}}
  output_mapping: {}
"#;

#[tokio::test]
async fn a_slow_event_stays_with_its_replica_instead_of_being_redelivered() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    // The card wait (2.5 s) outlasts the ack wait (1 s): only the heartbeat keeps the
    // event from going to the second replica, which would wait (and ping) again.
    let config = Config {
        ack_wait: Duration::from_secs(1),
        card_wait: Duration::from_millis(2500),
        ..Config::default()
    };
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let w = vec![wf(GHOST)];
        nodes.push(
            WorkflowNode::start(client.clone(), w, config.clone())
                .await
                .unwrap(),
        );
    }
    let mut pings = client
        .subscribe(subjects::discovery_ping("mesh"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let r = invoke(&client, "mesh", "Ghostly", &json!({}), TIMEOUT, |_| {})
        .await
        .unwrap();
    assert_eq!(r.status, "failure");
    assert!(r.error.unwrap().contains("has no card on the mesh"));
    client.flush().await.unwrap();
    let mut count = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), pings.next()).await {
        count += 1;
    }
    assert_eq!(count, 1, "the dispatch event was handled once");
}
