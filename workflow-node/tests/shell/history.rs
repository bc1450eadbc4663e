//! Run history and agents' status updates over a real nats-server: every event applied to
//! a run is kept, in order, with the replica that applied it, across a replica restart;
//! an agent's status update reaches the run's caller as progress, and garbage on the
//! status subjects is dropped without harm.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use agent_sdk::workflow::{invoke, invoke_as, new_task_id};
use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use futures::StreamExt;
use messages::workflow::{Decision, WorkflowApprovalDecision, WorkflowDataPart};
use messages::{subjects, Message, Part, Request, Role};
use serde_json::json;
use workflow_node::definition::parse_str;
use workflow_node::shell::Inspector;
use workflow_node::shell::{run::names, Config, WorkflowNode};

use crate::support;

const TIMEOUT: Duration = Duration::from_secs(60);

const GATE: &str = r#"
name: Gate
workflow:
  description: an agent, an approval, an agent
  nodes:
    - {id: first, type: agent, agent_name: Echo, input: {n: 1}}
    - {id: gate, type: approval, depends_on: [first], timeout: 1h}
    - {id: last, type: agent, agent_name: Echo, depends_on: [gate], input: {n: 2}}
  output_mapping: {n: "{{last.output.n}}"}
"#;

const ASK: &str = r#"
name: Ask
workflow:
  description: one call to an agent that reports progress
  nodes:
    - {id: ask, type: agent, agent_name: Talker, input: {}}
  output_mapping: {done: "{{ask.output.done}}"}
"#;

fn echo() -> AgentBuilder {
    AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }))
}

/// Replica `replica`, whose operator is alice (she decides the gate, which lists no
/// approvers).
fn config(replica: &str) -> Config {
    let alice = support::mesh::alice().public_key().to_string();
    Config {
        replica: Some(replica.into()),
        operators: vec![alice.clone()],
        approvers: [("alice".to_string(), alice)].into(),
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lists_a_runs_events_in_order_across_a_replica_restart() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let _echo = echo().serve(client.clone()).await.unwrap();
    let wf = || parse_str(GATE, "gate.yaml").unwrap();
    let first = WorkflowNode::start(client.clone(), vec![wf()], config("replica-a"))
        .await
        .unwrap();
    let mut approvals = client
        .subscribe(subjects::approvals("mesh", "Gate"))
        .await
        .unwrap();
    let task_id = new_task_id();
    let execution = names::execution_id("Gate", &task_id);
    let caller = client.clone();
    let task = task_id.clone();
    let run = tokio::spawn(async move {
        invoke_as(&caller, "mesh", "Gate", &json!({}), TIMEOUT, &task, |_| {}).await
    });
    // The run reached its gate on replica A: A goes, B takes over.
    tokio::time::timeout(TIMEOUT, approvals.next())
        .await
        .expect("an approval request")
        .unwrap();
    first.shutdown().await;
    let _second = WorkflowNode::start(client.clone(), vec![wf()], config("replica-b"))
        .await
        .unwrap();
    let decision = WorkflowApprovalDecision {
        execution_id: execution.0.clone(),
        node_id: "gate".into(),
        decision: Decision::Approve,
        by: None,
        comment: Some("fine".into()),
    };
    let message = Message::new("d1", Role::User, vec![Part::data_part(&decision)]);
    let request = Request::message_send("d1", message);
    let answer = support::mesh::ask_signed(&client, "Gate", &request, support::mesh::alice()).await;
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    let result = tokio::time::timeout(TIMEOUT, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(result.status, "success", "{result:?}");

    let inspector = Inspector::open(client.clone(), "mesh").await.unwrap();
    let history = inspector.history("Gate", &execution).await.unwrap();
    let summary: Vec<(u64, &str, Option<&str>, &str)> = history
        .iter()
        .map(|e| (e.n, e.event.as_str(), e.node.as_deref(), e.replica.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, "started", None, "replica-a"),
            (2, "call_succeeded", Some("first"), "replica-a"),
            (3, "approval_decided", Some("gate"), "replica-b"),
            (4, "call_succeeded", Some("last"), "replica-b"),
        ],
        "{history:#?}"
    );
    assert_eq!(
        history[2].detail.as_deref(),
        Some("approved by alice: fine")
    );
    assert_eq!(history[3].status.as_str(), "success");
    assert!(history.windows(2).all(|w| w[0].at <= w[1].at));
    // The record says when the run ended and what each node cost.
    let run = inspector
        .read_run("Gate", &execution)
        .await
        .unwrap()
        .unwrap();
    assert!(run.record.ended_at.is_some());
    assert_eq!(run.record.applied, 4);
    assert_eq!(run.record.attempts.get("first"), Some(&1));
    assert!(run.record.asks.is_empty(), "the gate no longer waits");
}

/// `Talker`: says how it is going (a text, then a DataPart), then answers once
/// `release` is notified (updates that came after the run's end would be dropped).
fn talker(release: Arc<Notify>) -> AgentBuilder {
    AgentBuilder::new("Talker")
        .description("reports progress, then answers")
        .handler(handler_fn(move |req: NodeRequest| {
            let release = release.clone();
            async move {
                let sent = req.send_status("half way").await.expect("published");
                assert!(sent, "a workflow's call asks for status updates");
                let progress = json!({"percent": 50}).as_object().unwrap().clone();
                req.send_status_parts(vec![Part::data(progress)])
                    .await
                    .expect("published");
                release.notified().await;
                Ok(json!({"done": true}))
            }
        }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_status_update_reaches_the_runs_caller_and_garbage_is_dropped() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let release = Arc::new(Notify::new());
    let _talker = talker(release.clone()).serve(client.clone()).await.unwrap();
    let wf = parse_str(ASK, "ask.yaml").unwrap();
    let _node = WorkflowNode::start(client.clone(), vec![wf], Config::default())
        .await
        .unwrap();
    // Garbage, and an update for a run that does not exist, on the status subjects.
    let status = |token: &str| subjects::agent_status("mesh", "Ask", token);
    for (subject, body) in [
        (status("garbage"), b"not json".to_vec()),
        (status("e1_ask_x_1"), b"{\"parts\": 1}".to_vec()),
        (status("0123abcd_ask_x_1"), br#"{"jsonrpc":"2.0","id":"x","result":{"kind":"status-update","taskId":"t","contextId":"c","status":{"state":"working","message":{"kind":"message","role":"agent","messageId":"m","parts":[{"kind":"text","text":"hi"}]}},"final":false}}"#.to_vec()),
    ] {
        client.publish(subject, body.into()).await.unwrap();
    }
    let mut seen = Vec::new();
    let result = invoke(&client, "mesh", "Ask", &json!({}), TIMEOUT, |p| {
        if let WorkflowDataPart::AgentStatus(s) = p {
            seen.push(s.clone());
            if seen.len() == 2 {
                release.notify_one();
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(result.status, "success", "{result:?}");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].node_id, "ask");
    assert_eq!(seen[0].state, "working");
    assert_eq!(seen[0].text.as_deref(), Some("half way"));
    assert!(seen[0].sub_task_id.ends_with("_ask_x_1"), "{seen:?}");
    assert_eq!(seen[1].data, Some(json!({"percent": 50})));
}
