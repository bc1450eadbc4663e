//! Signals into running runs over a real nats-server, sent with the Rust SDK: a wait node
//! takes its signal (by run or by key) and the run ends with its data; a payload its schema
//! refuses, a sender it does not list, an unknown key and an ended run are refused with a
//! precise error and harm nothing; a signal sent before the node waits is kept for it; the
//! same signal id sent twice is applied once.

use std::time::Duration;

use agent_sdk::workflow::{invoke_as, new_task_id, RunResult, StartAs};
use agent_sdk::{signal, Signal, SignalError, SignalTo, Signer};
use messages::jsonrpc::codes;
use serde_json::{json, Value};
use workflow_node::core::{Detail, NodeStatus};
use workflow_node::shell::{run::names, Config, FoundRun, Inspector};

use crate::support;
use crate::support::mesh::Mesh;

const TIMEOUT: Duration = Duration::from_secs(30);

/// One wait found by the order's key, with a schema, then an echo of what came.
const PAID: &str = r#"
name: Paid
workflow:
  description: waits for the payment of an order
  nodes:
    - id: paid
      type: wait
      signal: payment
      correlation: "{{workflow.input.order}}"
      schema: {type: object, required: [amount], properties: {amount: {type: number}}}
      timeout: 1h
    - {id: echo, type: agent, agent_name: Echo, depends_on: [paid], input: {amount: "{{paid.output.data.amount}}"}}
  output_mapping: {amount: "{{echo.output.amount}}", signal_id: "{{paid.output.signal_id}}"}
"#;

/// A wait fed by an event trigger: a payment event goes to the run waiting under its
/// order.
const ROUTED: &str = r#"
name: Routed
workflow:
  description: waits for a payment event
  triggers:
    - {name: pay, subject: payments.made, signal: payment, key: "{{event.payload.order}}", input: {amount: "{{event.payload.amount}}"}, dedup_key: "{{event.payload.id}}"}
  nodes:
    - {id: paid, type: wait, signal: payment, correlation: "{{workflow.input.order}}", timeout: 1h}
  output_mapping: {amount: "{{paid.output.data.amount}}", signal_id: "{{paid.output.signal_id}}"}
"#;

/// An approval first (held by the test), then a wait only alice may signal.
const LATER: &str = r#"
name: Later
workflow:
  description: a gate, then a wait for alice's word
  nodes:
    - {id: gate, type: approval, timeout: 1h}
    - {id: word, type: wait, signal: word, signers: [alice], depends_on: [gate]}
  output_mapping: {word: "{{word.output.data}}", by: "{{word.output.by}}"}
"#;

async fn mesh() -> Mesh {
    let config = support::mesh::trusting(Config::default());
    support::mesh::mesh(
        support::fixtures::ECHO_STUBS,
        &[PAID, LATER, ROUTED],
        config,
    )
    .await
}

/// Starts a run of `workflow` with `input` in the background: its execution id, task id
/// and final result.
fn start(
    m: &Mesh,
    workflow: &str,
    input: Value,
) -> (String, String, tokio::task::JoinHandle<RunResult>) {
    let task = new_task_id();
    let execution = names::execution_id(workflow, &task).0;
    let (client, wf, t) = (m.client.clone(), workflow.to_string(), task.clone());
    let run = tokio::spawn(async move {
        invoke_as(
            &client,
            "mesh",
            &wf,
            &input,
            TIMEOUT,
            StartAs::from(t.as_str()),
            |_| {},
        )
        .await
        .expect("a final reply")
    });
    (execution, task, run)
}

/// Reads run `execution` of `workflow` until `ready` holds (bounded).
async fn until(
    m: &Mesh,
    workflow: &str,
    execution: &str,
    ready: impl Fn(&FoundRun) -> bool,
) -> FoundRun {
    let inspector = Inspector::open(m.client.clone(), "mesh").await.unwrap();
    let id = workflow_node::core::ExecutionId(execution.to_string());
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(run) = inspector.read_run(workflow, &id).await.unwrap() {
            if ready(&run) {
                return run;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {execution} never got there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status(run: &FoundRun, node: &str) -> NodeStatus {
    run.record.state.node_status(node)
}

async fn send(
    m: &Mesh,
    workflow: &str,
    to: SignalTo<'_>,
    name: &str,
    data: Value,
    id: Option<&str>,
    signer: Option<&Signer>,
) -> Result<String, SignalError> {
    let s = Signal { name, data, id };
    signal(&m.client, "mesh", workflow, to, s, signer).await
}

fn refused(r: Result<String, SignalError>) -> (i64, String) {
    match r {
        Err(SignalError::Refused { code, message, .. }) => (code, message),
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test]
async fn a_wait_takes_its_signal_by_key_after_refusing_a_payload_its_schema_refuses() {
    let m = mesh().await;
    let (execution, task, run) = start(&m, "Paid", json!({"order": "o-17"}));
    let waiting = until(&m, "Paid", &execution, |r| {
        status(r, "paid") == NodeStatus::Waiting
    })
    .await;
    let Some(Detail::Wait(w)) = &waiting.record.state.nodes["paid"].detail else {
        panic!("no wait detail: {:?}", waiting.record.state.nodes["paid"]);
    };
    assert_eq!(
        (w.signal.as_str(), w.key.as_deref()),
        ("payment", Some("o-17"))
    );
    assert!(w.deadline.is_some());

    let by_task = SignalTo::Run {
        id: &task,
        caller: None,
    };
    let (code, why) = refused(
        send(
            &m,
            "Paid",
            by_task,
            "payment",
            json!({"amount": "ten"}),
            None,
            None,
        )
        .await,
    );
    assert_eq!(code, codes::INVALID_PARAMS);
    assert!(
        why.contains("does not match its schema") && why.contains("amount"),
        "{why}"
    );
    let (code, why) = refused(send(&m, "Paid", by_task, "refund", json!({}), None, None).await);
    assert_eq!(code, codes::INVALID_PARAMS);
    assert!(why.contains("no wait node for signal 'refund'"), "{why}");
    let (code, why) = refused(
        send(
            &m,
            "Paid",
            SignalTo::Key("o-99"),
            "payment",
            json!({"amount": 1}),
            None,
            None,
        )
        .await,
    );
    assert_eq!(code, codes::TASK_NOT_FOUND);
    assert!(why.contains("under key 'o-99'"), "{why}");
    // By key, naming no run, an unsigned signal proves nothing: it takes an operator.
    let (code, _) = refused(
        send(
            &m,
            "Paid",
            SignalTo::Key("o-17"),
            "payment",
            json!({"amount": 1}),
            None,
            None,
        )
        .await,
    );
    assert_eq!(code, codes::NOT_PERMITTED);
    let still = until(&m, "Paid", &execution, |_| true).await;
    assert_eq!(
        status(&still, "paid"),
        NodeStatus::Waiting,
        "refusals harm nothing"
    );

    let op = support::mesh::operator();
    let text = send(
        &m,
        "Paid",
        SignalTo::Key("o-17"),
        "payment",
        json!({"amount": 10}),
        Some("pay-1"),
        Some(op),
    )
    .await
    .expect("delivered");
    assert!(text.contains(&execution), "{text}");
    let result = run.await.unwrap();
    assert_eq!(result.status, "success", "{result:?}");
    assert_eq!(
        result.output,
        Some(json!({"amount": 10, "signal_id": "pay-1"}))
    );

    let (code, why) = refused(
        send(
            &m,
            "Paid",
            by_task,
            "payment",
            json!({"amount": 1}),
            None,
            None,
        )
        .await,
    );
    assert_eq!(code, codes::CONFLICT);
    assert!(why.contains("already ended (success)"), "{why}");
    // A producer's retry of the signal it sent (by key, with its id) after the run took it
    // and ended is told so, not that no run waits: a trigger would park it otherwise.
    let again = send(
        &m,
        "Paid",
        SignalTo::Key("o-17"),
        "payment",
        json!({"amount": 10}),
        Some("pay-1"),
        Some(op),
    )
    .await
    .expect("a copy of a signal taken is answered");
    assert!(
        again.contains("already recorded") && again.contains(&execution),
        "{again}"
    );
}

#[tokio::test]
async fn a_signal_sent_before_its_node_waits_is_kept_once_and_taken_from_its_signer_only() {
    let m = mesh().await;
    let (execution, task, run) = start(&m, "Later", json!({}));
    until(&m, "Later", &execution, |r| {
        status(r, "gate") == NodeStatus::Waiting
    })
    .await;
    let alice = support::mesh::alice();
    let to = SignalTo::Run {
        id: &task,
        caller: None,
    };
    let (code, why) = refused(send(&m, "Later", to, "word", json!("hi"), None, None).await);
    assert_eq!(code, codes::NOT_PERMITTED);
    assert!(why.contains("not signed"), "{why}");
    let (code, _) = refused(
        send(
            &m,
            "Later",
            to,
            "word",
            json!("hi"),
            None,
            Some(support::mesh::operator()),
        )
        .await,
    );
    assert_eq!(
        code,
        codes::NOT_PERMITTED,
        "the operator is not a signer of this node"
    );

    let kept = send(
        &m,
        "Later",
        to,
        "word",
        json!("first"),
        Some("w-1"),
        Some(alice),
    )
    .await
    .unwrap();
    assert!(kept.contains("kept until the node waits"), "{kept}");
    let again = send(
        &m,
        "Later",
        to,
        "word",
        json!("second"),
        Some("w-1"),
        Some(alice),
    )
    .await
    .unwrap();
    assert!(again.contains("already recorded"), "{again}");
    let run_now = until(&m, "Later", &execution, |r| {
        !r.record.state.signals.kept.is_empty()
    })
    .await;
    assert_eq!(run_now.record.state.signals.kept.len(), 1);

    let decision = workflow_node::ops::approvals::decision_request(
        "decide-1",
        &execution,
        workflow_node::ops::approvals::Decided {
            node: "gate",
            approve: true,
            by: None,
            comment: None,
        },
    );
    let answer =
        support::mesh::ask_signed(&m.client, "Later", &decision, support::mesh::operator()).await;
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    let result = run.await.unwrap();
    assert_eq!(result.status, "success", "{result:?}");
    assert_eq!(result.output, Some(json!({"word": "first", "by": "alice"})));
}

#[tokio::test]
async fn an_event_trigger_routes_its_event_to_the_run_waiting_under_its_key() {
    let m = mesh().await;
    let js = async_nats::jetstream::new(m.client.clone());
    let (execution, _, run) = start(&m, "Routed", json!({"order": "o-5"}));
    until(&m, "Routed", &execution, |r| {
        status(r, "paid") == NodeStatus::Waiting
    })
    .await;
    let publish = |body: Value| {
        let js = js.clone();
        async move {
            let body = serde_json::to_vec(&body).unwrap();
            js.publish("payments.made", body.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    };
    publish(json!({"id": "p-1", "order": "o-5", "amount": 3})).await;
    let result = run.await.unwrap();
    assert_eq!(result.status, "success", "{result:?}");
    assert_eq!(
        result.output,
        Some(json!({"amount": 3, "signal_id": "p-1"}))
    );
}
