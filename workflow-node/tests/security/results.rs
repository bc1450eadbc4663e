//! Results only from the agent that was called, under the shipped configuration: the
//! `ops` user learns every id of a call it can see (the status subject of the agent's
//! updates, the task id in their payloads, a sub-workflow's record in the runs bucket) and
//! makes Echo, whose replies the mesh lets through to any response subject, its deputy.
//! The node never counts what Echo sends; the run ends with the held agent's real answer.
//! And a caller cannot turn an agent's own input schema off by sending one of its own.

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_sdk::{AgentHandle, Mesh, NodeRequest};
use async_nats::HeaderMap;
use futures::StreamExt;
use messages::a2a::{AgentReply, Message, Part, Role};
use messages::jsonrpc::{Outcome, Request, Response};
use messages::payload::wrap;
use messages::reply::TaskReading;
use messages::workflow::WorkflowNodeRequest;
use messages::{call_proof, headers, subjects};
use serde_json::json;
use tokio::sync::{mpsc, Mutex};
use workflow_node::core::ExecutionId;
use workflow_node::shell::{run::names, Inspector};

use crate::support::mesh::{settled, workflows};
use crate::support::security::{node_serving, stubs_file, Secure, WAIT};

const NS: &str = "mesh";

const FORGED: &str = "FORGED by ops via Echo";

const HELD: &str = r#"
name: Held
workflow:
  description: one call to a Doubler the test holds
  nodes:
    - {id: work, type: agent, agent_name: Doubler, input: {value: 1}}
  output_mapping: {answer: "{{work.output}}"}
"#;

const HELD_CHILD: &str = r#"
name: HeldChild
workflow:
  description: one call to a Doubler the test holds, as a sub-workflow
  nodes:
    - {id: work, type: agent, agent_name: Doubler, input: {value: 1}}
  output_mapping: {answer: "{{work.output}}"}
"#;

const HELD_PARENT: &str = r#"
name: HeldParent
workflow:
  description: calls HeldChild
  nodes:
    - {id: sub, type: workflow, workflow_name: HeldChild, input: {}}
  output_mapping: {child: "{{sub.output}}"}
"#;

const GATED_PARENT: &str = r#"
name: GatedParent
workflow:
  description: a held Doubler call, then EchoChild as a sub-workflow
  nodes:
    - {id: first, type: agent, agent_name: Doubler, input: {value: 1}}
    - {id: sub, type: workflow, workflow_name: EchoChild, depends_on: [first], input: {value: 7}}
  output_mapping: {child: "{{sub.output}}"}
"#;

const ECHO_CHILD: &str = r#"
name: EchoChild
workflow:
  description: one call to Echo, as a sub-workflow
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {value: 7}}
  output_mapping: {echoed: "{{echo.output.value}}"}
"#;

/// A `Doubler` served by user `agents` that says it is holding (a status update), tells the
/// test which run called, and answers `{"value": 42}` once released.
struct HeldDoubler {
    _handle: AgentHandle,
    calls: mpsc::UnboundedReceiver<String>,
    release: mpsc::UnboundedSender<()>,
}

async fn held_doubler(client: &async_nats::Client) -> HeldDoubler {
    let (calls_tx, calls) = mpsc::unbounded_channel();
    let (release, release_rx) = mpsc::unbounded_channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let handle = agent_sdk::AgentBuilder::new("Doubler")
        .handler(agent_sdk::handler_fn(move |req: NodeRequest| {
            let (calls_tx, release_rx) = (calls_tx.clone(), release_rx.clone());
            async move {
                req.send_status("holding").await.expect("a status update");
                let execution = req.workflow.map(|w| w.execution_id).unwrap_or_default();
                let _ = calls_tx.send(execution);
                release_rx.lock().await.recv().await;
                Ok(json!({"value": 42}))
            }
        }))
        .serve(client.clone())
        .await
        .expect("the held Doubler serves as user agents");
    HeldDoubler {
        _handle: handle,
        calls,
        release,
    }
}

/// Every id of a call that the status updates on `updates` show: the last token of the
/// subject, and the task id in the payload of the one that says "holding".
async fn ids_in_status_updates(updates: &mut async_nats::Subscriber) -> BTreeSet<String> {
    loop {
        let msg = tokio::time::timeout(WAIT, updates.next())
            .await
            .expect("a status update in time")
            .expect("the subscription lives");
        if !String::from_utf8_lossy(&msg.payload).contains("holding") {
            continue;
        }
        let response: Response = serde_json::from_slice(&msg.payload).expect("a response");
        let Outcome::Result(reply) = response.outcome else {
            panic!("an error as a status update: {response:?}");
        };
        let AgentReply::StatusUpdate(update) = *reply else {
            panic!("not a status update: {reply:?}");
        };
        return [
            subjects::last_token(&msg.subject).to_owned(),
            update.task_id,
        ]
        .into_iter()
        .collect();
    }
}

/// The token ops makes up for its second try.
const OPS_TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// Asks Echo, as `ops`, to answer `{"v": FORGED}` for task `id` on `workflow`'s response
/// subject (with a call token of ops' own, when given), and waits until `workflow`'s event
/// stream has stored Echo's reply and the node has processed everything in it.
async fn forge_via_echo(s: &Stage, workflow: &str, id: &str, token: Option<&str>) {
    let js = async_nats::jetstream::new(s.node_client.clone());
    let mut stream = js
        .get_stream(names::event_stream(NS, workflow))
        .await
        .expect("the event stream");
    let before = stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence;
    let mut message = Message::new(
        format!("forge-{id}-{}", token.is_some()),
        Role::User,
        vec![wrap(json!({"v": FORGED}))],
    );
    message.task_id = Some(id.to_owned());
    let request = Request::message_send("forge", message);
    let mut h = HeaderMap::new();
    h.insert(
        headers::REPLY_TO,
        subjects::agent_response(NS, workflow, id).as_str(),
    );
    if let Some(token) = token {
        h.insert(call_proof::CALL_TOKEN, token);
    }
    s.ops
        .publish_with_headers(
            subjects::agent_request(NS, "Echo"),
            h,
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .expect("ops may send Echo requests");
    let deadline = tokio::time::Instant::now() + WAIT;
    while stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence
        == before
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Echo's reply never reached the stream of {workflow}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    settled(&s.node_client, workflow).await;
}

/// Whether run `execution` of `workflow` has ended, as `inspector` reads it.
async fn ended(inspector: &Inspector, workflow: &str, execution: &str) -> bool {
    let run = inspector
        .read_run(workflow, &ExecutionId(execution.to_owned()))
        .await
        .expect("reading the run")
        .expect("the run");
    run.record.state.status.is_terminal()
}

/// The secured mesh with the node serving `yamls`, Echo (the deputy) and the held Doubler.
struct Stage {
    secure: Secure,
    node: workflow_node::shell::WorkflowNode,
    node_client: async_nats::Client,
    ops: async_nats::Client,
    alice: Mesh,
    doubler: HeldDoubler,
    _stubs: Vec<AgentHandle>,
}

async fn stage(yamls: &[&str]) -> Stage {
    let secure = Secure::start();
    let (node, node_conn) = node_serving(&secure, workflows(yamls)).await;
    let agents = secure.connect("agents").await;
    let mut stubs = stubs_file();
    stubs.agents.retain(|a| a.name == "Echo");
    let stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs)
        .await
        .expect("Echo serves as user agents");
    let doubler = held_doubler(&agents.client).await;
    let ops = secure.connect("ops").await.client;
    let alice = Mesh::new(secure.connect("alice").await.client).timeout(WAIT);
    Stage {
        secure,
        node,
        node_client: node_conn.client,
        ops,
        alice,
        doubler,
        _stubs: stubs,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_seen_in_status_updates_forge_no_result_through_echo() {
    let mut s = stage(&[HELD]).await;
    let mut updates = s
        .ops
        .subscribe(subjects::agent_status_all(NS, "Held"))
        .await
        .expect("ops watches status updates");
    s.ops.flush().await.unwrap();
    let call = tokio::spawn(std::future::IntoFuture::into_future(
        s.alice.agent("Held").call(json!({})),
    ));
    let execution = tokio::time::timeout(WAIT, s.doubler.calls.recv())
        .await
        .expect("the call in time")
        .expect("a call");
    let ids = ids_in_status_updates(&mut updates).await;
    let inspector = Inspector::open(s.ops.clone(), NS)
        .await
        .expect("ops reads runs");
    for id in &ids {
        for token in [None, Some(OPS_TOKEN)] {
            forge_via_echo(&s, "Held", id, token).await;
            assert!(
                !ended(&inspector, "Held", &execution).await,
                "a forged result through Echo ended the call (id {id} seen by ops, token {token:?})"
            );
        }
    }
    s.doubler.release.send(()).unwrap();
    let output = call.await.unwrap().expect("Held succeeds");
    assert_eq!(
        output,
        json!({"answer": {"value": 42}}),
        "ids seen: {ids:?}"
    );
    s.node.shutdown().await;
    drop(s.secure);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_workflows_record_forges_no_result_through_echo() {
    let mut s = stage(&[HELD_PARENT, HELD_CHILD]).await;
    let call = tokio::spawn(std::future::IntoFuture::into_future(
        s.alice.agent("HeldParent").call(json!({})),
    ));
    let child = tokio::time::timeout(WAIT, s.doubler.calls.recv())
        .await
        .expect("the child's call in time")
        .expect("a call");
    // Ops reads the child's record: its caller is the parent, by the parent's sub-task id.
    let inspector = Inspector::open(s.ops.clone(), NS)
        .await
        .expect("ops reads runs");
    let run = inspector
        .read_run("HeldChild", &ExecutionId(child.clone()))
        .await
        .expect("reading the child")
        .expect("the child's record");
    let id = run
        .record
        .caller
        .sub_task_id
        .clone()
        .expect("the parent's sub-task id");
    let record = serde_json::to_string(&run.record).unwrap();
    let parent = run_of(&id);
    for token in [None, Some(OPS_TOKEN)] {
        forge_via_echo(&s, "HeldParent", &id, token).await;
        assert!(
            !ended(&inspector, "HeldParent", &parent).await,
            "a forged result through Echo ended the sub-workflow's call (id {id}, record {record})"
        );
    }
    // Nor does the id let ops join the child's run as its caller, to hear its output.
    let mut message = Message::new("join", Role::User, vec![wrap(json!({}))]);
    message.task_id = Some(id.clone());
    let request = Request::message_send("join", message);
    let subject = subjects::agent_request(NS, "HeldChild");
    let answer = ask_as(&s.ops, subject, "HeldParent", &request).await;
    let reply = messages::reply::decode_reply(&answer.payload).expect("a reply");
    let task = messages::reply::final_task(reply).expect("a final task");
    let reading = messages::reply::read_task(&task).expect("readable");
    let Some(TaskReading::Failed(refusal)) = reading else {
        panic!("ops joined the child's run: {reading:?}");
    };
    let why = refusal.message.unwrap_or_default();
    assert!(why.contains("started by another call"), "{why}");
    s.doubler.release.send(()).unwrap();
    let output = call.await.unwrap().expect("HeldParent succeeds");
    assert_eq!(output, json!({"child": {"answer": {"value": 42}}}));
    s.node.shutdown().await;
    drop(s.secure);
}

/// The sub-task id of a sub-workflow call is no secret (its run id is seen by every agent
/// it calls): a cancel sent under it before the call goes out, as the caller that will
/// make it, is kept for the run it names, and must not end that run when the real caller
/// starts it with its call token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_ahead_under_a_sub_workflows_id_does_not_end_it() {
    let mut s = stage(&[GATED_PARENT, ECHO_CHILD]).await;
    let call = tokio::spawn(std::future::IntoFuture::into_future(
        s.alice.agent("GatedParent").call(json!({})),
    ));
    let parent = tokio::time::timeout(WAIT, s.doubler.calls.recv())
        .await
        .expect("the parent's first call in time")
        .expect("a call");
    // Ops predicts the id of the sub-workflow call that has not gone out yet, and cancels
    // it ahead, as the parent (unsigned: a workflow signs nothing).
    let id = workflow_node::core::TaskKey::single("sub").sub_task_id(&ExecutionId(parent), 1);
    let request = Request::tasks_cancel(id.as_str(), id.as_str());
    let subject = subjects::agent_cancel(NS, "EchoChild");
    let answer = ask_as(&s.ops, subject, "GatedParent", &request).await;
    let text = String::from_utf8_lossy(&answer.payload).into_owned();
    assert!(
        text.contains("cancel of run"),
        "the cancel was not kept: {text}"
    );
    s.doubler.release.send(()).unwrap();
    let output = call
        .await
        .unwrap()
        .expect("GatedParent succeeds: the cancel sent ahead did not end its child");
    assert_eq!(output, json!({"child": {"echoed": 7}}));
    s.node.shutdown().await;
    drop(s.secure);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_an_empty_schema_is_still_checked_against_the_agents_own() {
    let secure = Secure::start();
    let agents = secure.connect("agents").await;
    let mut stubs = stubs_file();
    stubs.agents.retain(|a| a.name == "Doubler");
    let _stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs)
        .await
        .expect("Doubler serves as user agents");
    let alice = secure.connect("alice").await.client;
    // Alice asks Doubler (whose schema wants a number `value`) with a schema of her own that
    // allows anything, and a `value` that is no number.
    let node_request = WorkflowNodeRequest {
        workflow_name: "Mine".into(),
        node_id: "n".into(),
        input_schema: Some(json!({})),
        output_schema: Some(json!({})),
        suggested_output_filename: None,
        execution_id: None,
        sub_task_id: None,
        map_index: None,
        loop_iteration: None,
        attempt: None,
    };
    let parts = vec![
        Part::data_part(&node_request),
        wrap(json!({"value": "not a number"})),
    ];
    let mut message = Message::new("schemaless", Role::User, parts);
    message.task_id = Some("schemaless".into());
    let request = Request::message_send("schemaless", message);
    let answer = tokio::time::timeout(
        WAIT,
        alice.request(
            subjects::agent_request(NS, "Doubler"),
            serde_json::to_vec(&request).unwrap().into(),
        ),
    )
    .await
    .expect("an answer in time")
    .expect("an answer");
    let reply = messages::reply::decode_reply(&answer.payload).expect("a reply");
    let task = messages::reply::final_task(reply).expect("a final task");
    let reading = messages::reply::read_task(&task).expect("readable");
    let Some(TaskReading::Failed(failure)) = reading else {
        panic!("the agent's schema was turned off: {reading:?}");
    };
    assert_eq!(
        failure.kind.as_deref(),
        Some("input_validation"),
        "{failure:?}"
    );
    let message = failure.message.unwrap_or_default();
    assert!(message.contains("the agent's input schema"), "{message}");
    assert!(
        failure
            .validation_errors
            .iter()
            .any(|e| e.contains("value")),
        "{:?}",
        failure.validation_errors
    );
}

/// `request` sent to `subject` by `client` claiming caller name `caller`; its answer.
async fn ask_as(
    client: &async_nats::Client,
    subject: String,
    caller: &str,
    request: &Request,
) -> async_nats::Message {
    let mut h = HeaderMap::new();
    h.insert(headers::CALLER, caller);
    let payload = serde_json::to_vec(request).unwrap();
    tokio::time::timeout(
        WAIT,
        client.request_with_headers(subject, h, payload.into()),
    )
    .await
    .expect("an answer in time")
    .expect("an answer")
}

/// The execution id a sub-task id starts with.
fn run_of(sub_task_id: &str) -> String {
    let (execution, _) = sub_task_id.split_once('_').expect("a sub-task id");
    execution.to_owned()
}
