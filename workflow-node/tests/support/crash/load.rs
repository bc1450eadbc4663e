//! The caller side of the crash tests: sends runs as raw requests (one reply inbox per
//! run, so replies are counted per request), approves approval requests as they arrive,
//! resends a request (same task id, same reply inbox) when its run gave no sign of life
//! for a while, as the protocol asks of callers (a request or a final reply can be lost
//! with the replica that held it), and records when each run made progress.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::workflow::{Decision, WorkflowApprovalDecision};
use messages::{headers, subjects};
use serde_json::Value;
use workflow_node::core::ExecutionId;

/// What to run.
pub(crate) struct Plan {
    /// Namespace.
    pub(crate) ns: String,
    /// Workflow name.
    pub(crate) workflow: String,
    /// The index of the first run (its request id is `request_id(first)`): a test that
    /// drives rounds gives each its own.
    pub(crate) first: usize,
    /// Number of runs.
    pub(crate) runs: usize,
    /// Runs in flight at once.
    pub(crate) concurrency: usize,
    /// The input of run `i`.
    pub(crate) input: fn(usize) -> Value,
    /// Overall deadline for every run to reply.
    pub(crate) deadline: Duration,
    /// After the last first reply, how long to keep counting replies.
    pub(crate) quiet: Duration,
    /// Resend a request when its run showed no sign of life for this long.
    pub(crate) resend_after: Duration,
}

/// What came back.
pub(crate) struct Outcome {
    /// Every reply received, per run.
    pub(crate) replies: HashMap<usize, Vec<Value>>,
    /// Runs that had no reply by the deadline.
    pub(crate) missing: Vec<usize>,
    /// Requests sent again.
    pub(crate) resends: usize,
    /// Approval decisions sent (including retries).
    pub(crate) decisions: usize,
    /// Per run, the longest time without any progress update (or reply).
    pub(crate) longest_stall: Vec<Duration>,
    /// Per run, request to first reply.
    pub(crate) durations: Vec<Duration>,
    /// From the first request to the last first reply.
    pub(crate) elapsed: Duration,
}

/// The request id (= message id = task id) of run `i`.
pub(crate) fn request_id(i: usize) -> String {
    format!("crash-{i}")
}

struct Run {
    sent: Instant,
    last_send: Instant,
    /// No replica took its last request ("no responders"): send it again at the next tick.
    unheard: bool,
    last_sign: Instant,
    longest: Duration,
    done: Option<Instant>,
}

/// Runs the plan; `completed` is told how many runs have replied so far (tests use it to
/// time disruptions by progress).
pub(crate) async fn drive(
    client: &async_nats::Client,
    plan: &Plan,
    completed: tokio::sync::watch::Sender<usize>,
) -> Outcome {
    let prefix = client.new_inbox();
    let mut replies_sub = client
        .subscribe(format!("{prefix}.reply.*"))
        .await
        .expect("subscribe replies");
    let mut status_sub = client
        .subscribe(format!("{prefix}.status.*"))
        .await
        .expect("subscribe status");
    let approvals_sub = client
        .subscribe(subjects::approvals(&plan.ns, &plan.workflow))
        .await
        .expect("subscribe approvals");
    client.flush().await.expect("flush");
    let decisions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let in_flight: InFlight = Arc::default();
    let approver = tokio::spawn(approve_all(
        client.clone(),
        (plan.ns.clone(), plan.workflow.clone()),
        approvals_sub,
        in_flight.clone(),
        decisions.clone(),
    ));
    let execution =
        |i: usize| workflow_node::shell::run::names::execution_id(&plan.workflow, &request_id(i));

    let ids = plan.first..plan.first + plan.runs;
    let requests: Vec<Vec<u8>> = ids
        .clone()
        .map(|i| {
            let id = request_id(i);
            let message = Message::new(
                id.clone(),
                Role::User,
                vec![messages::payload::wrap((plan.input)(i))],
            );
            serde_json::to_vec(&Request::message_send(id.as_str(), message)).expect("encode")
        })
        .collect();
    let send = |i: usize| {
        let mut h = async_nats::HeaderMap::new();
        h.insert(headers::STATUS_TO, format!("{prefix}.status.{i}").as_str());
        client.publish_with_reply_and_headers(
            subjects::agent_request(&plan.ns, &plan.workflow),
            format!("{prefix}.reply.{i}"),
            h,
            requests[i - plan.first].clone().into(),
        )
    };
    let index = |subject: &str| {
        subject
            .rsplit('.')
            .next()
            .and_then(|t| t.parse::<usize>().ok())
    };

    let begin = Instant::now();
    let deadline = tokio::time::Instant::now() + plan.deadline;
    let mut runs: HashMap<usize, Run> = HashMap::new();
    let mut replies: HashMap<usize, Vec<Value>> = HashMap::new();
    let mut next = plan.first;
    let mut done = 0;
    let mut resends = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut last_first_reply = begin;
    loop {
        while next < ids.end && runs.len() - done < plan.concurrency {
            send(next).await.expect("publish a request");
            in_flight.lock().expect("in flight").insert(execution(next));
            let now = Instant::now();
            runs.insert(
                next,
                Run {
                    sent: now,
                    last_send: now,
                    unheard: false,
                    last_sign: now,
                    longest: Duration::ZERO,
                    done: None,
                },
            );
            next += 1;
        }
        if done == plan.runs {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            Some(msg) = replies_sub.next() => {
                let Some(i) = index(&msg.subject) else { continue };
                if no_responders(&msg) {
                    // Not a reply: no replica was subscribed (all of them being replaced).
                    if let Some(run) = runs.get_mut(&i) {
                        run.unheard = true;
                    }
                    continue;
                }
                let v: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                replies.entry(i).or_default().push(v);
                if let Some(run) = runs.get_mut(&i) {
                    if run.done.is_none() {
                        in_flight.lock().expect("in flight").remove(&execution(i));
                        let now = Instant::now();
                        run.longest = run.longest.max(now - run.last_sign);
                        run.done = Some(now);
                        last_first_reply = now;
                        done += 1;
                        let _ = completed.send(done);
                    }
                }
            }
            Some(msg) = status_sub.next() => {
                let Some(run) = index(&msg.subject).and_then(|i| runs.get_mut(&i)) else { continue };
                if run.done.is_none() {
                    let now = Instant::now();
                    run.longest = run.longest.max(now - run.last_sign);
                    run.last_sign = now;
                }
            }
            _ = tick.tick() => {
                let now = Instant::now();
                let stale: Vec<usize> = runs
                    .iter()
                    .filter(|(_, r)| {
                        r.done.is_none()
                            && (r.unheard || now - r.last_send.max(r.last_sign) >= plan.resend_after)
                    })
                    .map(|(i, _)| *i)
                    .collect();
                for i in stale {
                    send(i).await.expect("publish a request");
                    resends += 1;
                    if let Some(r) = runs.get_mut(&i) {
                        r.last_send = now;
                        r.unheard = false;
                    }
                }
            }
        }
    }
    let elapsed = last_first_reply - begin;
    // Drain: a duplicate final reply would come from a redelivered event, within an ack
    // wait or two.
    let quiet_end = tokio::time::Instant::now() + plan.quiet;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(quiet_end) => break,
            Some(msg) = replies_sub.next() => {
                let Some(i) = index(&msg.subject) else { continue };
                if no_responders(&msg) {
                    continue;
                }
                let v: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                replies.entry(i).or_default().push(v);
            }
        }
    }
    approver.abort();
    let missing = ids.filter(|i| !replies.contains_key(i)).collect();
    let mut longest_stall = Vec::new();
    let mut durations = Vec::new();
    for run in runs.values() {
        longest_stall.push(run.longest);
        if let Some(d) = run.done {
            durations.push(d - run.sent);
        }
    }
    Outcome {
        replies,
        missing,
        resends,
        decisions: decisions.load(std::sync::atomic::Ordering::Relaxed),
        longest_stall,
        durations,
        elapsed,
    }
}

/// Whether `msg` is the server's "no responders" status for a request nobody was
/// subscribed to (not a reply of the workflow).
fn no_responders(msg: &async_nats::Message) -> bool {
    msg.status == Some(async_nats::StatusCode::NO_RESPONDERS)
}

/// Approves (as `alice`, signed with her key) every approval request seen, once per run
/// and node; a decision that no replica recorded (timeout, no responders, a replica
/// killed) is sent again, signed again. Like a person with `workflow-node approvals` open,
/// it also reads the approvals waiting in the records of the runs `in_flight`, every
/// [`LOOK_AGAIN`]: an approval request is a core NATS message, lost when a partition or a
/// server's end cuts its way, while the approval it announces stays waiting in the record.
async fn approve_all(
    client: async_nats::Client,
    (ns, workflow): (String, String),
    mut approvals: async_nats::Subscriber,
    in_flight: InFlight,
    decisions: Arc<std::sync::atomic::AtomicUsize>,
) {
    let mut seen = HashSet::new();
    let mut look = tokio::time::interval(LOOK_AGAIN);
    loop {
        let asked: Vec<(String, String)> = tokio::select! {
            msg = approvals.next() => {
                let Some(msg) = msg else { return };
                let Ok(part) = serde_json::from_slice::<Part>(&msg.payload) else {
                    continue;
                };
                let Some(data) = part.as_data() else { continue };
                let (Some(execution), Some(node)) =
                    (data["execution_id"].as_str(), data["node_id"].as_str())
                else {
                    continue;
                };
                vec![(execution.to_string(), node.to_string())]
            }
            _ = look.tick() => waiting(&client, &ns, &workflow, &in_flight).await,
        };
        for (execution, node) in asked {
            if !seen.insert((execution.clone(), node.clone())) {
                continue; // a duplicate request (at-least-once): the first one is being answered
            }
            let decision = WorkflowApprovalDecision {
                execution_id: execution,
                node_id: node,
                decision: Decision::Approve,
                by: Some("alice".into()),
                comment: None,
            };
            tokio::spawn(decide(
                client.clone(),
                ns.clone(),
                workflow.clone(),
                decision,
                decisions.clone(),
            ));
        }
    }
}

/// How often the approver reads the approvals waiting in the runs bucket.
const LOOK_AGAIN: Duration = Duration::from_secs(3);

/// The runs sent and not answered yet, by execution id.
type InFlight = Arc<std::sync::Mutex<HashSet<ExecutionId>>>;

/// The approvals waiting in the runs `in_flight` of `workflow` (execution, node), as
/// `workflow-node approvals` lists them; those whose record cannot be read now (a
/// partition) are left to the next look.
async fn waiting(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    in_flight: &InFlight,
) -> Vec<(String, String)> {
    let Ok(inspector) = workflow_node::shell::Inspector::open(client.clone(), ns).await else {
        return Vec::new();
    };
    let runs: Vec<ExecutionId> = in_flight
        .lock()
        .expect("in flight")
        .iter()
        .cloned()
        .collect();
    let mut asked = Vec::new();
    for execution in runs {
        if let Ok(Some(run)) = inspector.read_run(workflow, &execution).await {
            let nodes = run.record.asks.keys();
            asked.extend(nodes.map(|node| (execution.0.clone(), node.clone())));
        }
    }
    asked
}

/// Sends `decision` until a replica records it, for as long as a run may take: a store
/// without quorum (a partition) refuses decisions at once, for as long as it lasts.
async fn decide(
    client: async_nats::Client,
    ns: String,
    workflow: String,
    decision: WorkflowApprovalDecision,
    decisions: Arc<std::sync::atomic::AtomicUsize>,
) {
    let patience = Instant::now() + super::RUN_DEADLINE;
    while Instant::now() < patience {
        decisions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if approve(&client, &ns, &workflow, &decision).await {
            return;
        }
        // No replica answered (all being replaced) or it could not record it: again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "the decision on {} was never recorded",
        decision.execution_id
    );
}

/// Sends `decision` once, signed by `alice`; whether a replica recorded it (or one of ours
/// before it: the approval is "not waiting" any more).
pub(crate) async fn approve(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    decision: &WorkflowApprovalDecision,
) -> bool {
    let id = format!("decision-{}", decision.execution_id);
    let message = Message::new(id.clone(), Role::User, vec![Part::data_part(decision)]);
    let body = serde_json::to_vec(&Request::message_send(id.as_str(), message)).expect("encode");
    let subject = subjects::agent_request(ns, workflow);
    let h = async_nats::HeaderMap::new();
    let asked = agent_sdk::signing::request(client, subject, h, body.into(), Some(super::alice()));
    let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_secs(3), asked).await else {
        return false;
    };
    let v: Value = serde_json::from_slice(&reply.payload).unwrap_or(Value::Null);
    let state = v["result"]["status"]["state"].as_str().unwrap_or("");
    state == "completed" || v.to_string().contains("not waiting")
}

/// `p`-th percentile (0..=100) of `values`.
pub(crate) fn percentile(values: &[Duration], p: usize) -> Duration {
    let mut v = values.to_vec();
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() - 1) * p / 100).min(v.len() - 1)]
}
