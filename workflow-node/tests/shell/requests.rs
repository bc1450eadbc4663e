//! Requests to a workflow over a real nats-server: `tasks/get` of a run by task id or
//! execution id, task ids scoped by the caller's `Mesh-Caller`, and the limit on requests
//! handled at once.

use std::time::Duration;

use agent_sdk::workflow::{get_run, invoke, GetRunError};
use futures::StreamExt;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::payload::{object_uri, wrap, JSON_MIME};
use messages::workflow::{Decision, NodePhase, RunPhase, WorkflowApprovalDecision};
use messages::{headers, subjects, TaskState};
use serde_json::{json, Value};
use workflow_node::shell::Config;

use crate::support;
use crate::support::fixtures::{doubler, echo, CHAIN, GATE};
use crate::support::mesh::Mesh;

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = concat!("agents:", echo!(), doubler!(),);

const ASK_SEER: &str = r#"
name: AskSeer
workflow:
  description: calls an agent that reports its caller
  nodes:
    - {id: ask, type: agent, agent_name: Seer, input: {}}
  output_mapping: {caller: "{{ask.output.caller}}"}
"#;

async fn mesh(workflows: &[&str], config: Config) -> Mesh {
    support::mesh::mesh(STUBS, workflows, support::mesh::trusting(config)).await
}

/// Sends `request` to `workflow` as `caller` and returns the first answer.
async fn ask(m: &Mesh, workflow: &str, caller: Option<&str>, request: &Request) -> Value {
    let mut h = async_nats::HeaderMap::new();
    if let Some(caller) = caller {
        h.insert(headers::CALLER, caller);
    }
    let reply = m
        .client
        .request_with_headers(
            subjects::agent_request("mesh", workflow),
            h,
            serde_json::to_vec(request).unwrap().into(),
        )
        .await
        .expect("an answer");
    serde_json::from_slice(&reply.payload).expect("JSON")
}

/// The `message/send` of task `task` with `input`.
fn start(task: &str, input: Value) -> Request {
    let mut message = Message::new(format!("{task}-msg"), Role::User, vec![wrap(input)]);
    message.task_id = Some(task.into());
    Request::message_send(task, message)
}

/// The `workflow_run_state` of a `tasks/get` answer.
fn run_state(answer: &Value) -> &Value {
    answer["result"]["status"]["message"]["parts"]
        .as_array()
        .and_then(|parts| {
            parts
                .iter()
                .find(|p| p["data"]["type"] == "workflow_run_state")
        })
        .map(|p| &p["data"])
        .unwrap_or_else(|| panic!("no workflow_run_state in {answer}"))
}

#[tokio::test]
async fn tasks_get_reports_a_waiting_run_then_its_output_and_unknown_ids_are_not_found() {
    let m = mesh(&[GATE], Config::default()).await;
    let mut approvals = m
        .client
        .subscribe(subjects::approvals("mesh", "Gate"))
        .await
        .unwrap();
    let inbox = m.client.new_inbox();
    let mut replies = m.client.subscribe(inbox.clone()).await.unwrap();
    let body = serde_json::to_vec(&start("gate-task", json!({}))).unwrap();
    m.client
        .publish_with_reply(subjects::agent_request("mesh", "Gate"), inbox, body.into())
        .await
        .unwrap();
    // The approval request goes out after the run's record says the gate waits.
    let msg = approvals.next().await.unwrap();
    let part: Part = serde_json::from_slice(&msg.payload).unwrap();
    let execution = part.as_data().unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_string();

    let waiting = ask(&m, "Gate", None, &Request::tasks_get("g1", "gate-task")).await;
    assert_eq!(waiting["id"], "g1", "{waiting}");
    assert_eq!(waiting["result"]["id"], "gate-task", "{waiting}");
    assert_eq!(waiting["result"]["status"]["state"], "input-required");
    let state = run_state(&waiting);
    assert_eq!(state["execution_id"], execution.as_str());
    assert_eq!(state["status"], "running");
    assert_eq!(state["nodes"], json!({"gate": "waiting", "go": "pending"}));
    assert!(state.get("output").is_none(), "{state}");
    let by_execution = ask(&m, "Gate", None, &Request::tasks_get("g2", &execution)).await;
    assert_eq!(run_state(&by_execution), state);

    let decision = WorkflowApprovalDecision {
        execution_id: execution.clone(),
        node_id: "gate".into(),
        decision: Decision::Approve,
        by: Some("alice".into()),
        comment: None,
    };
    let message = Message::new("decide", Role::User, vec![Part::data_part(&decision)]);
    let request = Request::message_send("d", message);
    let decided =
        support::mesh::ask_signed(&m.client, "Gate", &request, support::mesh::alice()).await;
    assert_eq!(
        decided["result"]["status"]["state"], "completed",
        "{decided}"
    );
    let last = replies.next().await.unwrap();
    let last: Value = serde_json::from_slice(&last.payload).unwrap();
    assert_eq!(last["result"]["status"]["state"], "completed", "{last}");

    let ended = get_run(&m.client, "mesh", "Gate", "gate-task", None)
        .await
        .expect("the run");
    assert_eq!(ended.state, TaskState::Completed);
    assert_eq!(ended.run.status, RunPhase::Success);
    assert_eq!(ended.run.nodes["go"], NodePhase::Success);
    assert_eq!(ended.run.output, Some(json!({"went": true})));

    let unknown = ask(&m, "Gate", None, &Request::tasks_get("g3", "nope")).await;
    assert_eq!(unknown["error"]["code"], -32001, "{unknown}");
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'nope'"));
    let unknown = get_run(&m.client, "mesh", "Gate", "nope", None).await;
    assert!(
        matches!(unknown, Err(GetRunError::NotFound { .. })),
        "{unknown:?}"
    );
}

#[tokio::test]
async fn task_ids_are_scoped_by_the_caller() {
    let m = mesh(&[CHAIN], Config::default()).await;
    let output = |answer: Value| {
        assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
        let parts = answer["result"]["status"]["message"]["parts"].clone();
        let parts: Vec<Part> = serde_json::from_value(parts).unwrap();
        match messages::reply::output_part(&parts) {
            Some(messages::reply::Output::Inline(v)) => v,
            other => panic!("no inline output: {other:?}"),
        }
    };
    let m = &m;
    let send = |caller: Option<&'static str>, value: i64| async move {
        let request = start("shared", json!({"value": value}));
        output(ask(m, "Chain", caller, &request).await)
    };
    assert_eq!(send(Some("A"), 1).await, json!({"value": 4}));
    assert_eq!(
        send(Some("B"), 2).await,
        json!({"value": 8}),
        "a run of its own"
    );
    assert_eq!(
        send(Some("A"), 5).await,
        json!({"value": 4}),
        "A's run again"
    );
    assert_eq!(
        send(None, 3).await,
        json!({"value": 12}),
        "no caller: one scope"
    );
    for (caller, value) in [(Some("A"), 4), (Some("B"), 8), (None, 12)] {
        let state = get_run(&m.client, "mesh", "Chain", "shared", caller)
            .await
            .expect("the run");
        assert_eq!(
            state.run.output,
            Some(json!({"value": value})),
            "{caller:?}"
        );
    }
    let other = get_run(&m.client, "mesh", "Chain", "shared", Some("C")).await;
    assert!(
        matches!(other, Err(GetRunError::NotFound { .. })),
        "{other:?}"
    );
}

#[tokio::test]
async fn the_node_names_its_workflow_as_the_caller_of_its_agents() {
    let m = mesh(&[ASK_SEER], Config::default()).await;
    let _seer = agent_sdk::AgentBuilder::new("Seer")
        .handler(agent_sdk::handler_fn(
            |req: agent_sdk::NodeRequest| async move {
                let caller = req.headers.get(headers::CALLER).map(|v| v.to_string());
                Ok(json!({"caller": caller}))
            },
        ))
        .serve(m.client.clone())
        .await
        .unwrap();
    let r = invoke(&m.client, "mesh", "AskSeer", &json!({}), TIMEOUT, |_| {})
        .await
        .unwrap();
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"caller": "AskSeer"})));
}

/// Stores `value` as object `name` in bucket `bucket`, then takes its chunks away: a read
/// of it waits until [`Held::release`] puts them back.
struct Held {
    js: async_nats::jetstream::Context,
    chunks: String,
    bytes: Vec<u8>,
}

impl Held {
    async fn new(client: &async_nats::Client, bucket: &str, name: &str, value: &Value) -> Self {
        let js = async_nats::jetstream::new(client.clone());
        let store = match js.get_object_store(bucket).await {
            Ok(store) => store,
            Err(_) => js
                .create_object_store(async_nats::jetstream::object_store::Config {
                    bucket: bucket.into(),
                    ..Default::default()
                })
                .await
                .unwrap(),
        };
        let bytes = serde_json::to_vec(value).unwrap();
        let info = store.put(name, &mut bytes.as_slice()).await.unwrap();
        let chunks = format!("$O.{bucket}.C.{}", info.nuid);
        let mut stream = js.get_stream(format!("OBJ_{bucket}")).await.unwrap();
        stream.purge().filter(&chunks).await.unwrap();
        assert_eq!(
            stream.info().await.unwrap().state.messages,
            1,
            "only the meta"
        );
        Held { js, chunks, bytes }
    }

    /// Waits until something reads the object (its reader's consumer exists).
    async fn wait_for_reader(&self, bucket: &str) {
        let mut stream = self.js.get_stream(format!("OBJ_{bucket}")).await.unwrap();
        tokio::time::timeout(TIMEOUT, async {
            while stream.info().await.unwrap().state.consumer_count == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("a reader in time");
    }

    async fn release(&self) {
        let ack = self
            .js
            .publish(self.chunks.clone(), self.bytes.clone().into())
            .await
            .unwrap();
        ack.await.unwrap();
    }
}

#[tokio::test]
async fn requests_beyond_the_limit_wait_for_a_free_slot() {
    let config = Config {
        max_concurrent_requests: 1,
        ..Config::default()
    };
    let m = mesh(&[CHAIN], config).await;
    // Inputs are read only from the mesh's artifact bucket.
    let bucket = subjects::artifact_bucket("mesh");
    let held = Held::new(&m.client, &bucket, "in.json", &json!({"value": 3})).await;
    // The first request holds the one slot: its input cannot be read yet.
    let uri = object_uri(&bucket, "in.json");
    let file = Part::file_uri(uri, Some("in.json".into()), Some(JSON_MIME.into()));
    let mut message = Message::new("slow-msg", Role::User, vec![file]);
    message.task_id = Some("slow".into());
    let slow = Request::message_send("slow", message);
    let inbox = m.client.new_inbox();
    let mut slow_reply = m.client.subscribe(inbox.clone()).await.unwrap();
    let body = serde_json::to_vec(&slow).unwrap();
    m.client
        .publish_with_reply(subjects::agent_request("mesh", "Chain"), inbox, body.into())
        .await
        .unwrap();
    held.wait_for_reader(&bucket).await;
    // A request that needs nothing slow waits behind it.
    let get = Request::tasks_get("g", "none");
    let waiting = ask(&m, "Chain", None, &get);
    tokio::pin!(waiting);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut waiting).await;
    assert!(
        early.is_err(),
        "answered while the slot was held: {early:?}"
    );
    held.release().await;
    assert_eq!(waiting.await["error"]["code"], -32001);
    let first = slow_reply.next().await.unwrap();
    let first: Value = serde_json::from_slice(&first.payload).unwrap();
    assert_eq!(first["result"]["status"]["state"], "completed", "{first}");
    // Many requests through one slot: every one is answered.
    let runs = (0..4).map(|n| {
        let client = m.client.clone();
        async move {
            invoke(
                &client,
                "mesh",
                "Chain",
                &json!({"value": n}),
                TIMEOUT,
                |_| {},
            )
            .await
        }
    });
    for (n, r) in futures::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        let r = r.expect("a result");
        assert_eq!(r.output, Some(json!({"value": 4 * n})), "{:?}", r.error);
    }
}
