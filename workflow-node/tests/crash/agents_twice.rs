//! Agents that answer more than once: a harness agent served here, on the raw wire (its
//! replies proven with the call's token, as any agent's must be, but each with a message id
//! of its own, so the event stream's de-duplication does not absorb the copy as it does
//! for the SDK's agents), that answers every call twice, with the same reply or with two
//! different ones; and one that answers an attempt after the node gave up on it (its
//! timeout passed and the retry was sent). The run takes one result per attempt, the
//! first stored, ends once with the right output, and its history holds each applied
//! event once.

use std::time::Duration;

use agent_sdk::workflow::invoke_as;
use futures::StreamExt;
use messages::a2a::{AgentReply, Message, Part, Role, Task, TaskState, TaskStatus};
use messages::jsonrpc::{Method, Request, Response};
use messages::workflow::{WorkflowNodeRequest, WorkflowNodeResult};
use messages::{call_proof, headers, subjects};
use serde_json::{json, Value};
use workflow_node::shell::{run::names, Inspector, RunRecord};

use crate::support;
use crate::support::crash::replicas::{write_file, Logs, Spawner};

/// How the harness agent answers.
#[derive(Clone, Copy)]
enum Answers {
    /// Twice the same reply.
    SameTwice,
    /// Two different replies: `{"n": 1}` then `{"n": 2}`.
    DifferentTwice,
    /// Attempt 1 is not answered until attempt 2 comes (after the node's timeout); then
    /// attempt 1 is answered `{"late": true}`, and attempt 2 `{"n": 2}`.
    LateAfterRetry,
}

/// One call as the harness agent took it.
struct Call {
    reply_to: String,
    token: String,
    id: messages::jsonrpc::RequestId,
    task_id: String,
    context_id: String,
    attempt: u32,
}

fn call_of(msg: &async_nats::Message) -> Option<Call> {
    let request: Request = serde_json::from_slice(&msg.payload).ok()?;
    let Method::MessageSend(params) = &request.method else {
        return None;
    };
    let node: WorkflowNodeRequest = params.message.find_data()?.ok()?;
    Some(Call {
        reply_to: msg.reply.as_ref()?.to_string(),
        token: msg
            .headers
            .as_ref()?
            .get(call_proof::CALL_TOKEN)?
            .to_string(),
        id: request.id.clone(),
        task_id: params.message.task_id.clone()?,
        context_id: params.message.context_id.clone().unwrap_or_default(),
        attempt: node.attempt.unwrap_or(1),
    })
}

/// Sends `call` a completed reply with `output`, proven with its token, under message id
/// `msg_id`.
async fn answer(client: &async_nats::Client, call: &Call, output: Value, msg_id: &str) {
    let parts = vec![Part::data_part(&WorkflowNodeResult::success(output))];
    let mut message = Message::new(format!("{}-reply", call.task_id), Role::Agent, parts);
    message.task_id = Some(call.task_id.clone());
    message.context_id = Some(call.context_id.clone());
    let mut status = TaskStatus::new(TaskState::Completed);
    status.message = Some(message);
    let task = Task {
        id: call.task_id.clone(),
        context_id: call.context_id.clone(),
        status,
        artifacts: None,
        metadata: None,
    };
    let reply = Response::result(call.id.clone(), AgentReply::Task(task));
    let bytes = serde_json::to_vec(&reply).expect("encode");
    let mut h = async_nats::HeaderMap::new();
    h.insert(headers::MSG_ID, msg_id);
    let mac = call_proof::mac(&call.token, &call.reply_to, &bytes);
    h.insert(call_proof::CALL_MAC, mac.as_str());
    client
        .publish_with_headers(call.reply_to.clone(), h, bytes.into())
        .await
        .expect("publish a reply");
    client.flush().await.expect("flush");
}

/// Serves agent `Twice` on `client`, answering as `how` says.
async fn serve(client: async_nats::Client, how: Answers) {
    let mut requests = client
        .subscribe(subjects::agent_request("mesh", "Twice"))
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");
    tokio::spawn(async move {
        let mut held: Option<Call> = None;
        while let Some(msg) = requests.next().await {
            let Some(call) = call_of(&msg) else { continue };
            let first = call_proof::reply_msg_id(&call.token);
            match how {
                Answers::SameTwice => {
                    answer(&client, &call, json!({"n": 1}), &first).await;
                    answer(&client, &call, json!({"n": 1}), &format!("{first}.again")).await;
                }
                Answers::DifferentTwice => {
                    answer(&client, &call, json!({"n": 1}), &first).await;
                    answer(&client, &call, json!({"n": 2}), &format!("{first}.again")).await;
                }
                Answers::LateAfterRetry if call.attempt == 1 => held = Some(call),
                Answers::LateAfterRetry => {
                    if let Some(late) = held.take() {
                        let id = call_proof::reply_msg_id(&late.token);
                        answer(&client, &late, json!({"late": true}), &id).await;
                    }
                    answer(&client, &call, json!({"n": 2}), &first).await;
                }
            }
        }
    });
}

const WORKFLOW: &str = r#"
name: TwiceFlow
workflow:
  description: one call of an agent that answers more than once
  nodes:
    - {id: ask, type: agent, agent_name: Twice, input: {}, timeout: 2s, retry_strategy: {limit: 2, backoff: {duration: 100ms}}}
  output_mapping: {out: "{{ask.output}}"}
"#;

/// A stub named `Twice` that takes its calls and never answers in a test's time: it
/// publishes the agent's card.
const CARD_HOLDER: &str = r#"
agents:
  - name: Twice
    delay: 1h
    rules: [{output: {never: true}}]
"#;

/// Runs the workflow once against the agent answering as `how`; checks one final reply,
/// success, a whole history and one result per attempt; the run's output.
async fn run_once(how: Answers) -> Value {
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let agent = async_nats::connect(server.url()).await.expect("connect");
    serve(agent, how).await;
    // Its card, published by a stub of the same name that never answers in a test's time
    // (the node calls only agents it has a card of).
    let card = write_file(dir.path(), "card.yaml", CARD_HOLDER);
    let card = agent_sdk::stub::load_stub_file(card).expect("stub file");
    let _card = agent_sdk::stub::serve_stubs(client.clone(), "mesh", card)
        .await
        .expect("stubs");
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "twice.yaml", WORKFLOW),
        ack_wait: 5.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let mut replica = spawner.spawn(1, &server.url());
    replica.wait_ready(Duration::from_secs(30)).await;
    let task = "twice-1";
    let execution = names::execution_id("TwiceFlow", task);
    let result = invoke_as(
        &client,
        "mesh",
        "TwiceFlow",
        &json!({}),
        Duration::from_secs(20),
        task,
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("no final reply: {e}\n{}", logs.tail()));
    assert_eq!(result.status, "success", "{result:?}\n{}", logs.tail());

    let js = async_nats::jetstream::new(client.clone());
    let kv = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("runs bucket");
    let key = names::run_key("TwiceFlow", &execution);
    let record = RunRecord::from_entry(&kv.get(&key).await.expect("read").expect("a record"))
        .expect("a record");
    assert!(record.state.status.is_terminal());
    let inspector = Inspector::open(client.clone(), "mesh")
        .await
        .expect("inspector");
    let history = inspector
        .history("TwiceFlow", &execution)
        .await
        .expect("history");
    let ns: Vec<u64> = history.iter().map(|e| e.n).collect();
    assert_eq!(ns, (1..=record.applied).collect::<Vec<_>>(), "{history:#?}");
    let results: Vec<_> = history
        .iter()
        .filter(|e| e.event == "call_succeeded")
        .map(|e| e.attempt)
        .collect();
    let attempts = result.output.clone().expect("an output");
    eprintln!("results taken, by attempt: {results:?}; output {attempts}");
    let mut seen = results.clone();
    seen.dedup();
    assert_eq!(seen, results, "one result per attempt: {results:?}");
    attempts["out"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_sends_its_reply_twice_is_taken_once() {
    assert_eq!(run_once(Answers::SameTwice).await, json!({"n": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_sends_two_different_replies_is_taken_at_its_first() {
    assert_eq!(run_once(Answers::DifferentTwice).await, json!({"n": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_after_the_node_gave_up_on_its_attempt_is_ignored() {
    assert_eq!(run_once(Answers::LateAfterRetry).await, json!({"n": 2}));
}
