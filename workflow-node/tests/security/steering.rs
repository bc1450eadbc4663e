//! Steering that nobody else can squat or replay, under the shipped least-privilege
//! configuration: an operator's decision and cancel go through although an agent, or a
//! caller asking an agent to reply into the workflow's stream, published their readable
//! de-duplication ids first; a captured signed request sent again (from another inbox,
//! under another caller name, after its run moved on) is refused; cancels of runs that do
//! not exist yet are kept briefly and a few per caller.

use std::time::Duration;

use agent_sdk::{CallError, Mesh};
use async_nats::HeaderMap;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::{headers, subjects};
use serde_json::json;

use crate::support::security::{approval_request, cli, node, stubs_file, Secure, Watched, WAIT};

const NS: &str = "mesh";
const WORKFLOW: &str = "PollAndApprove";

/// The mesh: the node as user node, the stub agents as user agents, ops watching approval
/// requests of [`WORKFLOW`], alice calling.
struct Steered {
    secure: Secure,
    node: Watched,
    _node: workflow_node::shell::WorkflowNode,
    agents: Watched,
    _stubs: Vec<agent_sdk::AgentHandle>,
    asks: async_nats::Subscriber,
    _ops: Watched,
    alice: Watched,
}

async fn mesh() -> Steered {
    let secure = Secure::start();
    let (node_handle, node_conn) = node(&secure).await;
    let agents = secure.connect("agents").await;
    let stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs_file())
        .await
        .expect("stub agents serve as user agents");
    let ops = secure.connect("ops").await;
    let asks = ops
        .client
        .subscribe(subjects::approvals(NS, WORKFLOW))
        .await
        .unwrap();
    Mesh::new(ops.client.clone()).roundtrip().await.unwrap();
    let alice = secure.connect("alice").await;
    let catalog = Mesh::new(alice.client.clone()).catalog().await.unwrap();
    for name in [WORKFLOW, "Echo"] {
        assert!(
            catalog.wait_for(name, WAIT).await.is_some(),
            "no card of {name}"
        );
    }
    Steered {
        secure,
        node: node_conn,
        _node: node_handle,
        agents,
        _stubs: stubs,
        asks,
        _ops: ops,
        alice,
    }
}

impl Steered {
    /// Alice calls [`WORKFLOW`]; its execution id once it waits at its gate.
    async fn waiting_run(
        &mut self,
    ) -> (
        String,
        tokio::task::JoinHandle<Result<serde_json::Value, CallError>>,
    ) {
        let mesh = Mesh::new(self.alice.client.clone()).timeout(WAIT);
        let call = tokio::spawn(std::future::IntoFuture::into_future(
            mesh.agent(WORKFLOW).call(json!({})),
        ));
        let ask = approval_request(&mut self.asks).await;
        (ask.execution_id, call)
    }

    /// The last sequence of the workflow's event stream (which only grows), as the node's
    /// user reads it.
    async fn last_seq(&self) -> u64 {
        let js = async_nats::jetstream::new(self.node.client.clone());
        let mut stream = js.get_stream(format!("mesh_WF_{WORKFLOW}")).await.unwrap();
        stream.info().await.unwrap().state.last_sequence
    }

    /// Waits until the workflow's stream has stored a message after sequence `seq`.
    async fn stored_after(&self, seq: u64) {
        let stored = tokio::time::timeout(WAIT, async {
            while self.last_seq().await <= seq {
                tokio::task::yield_now().await;
            }
        });
        stored
            .await
            .expect("a message stored in the workflow's stream");
    }

    fn ops(&self, args: &[&str]) -> std::process::Output {
        let seed = self.secure.pki.join("ops.nk");
        let mut args: Vec<&str> = args.to_vec();
        args.extend(["--nkey-seed-file", seed.to_str().unwrap()]);
        cli(&self.secure, "ops", &args)
    }
}

/// The ids a replica gave a decision on the gate and an operator's cancel before they
/// carried a tag only a replica can make.
fn old_ids(exec: &str, secure: &Secure) -> [String; 2] {
    let ops = agent_sdk::Signer::from_seed_file(secure.pki.join("ops.nk")).unwrap();
    [
        format!("approval.{exec}.gate"),
        format!("cancel.{exec}.{}", ops.public_key()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_publishing_the_readable_ids_first_drops_no_decision_and_no_cancel() {
    let mut m = mesh().await;
    let (first, call) = m.waiting_run().await;
    let (second, cancelled) = m.waiting_run().await;
    // A rogue agent process publishes the ids of the decision on the first run and of the
    // operator's cancel of the second into the stream, on a response subject it may use.
    for id in [
        &old_ids(&first, &m.secure)[0],
        &old_ids(&second, &m.secure)[1],
    ] {
        let mut h = HeaderMap::new();
        h.insert(headers::MSG_ID, id.as_str());
        let subject = subjects::agent_response(NS, WORKFLOW, "squat");
        let js = async_nats::jetstream::new(m.agents.client.clone());
        let ack = js.publish_with_headers(subject, h, "{}".into()).await;
        let ack = ack.unwrap().await.expect("the stream stores it");
        assert!(!ack.duplicate, "{id} is new to the stream");
    }
    decide_and_cancel(&m, &first, call, &second, cancelled).await;
    assert_eq!(m.agents.errors().await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_asking_echo_to_reply_with_the_readable_ids_drops_no_decision_and_no_cancel() {
    let mut m = mesh().await;
    let (first, call) = m.waiting_run().await;
    let (second, cancelled) = m.waiting_run().await;
    // Alice asks Echo to answer on the workflow's response subject, under a task id that
    // is the decision's (then the cancel's) readable id: Echo's reply carries it as its
    // de-duplication id.
    for id in [
        &old_ids(&first, &m.secure)[0],
        &old_ids(&second, &m.secure)[1],
    ] {
        let mut message = Message::new(
            uuid::Uuid::new_v4().to_string(),
            Role::User,
            vec![Part::text("squat")],
        );
        message.task_id = Some(id.clone());
        let body = serde_json::to_vec(&Request::message_send("squat", message)).unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            headers::REPLY_TO,
            subjects::agent_response(NS, WORKFLOW, "squat").as_str(),
        );
        let before = m.last_seq().await;
        m.alice
            .client
            .publish_with_headers(subjects::agent_request(NS, "Echo"), h, body.into())
            .await
            .unwrap();
        m.stored_after(before).await;
    }
    decide_and_cancel(&m, &first, call, &second, cancelled).await;
    assert_eq!(m.alice.errors().await, Vec::<String>::new());
}

/// Ops approves the first run's gate and cancels the second with the CLI: both take effect.
async fn decide_and_cancel(
    m: &Steered,
    first: &str,
    call: tokio::task::JoinHandle<Result<serde_json::Value, CallError>>,
    second: &str,
    cancelled: tokio::task::JoinHandle<Result<serde_json::Value, CallError>>,
) {
    let approved = m.ops(&["approve", first, "gate", "--by", "ops-team"]);
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    let output = tokio::time::timeout(WAIT, call)
        .await
        .expect("the decision takes effect")
        .unwrap()
        .expect("the run succeeds");
    assert!(output.get("doubled").is_some(), "{output}");
    let stopped = m.ops(&["runs", "cancel", second, "--reason", "ops says stop"]);
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");
    let ended = tokio::time::timeout(WAIT, cancelled)
        .await
        .expect("the cancel takes effect")
        .unwrap();
    let e = ended.expect_err("the run is cancelled");
    assert!(matches!(e, CallError::Canceled { .. }), "{e}");
}

/// A request on `subject` with `body`, answered on a fresh inbox of `who`, with `extra`
/// headers, signed by `signer`: the headers as sent, the inbox and its subscription.
async fn signed(
    who: &Watched,
    signer: &agent_sdk::Signer,
    subject: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> (HeaderMap, String, async_nats::Subscriber) {
    let inbox = who.client.new_inbox();
    let answers = who.client.subscribe(inbox.clone()).await.unwrap();
    let mut h = HeaderMap::new();
    for (name, value) in extra {
        h.insert(*name, *value);
    }
    signer.sign_into(
        &mut h,
        subject,
        Some(&inbox),
        body,
        std::time::SystemTime::now(),
    );
    (h, inbox, answers)
}

/// Sends `body` with exactly `headers` and reply subject `reply` from `who`.
async fn send(who: &Watched, subject: &str, reply: &str, headers: &HeaderMap, body: &[u8]) {
    who.client
        .publish_with_reply_and_headers(
            subject.to_owned(),
            reply.to_owned(),
            headers.clone(),
            body.to_vec().into(),
        )
        .await
        .unwrap();
    who.client.flush().await.unwrap();
}

/// The next answer on `answers`, as JSON.
async fn answer(answers: &mut async_nats::Subscriber) -> serde_json::Value {
    use futures::StreamExt;
    let msg = tokio::time::timeout(WAIT, answers.next())
        .await
        .expect("an answer")
        .expect("the subscription lives");
    serde_json::from_slice(&msg.payload).unwrap()
}

/// Asserts that `answer` refuses a request for `reason`.
fn refused(answer: &serde_json::Value, reason: &str) {
    let text = answer.to_string();
    assert!(
        text.contains(reason) && !text.contains("\"doubled\""),
        "expected a refusal for {reason:?}: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_signed_start_sent_again_joins_nothing_and_starts_nothing() {
    let mut m = mesh().await;
    let bob = m.secure.connect("bob").await;
    let bob_key = agent_sdk::Signer::generate();
    let subject = subjects::agent_request(NS, WORKFLOW);
    let mut message = Message::new(
        "bob-1",
        Role::User,
        vec![messages::payload::wrap(json!({}))],
    );
    message.task_id = Some("bob-task".into());
    let body = serde_json::to_vec(&Request::message_send("bob-1", message)).unwrap();
    // Bob starts a run, signed; it waits at its gate.
    let (h, bob_inbox, mut bob_answers) = signed(&bob, &bob_key, &subject, &body, &[]).await;
    send(&bob, &subject, &bob_inbox, &h, &body).await;
    let ask = approval_request(&mut m.asks).await;

    // Alice captured the request: from her own inbox it does not verify (before, she
    // joined bob's run and would have received its output).
    let alice_inbox = m.alice.client.new_inbox();
    let mut alice_answers = m.alice.client.subscribe(alice_inbox.clone()).await.unwrap();
    send(&m.alice, &subject, &alice_inbox, &h, &body).await;
    refused(&answer(&mut alice_answers).await, "does not verify");
    // Under another caller name, to bob's inbox: no verify either (before, a second run
    // owned by bob's key started, answering bob).
    let mut renamed = h.clone();
    renamed.insert(headers::CALLER, "mallory");
    send(&m.alice, &subject, &bob_inbox, &renamed, &body).await;
    refused(&answer(&mut bob_answers).await, "does not verify");
    // Exactly as bob sent it: its nonce was seen.
    send(&m.alice, &subject, &bob_inbox, &h, &body).await;
    refused(&answer(&mut bob_answers).await, "replayed signature");

    // Bob's run goes on and answers bob only.
    let approved = m.ops(&["approve", &ask.execution_id, "gate", "--by", "ops-team"]);
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    let last = loop {
        let a = answer(&mut bob_answers).await;
        if a["result"]["status"]["state"] == "completed" {
            break a;
        }
    };
    assert!(last.to_string().contains("doubled"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_signed_pause_sent_again_after_the_resume_is_refused() {
    use messages::control::RunControl;
    use workflow_node::ops::steer::control_request;
    let mut m = mesh().await;
    let (exec, call) = m.waiting_run().await;
    let ops = m.secure.connect("ops").await;
    let key = agent_sdk::Signer::from_seed_file(m.secure.pki.join("ops.nk")).unwrap();
    let subject = subjects::agent_request(NS, WORKFLOW);
    let control =
        |action| serde_json::to_vec(&control_request(&exec, action, Some("hold".into()))).unwrap();
    // The operator pauses the run, then resumes it.
    let pause = control(RunControl::Pause);
    let (pause_h, pause_inbox, mut pause_answers) = signed(&ops, &key, &subject, &pause, &[]).await;
    send(&ops, &subject, &pause_inbox, &pause_h, &pause).await;
    let paused = answer(&mut pause_answers).await;
    assert_eq!(paused["result"]["status"]["state"], "completed", "{paused}");
    let resume = control(RunControl::Resume);
    let (h, inbox, mut answers) = signed(&ops, &key, &subject, &resume, &[]).await;
    send(&ops, &subject, &inbox, &h, &resume).await;
    let resumed = answer(&mut answers).await;
    assert_eq!(
        resumed["result"]["status"]["state"], "completed",
        "{resumed}"
    );
    // The captured pause, sent again byte for byte (past JetStream's duplicate window it
    // would have paused the run again): refused for its nonce, whenever it comes.
    send(&ops, &subject, &pause_inbox, &pause_h, &pause).await;
    let again = answer(&mut pause_answers).await;
    assert_eq!(again["result"]["status"]["state"], "failed", "{again}");
    refused(&again, "replayed signature");
    let inspector = workflow_node::shell::Inspector::open(m.node.client.clone(), NS)
        .await
        .unwrap();
    let execution = workflow_node::core::ExecutionId::parse(&exec).unwrap();
    let run = inspector
        .read_run(WORKFLOW, &execution)
        .await
        .unwrap()
        .unwrap();
    assert!(run.record.state.paused.is_none(), "the run is not paused");
    let approved = m.ops(&["approve", &exec, "gate", "--by", "ops-team"]);
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    tokio::time::timeout(WAIT, call)
        .await
        .expect("the run ends")
        .unwrap()
        .expect("the run succeeds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_of_runs_not_started_are_kept_a_few_per_caller_and_briefly() {
    use async_nats::jetstream::kv::Operation;
    use futures::StreamExt;
    use std::collections::BTreeSet;
    use workflow_node::shell::run::names;
    const KEPT: usize = 20;
    let secure = Secure::start();
    let (_node, node_conn) = crate::support::security::node_configured(&secure, |c| {
        c.early_cancel_expiry = Duration::from_secs(3);
        c.early_cancels_per_caller = KEPT;
    })
    .await;
    // Every change of the runs bucket from now on, as the node's user sees it.
    let js = async_nats::jetstream::new(node_conn.client.clone());
    let runs = js.get_key_value("mesh_wf_runs").await.unwrap();
    let mut watch = runs.watch_all().await.unwrap();
    let alice = secure.connect("alice").await;
    let subject = subjects::agent_request(NS, WORKFLOW);
    // Alice cancels 200 task ids that no run was started with, unsigned.
    let (mut kept, mut refusals) = (BTreeSet::new(), 0);
    for i in 0..200 {
        let id = format!("ghost-{i}");
        let body = serde_json::to_vec(&Request::tasks_cancel(format!("c{i}"), id.as_str()));
        let reply = alice
            .client
            .request(subject.clone(), body.unwrap().into())
            .await
            .expect("an answer");
        let answer: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        if answer.get("error").is_some() {
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("at most 20"), "{answer}");
            refusals += 1;
        } else {
            let execution = names::caller_execution_id(WORKFLOW, None, &id);
            kept.insert(names::run_key(WORKFLOW, &execution));
        }
    }
    // At most KEPT at a time: the rest refused (slots free again as kept ones expire, so
    // how many more got in depends on how fast they came).
    assert!(
        kept.len() >= KEPT && refusals > 0,
        "kept {}, refused {refusals}",
        kept.len()
    );
    assert_eq!(kept.len() + refusals, 200);
    // Each kept cancel's record is written, then goes once its short expiry is over; no
    // refused one is ever written.
    let (mut written, mut gone) = (BTreeSet::new(), BTreeSet::new());
    tokio::time::timeout(WAIT, async {
        while let Some(entry) = watch.next().await {
            let entry = entry.unwrap();
            if !entry.key.starts_with("PollAndApprove.") {
                continue;
            }
            assert!(kept.contains(&entry.key), "a record of {}", entry.key);
            match entry.operation {
                Operation::Put => written.insert(entry.key),
                Operation::Delete | Operation::Purge => gone.insert(entry.key),
            };
            if gone == kept {
                break;
            }
        }
    })
    .await
    .expect("every kept cancel's record expires");
    assert_eq!(written, kept);
    let keys: Vec<String> = runs
        .keys()
        .await
        .unwrap()
        .map(|k| k.unwrap())
        .collect()
        .await;
    assert!(
        keys.iter().all(|k| !k.starts_with("PollAndApprove.")),
        "{keys:?}"
    );
}
