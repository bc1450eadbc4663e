//! Proven identities over a real nats-server: an approval counts only when signed by a key
//! its gate names (or, for a gate without approvers, an operator's), its `by` comes from
//! the signature; a run is cancelled only by the key that started it, an operator, or
//! (for an unsigned start) whoever presents its caller name and task id. Every refusal
//! says why, and the run goes on waiting.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use agent_sdk::workflow::{get_run, get_run_signed, invoke_as, new_task_id, RunResult, StartAs};
use agent_sdk::{CallError, Mesh as SdkMesh, Signer};
use futures::StreamExt;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::{codes, Request};
use messages::workflow::{Decision, NodePhase, RunPhase, WorkflowApprovalDecision};
use messages::{headers, subjects};
use serde_json::{json, Value};
use workflow_node::shell::{run::names, Config, WorkflowNode};

use crate::support;
use crate::support::mesh::Mesh;

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = support::fixtures::ECHO_STUBS;

/// `Gate` lists approver `alice` (a name the node binds) and a key (`{BOB}`); `Ops` lists
/// none, so the node's operators decide it.
const GATE: &str = r#"
name: Gate
workflow:
  description: an approval by named approvers, then an agent
  nodes:
    - {id: gate, type: approval, approvers: [alice, "{BOB}"], timeout: 1h}
    - {id: go, type: agent, agent_name: Echo, depends_on: [gate], input: {went: true}}
  output_mapping: {went: "{{go.output.went}}", by: "{{gate.output.by}}"}
"#;

const OPS: &str = r#"
name: Ops
workflow:
  description: an approval without approvers
  nodes:
    - {id: gate, type: approval, timeout: 1h}
  output_mapping: {by: "{{gate.output.by}}"}
"#;

/// The keys of the test: approvers alice and bob, operator `boss`, and mallory, whom the
/// node knows as an approver name of no gate.
struct Keys {
    alice: Signer,
    bob: Signer,
    boss: Signer,
    mallory: Signer,
}

async fn mesh() -> (Mesh, Keys) {
    let keys = Keys {
        alice: Signer::generate(),
        bob: Signer::generate(),
        boss: Signer::generate(),
        mallory: Signer::generate(),
    };
    let approvers: BTreeMap<String, String> = [
        ("alice", &keys.alice),
        ("boss", &keys.boss),
        ("mallory", &keys.mallory),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), s.public_key().to_string()))
    .collect();
    let config = Config {
        approvers,
        operators: vec![keys.boss.public_key().to_string()],
        ..Config::default()
    };
    let gate = GATE.replace("{BOB}", keys.bob.public_key());
    let m = support::mesh::mesh(STUBS, &[&gate, OPS], config).await;
    (m, keys)
}

/// Sends `request` to `workflow` with `h` and returns the answer, which comes to the
/// `Mesh-Reply-To` the headers name (signed with them).
async fn ask(m: &Mesh, workflow: &str, h: async_nats::HeaderMap, body: Vec<u8>) -> Value {
    let inbox = h
        .get(headers::REPLY_TO)
        .expect("a reply subject")
        .to_string();
    let mut answers = m.client.subscribe(inbox).await.unwrap();
    m.client
        .publish_with_headers(subjects::agent_request("mesh", workflow), h, body.into())
        .await
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(30), answers.next())
        .await
        .expect("an answer")
        .expect("the subscription lives");
    serde_json::from_slice(&reply.payload).expect("JSON")
}

/// `body` on `workflow`'s request subject, with caller name `caller` and a fresh reply
/// subject (`Mesh-Reply-To`), signed by `by` at `at` (unsigned: `None`).
fn headers(
    workflow: &str,
    body: &[u8],
    by: Option<&Signer>,
    at: SystemTime,
    caller: Option<&str>,
) -> async_nats::HeaderMap {
    let subject = subjects::agent_request("mesh", workflow);
    let mut h = async_nats::HeaderMap::new();
    let inbox = format!("_INBOX.identity.{}", uuid::Uuid::new_v4().simple());
    h.insert(headers::REPLY_TO, inbox.as_str());
    if let Some(c) = caller {
        h.insert(headers::CALLER, c);
    }
    if let Some(s) = by {
        s.sign_into(&mut h, &subject, None, body, at);
    }
    h
}

fn decision(execution: &str, by: Option<&str>, approve: bool) -> Vec<u8> {
    let d = WorkflowApprovalDecision {
        execution_id: execution.into(),
        node_id: "gate".into(),
        decision: if approve {
            Decision::Approve
        } else {
            Decision::Reject
        },
        by: by.map(String::from),
        comment: None,
    };
    let id = format!("decision-{}", new_task_id());
    let message = Message::new(id.clone(), Role::User, vec![Part::data_part(&d)]);
    serde_json::to_vec(&Request::message_send(id.as_str(), message)).unwrap()
}

/// Sends a decision on run `execution` of `workflow`, `body` signed as `sign` says;
/// `Ok(text)` when recorded, `Err(reason)` when refused.
async fn decide(
    m: &Mesh,
    workflow: &str,
    body: Vec<u8>,
    sign: Option<(&Signer, SystemTime)>,
) -> Result<String, String> {
    let h = match sign {
        Some((s, at)) => headers(workflow, &body, Some(s), at, None),
        None => headers(workflow, &body, None, SystemTime::now(), None),
    };
    let answer = ask(m, workflow, h, body).await;
    let text = answer["result"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match answer["result"]["status"]["state"].as_str() {
        Some("completed") => Ok(text),
        Some("failed") => Err(text),
        _ => panic!("not a decision's answer: {answer}"),
    }
}

/// Starts a run of `workflow` (task `task`, signed by `signer` if given) in the
/// background and waits until its gate waits; its execution id and its result.
async fn start_waiting(
    m: &Mesh,
    workflow: &str,
    task: &str,
    signer: Option<&Signer>,
) -> (String, tokio::task::JoinHandle<RunResult>) {
    let execution = names::execution_id(workflow, task).0;
    let mut asks = m
        .client
        .subscribe(subjects::approvals("mesh", workflow))
        .await
        .unwrap();
    let (client, wf) = (m.client.clone(), workflow.to_string());
    let start = StartAs {
        task_id: task.to_string(),
        version: None,
        signer: signer.cloned(),
        priority: None,
    };
    let run = tokio::spawn(async move {
        invoke_as(&client, "mesh", &wf, &json!({}), TIMEOUT, start, |_| {})
            .await
            .expect("a final reply")
    });
    wait_for_ask(&mut asks, &execution).await;
    (execution, run)
}

/// Waits for the approval request of run `execution`.
async fn wait_for_ask(asks: &mut async_nats::Subscriber, execution: &str) {
    loop {
        let msg = tokio::time::timeout(TIMEOUT, asks.next())
            .await
            .expect("an approval request in time")
            .expect("the subscription lives");
        let part: Part = serde_json::from_slice(&msg.payload).unwrap();
        if part.as_data().unwrap()["execution_id"] == execution {
            return;
        }
    }
}

/// The gate of run `execution` of `workflow` still waits, and the run goes on.
/// Read as an operator (`boss`): a signed run shows only to its key and the operators'.
async fn still_waiting(m: &Mesh, k: &Keys, workflow: &str, execution: &str) {
    let state = get_run_signed(&m.client, "mesh", workflow, execution, None, Some(&k.boss))
        .await
        .expect("the run");
    assert_eq!(state.run.status, RunPhase::Running, "{state:?}");
    assert_eq!(state.run.nodes["gate"], NodePhase::Waiting, "{state:?}");
}

#[tokio::test]
async fn only_a_signed_decision_by_a_named_approver_counts_and_by_cannot_be_spoofed() {
    let (m, k) = mesh().await;
    let (execution, run) = start_waiting(&m, "Gate", &new_task_id(), None).await;
    let now = SystemTime::now;
    let refusals = [
        (
            decide(&m, "Gate", decision(&execution, Some("alice"), true), None).await,
            "is not signed",
        ),
        (
            decide(
                &m,
                "Gate",
                decision(&execution, None, true),
                Some((&k.mallory, now())),
            )
            .await,
            "(mallory) may not decide on 'gate' (approvers: alice, U",
        ),
        (
            decide(
                &m,
                "Gate",
                decision(&execution, None, true),
                Some((&k.boss, now())),
            )
            .await,
            "(boss) may not decide on 'gate'",
        ),
        (
            decide(
                &m,
                "Gate",
                decision(&execution, None, true),
                Some((&k.alice, now() - Duration::from_secs(600))),
            )
            .await,
            "the signature is 600 s old",
        ),
        (
            decide(
                &m,
                "Gate",
                decision(&execution, Some("alice"), true),
                Some((&k.bob, now())),
            )
            .await,
            "says it is by 'alice', but it is signed by",
        ),
    ];
    for (outcome, reason) in refusals {
        let why = outcome.expect_err("refused");
        assert!(why.contains(reason), "expected {reason:?} in {why:?}");
        still_waiting(&m, &k, "Gate", &execution).await;
    }
    // Alice's signature on another body (a reject) does not make this approval hers.
    let approve = decision(&execution, None, true);
    let mut h = headers(
        "Gate",
        &decision(&execution, None, false),
        Some(&k.alice),
        now(),
        None,
    );
    h.insert(headers::CALLER, "anyone");
    let answer = ask(&m, "Gate", h, approve).await;
    let why = answer["result"]["status"]["message"]["parts"][0]["text"].to_string();
    assert!(why.contains("does not verify with key"), "{answer}");
    still_waiting(&m, &k, "Gate", &execution).await;

    // And then alice decides, signed: the run goes on, `by` is her name.
    let ok = decide(
        &m,
        "Gate",
        decision(&execution, None, true),
        Some((&k.alice, now())),
    )
    .await;
    assert!(ok.expect("recorded").contains("recorded"));
    let r = run.await.unwrap();
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"went": true, "by": "alice"})));

    // A gate that lists bob's key records the key.
    let (execution, run) = start_waiting(&m, "Gate", &new_task_id(), None).await;
    let claimed = k.bob.public_key().to_string();
    let ok = decide(
        &m,
        "Gate",
        decision(&execution, Some(&claimed), false),
        Some((&k.bob, now())),
    )
    .await;
    assert!(ok.is_ok(), "{ok:?}");
    let r = run.await.unwrap();
    assert_eq!(r.status, "failure");
    let error = r.error.unwrap_or_default();
    assert!(error.contains(&format!("rejected by {claimed}")), "{error}");
}

#[tokio::test]
async fn a_gate_without_approvers_is_decided_by_an_operator() {
    let (m, k) = mesh().await;
    let (execution, run) = start_waiting(&m, "Ops", &new_task_id(), None).await;
    let body = || decision(&execution, None, true);
    let why = decide(&m, "Ops", body(), Some((&k.alice, SystemTime::now())))
        .await
        .expect_err("alice is no operator");
    assert!(why.contains("operators"), "{why}");
    still_waiting(&m, &k, "Ops", &execution).await;
    decide(&m, "Ops", body(), Some((&k.boss, SystemTime::now())))
        .await
        .expect("the operator decides");
    let r = run.await.unwrap();
    assert_eq!(r.output, Some(json!({"by": "boss"})), "{:?}", r.error);
}

/// A `tasks/cancel` of `id` as `caller`, signed by `by`: the answer.
async fn cancel(m: &Mesh, id: &str, caller: Option<&str>, by: Option<&Signer>) -> Value {
    let body = serde_json::to_vec(&Request::tasks_cancel("c", id)).unwrap();
    let h = headers("Gate", &body, by, SystemTime::now(), caller);
    ask(m, "Gate", h, body).await
}

fn refused_with(answer: &Value, reason: &str) {
    assert_eq!(answer["error"]["code"], codes::NOT_PERMITTED, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(reason), "expected {reason:?} in {answer}");
}

#[tokio::test]
async fn a_signed_run_is_cancelled_by_its_key_or_an_operator_and_by_nobody_else() {
    let (m, k) = mesh().await;
    let owner = Signer::generate();
    let task = new_task_id();
    let (execution, run) = start_waiting(&m, "Gate", &task, Some(&owner)).await;
    let other = Signer::generate();
    refused_with(&cancel(&m, &task, None, None).await, "was started by key");
    refused_with(
        &cancel(&m, &task, None, Some(&other)).await,
        "only a cancel signed by that key",
    );
    refused_with(
        &cancel(&m, &execution, None, None).await,
        "was started by key",
    );
    refused_with(
        &cancel(&m, &execution, None, Some(&k.alice)).await,
        "was started by key",
    );
    still_waiting(&m, &k, "Gate", &execution).await;
    let answer = cancel(&m, &task, None, Some(&owner)).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let r = run.await.unwrap();
    assert_eq!(r.status, "cancelled", "{r:?}");

    // An operator cancels a run started by another key, by its execution id.
    let (execution, run) = start_waiting(&m, "Gate", &new_task_id(), Some(&owner)).await;
    let answer = cancel(&m, &execution, None, Some(&k.boss)).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(run.await.unwrap().status, "cancelled");
}

#[tokio::test]
async fn an_unsigned_run_is_cancelled_by_its_caller_name_and_task_id_or_an_operator() {
    let (m, k) = mesh().await;
    // Through the SDK, as caller `app`: a cancel from another name reaches no run of its.
    let sdk = SdkMesh::new(m.client.clone()).caller("app");
    let mut asks = m
        .client
        .subscribe(subjects::approvals("mesh", "Gate"))
        .await
        .unwrap();
    let call = sdk.agent("Gate").timeout(TIMEOUT).call(json!({}));
    let task = call.task_id().to_string();
    let execution = names::caller_execution_id("Gate", Some("app"), &task).0;
    wait_for_ask(&mut asks, &execution).await;
    cancel(&m, &task, Some("someone-else"), None).await;
    refused_with(
        &cancel(&m, &execution, Some("app"), None).await,
        "takes an operator's signature",
    );
    refused_with(
        &cancel(&m, &execution, None, Some(&k.alice)).await,
        "takes an operator's signature",
    );
    still_waiting(&m, &k, "Gate", &execution).await;
    match call.cancel().await {
        Err(CallError::Canceled { agent }) => assert_eq!(agent, "Gate"),
        other => panic!("expected canceled, got {other:?}"),
    }

    let (execution, run) = start_waiting(&m, "Gate", &new_task_id(), None).await;
    let answer = cancel(&m, &execution, None, Some(&k.boss)).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(run.await.unwrap().status, "cancelled");
}

#[tokio::test]
async fn a_signed_call_through_the_sdk_is_cancelled_by_its_own_signed_cancel() {
    let (m, _) = mesh().await;
    let owner = Signer::generate();
    let sdk = SdkMesh::new(m.client.clone()).signer(owner.clone());
    let mut asks = m
        .client
        .subscribe(subjects::approvals("mesh", "Gate"))
        .await
        .unwrap();
    let call = sdk.agent("Gate").timeout(TIMEOUT).call(json!({}));
    let task = call.task_id().to_string();
    let execution = names::execution_id("Gate", &task).0;
    wait_for_ask(&mut asks, &execution).await;
    refused_with(&cancel(&m, &task, None, None).await, "was started by key");
    match call.cancel().await {
        Err(CallError::Canceled { agent }) => assert_eq!(agent, "Gate"),
        other => panic!("expected canceled, got {other:?}"),
    }
}

#[tokio::test]
async fn a_cancel_before_its_start_holds_only_for_the_same_identity() {
    let (m, k) = mesh().await;
    let start = |task: &str, signer: Option<&Signer>| StartAs {
        task_id: task.to_string(),
        version: None,
        signer: signer.cloned(),
        priority: None,
    };
    // Unsigned cancel, unsigned start of the same task id: the run ends at its start.
    let task = new_task_id();
    let answer = cancel(&m, &task, None, None).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let r = invoke_as(
        &m.client,
        "mesh",
        "Gate",
        &json!({}),
        TIMEOUT,
        start(&task, None),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.status, "cancelled", "{r:?}");
    let ended = get_run(&m.client, "mesh", "Gate", &task, None)
        .await
        .unwrap();
    let error = ended.run.error_message.as_deref();
    assert_eq!(error, Some("cancelled before it started"));
    assert_eq!(
        ended.run.nodes["gate"],
        NodePhase::Skipped,
        "{:?}",
        ended.run
    );

    // Unsigned cancel, then a start signed by a key: another identity, the run goes on.
    let owner = Signer::generate();
    let task = new_task_id();
    let answer = cancel(&m, &task, None, None).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let mut asks = m
        .client
        .subscribe(subjects::approvals("mesh", "Gate"))
        .await
        .unwrap();
    let (client, s) = (m.client.clone(), start(&task, Some(&owner)));
    let run = tokio::spawn(async move {
        invoke_as(&client, "mesh", "Gate", &json!({}), TIMEOUT, s, |_| {})
            .await
            .unwrap()
    });
    let execution = names::execution_id("Gate", &task).0;
    wait_for_ask(&mut asks, &execution).await;
    still_waiting(&m, &k, "Gate", &execution).await;
    let answer = cancel(&m, &task, None, Some(&owner)).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(run.await.unwrap().status, "cancelled");
}

#[tokio::test]
async fn a_start_with_a_bad_signature_is_refused() {
    let (m, k) = mesh().await;
    let task = new_task_id();
    let mut message = Message::new(
        task.clone(),
        Role::User,
        vec![messages::payload::wrap(json!({}))],
    );
    message.task_id = Some(task.clone());
    let body = serde_json::to_vec(&Request::message_send(task.as_str(), message)).unwrap();
    let stale = SystemTime::now() - Duration::from_secs(3600);
    let answer = ask(
        &m,
        "Gate",
        headers("Gate", &body, Some(&k.alice), stale, None),
        body,
    )
    .await;
    assert_eq!(answer["result"]["status"]["state"], "failed", "{answer}");
    assert!(
        answer.to_string().contains("signature is refused"),
        "{answer}"
    );
    let none = get_run(&m.client, "mesh", "Gate", &task, None).await;
    assert!(none.is_err(), "no run was started: {none:?}");
}

#[tokio::test]
async fn a_signed_run_is_joined_and_read_only_by_its_key_or_an_operator() {
    let (m, k) = mesh().await;
    let owner = Signer::generate();
    let task = new_task_id();
    let (execution, run) = start_waiting(&m, "Gate", &task, Some(&owner)).await;
    let stranger = Signer::generate();
    for (signer, why) in [(None, "unsigned"), (Some(&stranger), "signed by")] {
        let read = get_run_signed(&m.client, "mesh", "Gate", &task, None, signer).await;
        let refused = read.expect_err("a stranger read a signed run").to_string();
        assert!(
            refused.contains("only a request signed by that key") && refused.contains(why),
            "{refused}"
        );
        // Sending the start again (to get its final reply) is refused the same way.
        let start = StartAs {
            task_id: task.clone(),
            version: None,
            signer: signer.cloned(),
            priority: None,
        };
        let joined = invoke_as(
            &m.client,
            "mesh",
            "Gate",
            &json!({}),
            TIMEOUT,
            start,
            |_| {},
        )
        .await;
        let refused = format!("{joined:?}");
        assert!(
            refused.contains("only a request signed by that key"),
            "{refused}"
        );
    }
    for reader in [&owner, &k.boss] {
        let state = get_run_signed(&m.client, "mesh", "Gate", &task, None, Some(reader))
            .await
            .expect("the owner and operators read it");
        assert_eq!(state.run.execution_id, execution);
    }
    let answer = cancel(&m, &task, None, Some(&owner)).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(run.await.unwrap().status, "cancelled");
}

#[tokio::test]
async fn a_gate_is_decided_by_the_approvers_of_the_version_its_run_started_with() {
    let (mut m, k) = mesh().await;
    let (execution, run) = start_waiting(&m, "Gate", &new_task_id(), None).await;
    // Version 2 names only mallory; the run started under the first version (alice, bob).
    let v2 = GATE
        .replace(
            "description: an approval",
            "version: \"2\"\n  description: an approval",
        )
        .replace("approvers: [alice, \"{BOB}\"]", "approvers: [mallory]");
    let config = Config {
        approvers: [("mallory", &k.mallory), ("alice", &k.alice)]
            .into_iter()
            .map(|(n, s)| (n.to_string(), s.public_key().to_string()))
            .collect(),
        operators: vec![k.boss.public_key().to_string()],
        ..Config::default()
    };
    let replacement =
        WorkflowNode::start(m.client.clone(), support::mesh::workflows(&[&v2]), config)
            .await
            .expect("a replica of version 2");
    m.replace_node(replacement).shutdown().await;
    let now = SystemTime::now();
    let by_mallory = decide(
        &m,
        "Gate",
        decision(&execution, None, true),
        Some((&k.mallory, now)),
    )
    .await;
    let refused = by_mallory.expect_err("version 2's approver decided a version 1 gate");
    assert!(refused.contains("may not decide"), "{refused}");
    let by_alice = decide(
        &m,
        "Gate",
        decision(&execution, None, true),
        Some((&k.alice, now)),
    )
    .await;
    assert!(by_alice.is_ok(), "{by_alice:?}");
    let r = run.await.unwrap();
    assert_eq!(r.status, "success", "{r:?}");
    assert_eq!(r.output, Some(json!({"went": true, "by": "alice"})));
}
