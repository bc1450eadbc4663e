//! Shared by the crash tests (the `crash` binary): the workflow they run, the stub agents, the
//! replica processes and their killer (`replicas`), the caller and approver (`load`), the
//! set-up of a test on one server (`rig`), the timer tests' workflow and skewed clocks
//! (`clock`), and the checks every crash test makes on what came back and on what is left
//! in KV.

pub(crate) mod clock;
pub(crate) mod invariants;
pub(crate) mod load;
pub(crate) mod replicas;
pub(crate) mod rig;

use std::collections::HashMap;
use std::time::Duration;

use messages::a2a::Part;
use serde_json::{json, Value};
use workflow_node::shell::{run::names, RunRecord};

use load::{percentile, request_id, Outcome};

use crate::support::fixtures::{checked_doubler, echo};

/// The key of approver `alice` (one per test process): the replicas bind her name to it
/// (`serve --approver`), the approver signs her decisions with it.
pub(crate) fn alice() -> &'static agent_sdk::Signer {
    static KEY: std::sync::OnceLock<agent_sdk::Signer> = std::sync::OnceLock::new();
    KEY.get_or_init(agent_sdk::Signer::generate)
}

/// The workflow: a map, a fork joined with a retried call, a loop with a delay, and an
/// approval. Node timeouts with retries cover an agent request or reply lost in a NATS
/// failover (both are core NATS messages).
pub(crate) const WORKFLOW: &str = r#"
name: Crash
default_node_timeout_seconds: 8
workflow:
  description: map, fork/join, retries, a loop with a delay and an approval, for crash tests
  retry_strategy: {limit: 3, backoff: {duration: 100ms}}
  nodes:
    - {id: each, type: map, items: "{{workflow.input.items}}", node: double, concurrency_limit: 3}
    - {id: double, type: agent, agent_name: Doubler, input: {value: "{{_map_item}}"}}
    - id: both
      type: fork
      depends_on: [each]
      branches:
        - {id: a, agent_name: Doubler, input: {value: "{{workflow.input.n}}"}, output_key: doubled}
        - {id: b, agent_name: Echo, input: {n: "{{workflow.input.n}}"}, output_key: echoed}
    - id: flaky
      type: agent
      agent_name: Flaky
      depends_on: [each]
      input: {n: "{{workflow.input.n}}"}
      retry_strategy: {limit: 4, backoff: {duration: 100ms}}
    - {id: joined, type: join, depends_on: [both, flaky], wait_for: [both, flaky], strategy: all}
    - {id: l, type: loop, depends_on: [joined], node: step, condition: "{{_loop_iteration}} < 2", max_iterations: 5, delay: 150ms}
    - {id: step, type: agent, agent_name: Echo, input: {i: "{{_loop_iteration}}"}}
    - {id: gate, type: approval, depends_on: [l], approvers: [alice], message: "go?", timeout: 1h}
  output_mapping:
    doubled: "{{each.output.results}}"
    fork: "{{both.output}}"
    flaky: "{{flaky.output}}"
    loop: "{{l.output}}"
    last: "{{step.output.i}}"
    by: "{{gate.output.by}}"
"#;

/// The workflow's name.
pub(crate) const NAME: &str = "Crash";

/// The stub agents, served in the test process (never killed).
pub(crate) const STUBS: &str = concat!(
    "agents:",
    echo!(),
    checked_doubler!(),
    r#"
  - name: Flaky
    fail_first: 2
    error: upstream unavailable
    error_kind: transient
    rules: [{output: {ok: true, n: "{{input.n}}"}}]
"#,
);

/// The input of run `i`.
pub(crate) fn input(i: usize) -> Value {
    json!({"n": i, "items": [i, i + 1, i + 2]})
}

/// The output run `i` must end with.
pub(crate) fn expected(i: usize) -> Value {
    let d = |v: usize| json!({"value": 2 * v});
    json!({
        "doubled": [d(i), d(i + 1), d(i + 2)],
        "fork": {"doubled": d(i), "echoed": {"n": i}},
        "flaky": {"ok": true, "n": i},
        "loop": {"iterations_completed": 3, "stopped_reason": "condition_false"},
        "last": 2,
        "by": "alice"
    })
}

/// The state and output of a final reply (`completed` and the output DataPart).
pub(crate) fn reply_output(reply: &Value) -> (String, Option<Value>) {
    let task = &reply["result"];
    let state = task["status"]["state"].as_str().unwrap_or("?").to_string();
    let parts: Vec<Part> =
        serde_json::from_value(task["status"]["message"]["parts"].clone()).unwrap_or_default();
    let output = parts.iter().find_map(|p| {
        let data = p.as_data()?;
        let protocol = data
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.starts_with("workflow_"));
        if protocol {
            None
        } else {
            messages::payload::part_value(p)
        }
    });
    (state, output)
}

/// Serves the stub agents on `client`.
pub(crate) async fn stubs(
    client: &async_nats::Client,
    dir: &std::path::Path,
) -> Vec<agent_sdk::AgentHandle> {
    rig::serve_stubs(client, dir, STUBS).await
}

/// Checks every run replied exactly once, completed, with the expected output; returns a
/// list of problems (empty when all is well).
pub(crate) fn check_replies(outcome: &Outcome, runs: usize) -> Vec<String> {
    check_replies_of(outcome, 0..runs)
}

/// [`check_replies`] for the runs of `range` (by index).
pub(crate) fn check_replies_of(outcome: &Outcome, range: std::ops::Range<usize>) -> Vec<String> {
    let mut problems = Vec::new();
    if !outcome.missing.is_empty() {
        problems.push(format!(
            "{} runs never replied: {:?}",
            outcome.missing.len(),
            outcome.missing
        ));
    }
    for i in range {
        let Some(replies) = outcome.replies.get(&i) else {
            continue;
        };
        if replies.len() != 1 {
            let bodies: Vec<String> = replies
                .iter()
                .map(|r| r.to_string().chars().take(400).collect())
                .collect();
            problems.push(format!(
                "run {i} ({}) got {} final replies: {bodies:#?}",
                request_id(i),
                replies.len()
            ));
        }
        let (state, output) = reply_output(&replies[0]);
        if state != "completed" || output.as_ref() != Some(&expected(i)) {
            problems.push(format!(
                "run {i}: {state}, output {output:?}; reply {}",
                replies[0]
            ));
        }
    }
    problems
}

/// Checks that every run's KV record is terminal (no run left behind); returns problems.
pub(crate) async fn check_records(client: &async_nats::Client, runs: usize) -> Vec<String> {
    check_records_of(client, 0..runs).await
}

/// [`check_records`] for the runs of `range` (by index).
pub(crate) async fn check_records_of(
    client: &async_nats::Client,
    range: std::ops::Range<usize>,
) -> Vec<String> {
    let js = async_nats::jetstream::new(client.clone());
    // Right after a fault the bucket may still be electing its leader: ask again.
    let mut tries = 0;
    let (kv, inspector) = loop {
        let kv = js.get_key_value(names::runs_bucket("mesh")).await;
        let inspector = workflow_node::shell::Inspector::open(client.clone(), "mesh").await;
        match (kv, inspector) {
            (Ok(kv), Ok(inspector)) => break (kv, inspector),
            (kv, inspector) if tries == 10 => panic!(
                "the runs bucket: {:?} {:?}",
                kv.err(),
                inspector.err().map(|e| e.to_string())
            ),
            _ => tries += 1,
        }
    };
    let mut problems = Vec::new();
    let mut statuses: HashMap<String, usize> = HashMap::new();
    let mut largest_outbox = 0;
    let mut history_entries = 0;
    for i in range {
        let execution = names::execution_id(NAME, &request_id(i));
        let key = names::run_key(NAME, &execution);
        // A stream or bucket may still be electing its leader after the last fault (503,
        // "temporarily unavailable"): the checker's reads ask again until it has one.
        let mut tries = 0;
        let (record, history) = loop {
            let record = leader_get(&kv, &key).await;
            let history = inspector.history(NAME, &execution).await;
            if (record.is_ok() && history.is_ok()) || tries == READ_TRIES {
                break (record, history);
            }
            tries += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        match record {
            Ok(Some(bytes)) => match RunRecord::from_entry(&bytes) {
                Ok(record) => {
                    *statuses
                        .entry(record.state.status.as_str().to_string())
                        .or_default() += 1;
                    if !record.state.status.is_terminal() {
                        let wakes = wake_entries(&js, &execution).await;
                        problems.push(format!(
                            "run {i} ({execution}) is left {}: {}; wake entries {wakes:?}",
                            record.state.status.as_str(),
                            waiting_on(&record)
                        ));
                    }
                    // Entries go once their events are acked, whichever replica commits:
                    // only those in flight at the run's last commit can remain.
                    largest_outbox = largest_outbox.max(record.outbox.len());
                    // Every event that changed the run is in its history, once, in order,
                    // whichever replica applied it and whatever was killed in between.
                    match &history {
                        Ok(history) => {
                            history_entries += history.len();
                            let ns: Vec<u64> = history.iter().map(|e| e.n).collect();
                            if ns != (1..=record.applied).collect::<Vec<_>>() {
                                problems.push(format!(
                                    "run {i} ({execution}) applied {} events, its history has {ns:?}",
                                    record.applied
                                ));
                            }
                        }
                        Err(e) => problems.push(format!("run {i}: reading its history: {e}")),
                    }
                    if record.outbox.len() > MAX_OUTBOX {
                        problems.push(format!(
                            "run {i} ({execution}) holds {} outbox entries",
                            record.outbox.len()
                        ));
                    }
                }
                Err(e) => problems.push(format!("run {i}: unreadable record: {e}")),
            },
            Ok(None) => problems.push(format!("run {i} ({execution}) has no record")),
            Err(e) => problems.push(format!("run {i}: reading its record: {e}")),
        }
    }
    eprintln!(
        "run records by status: {statuses:?}; largest outbox {largest_outbox}; \
         {history_entries} history entries"
    );
    problems
}

/// Reads `key` from its bucket's stream leader, as the node reads records. A KV `get` is a
/// direct get, which any replica of the bucket may serve: one still catching up after a
/// restart gives an older record, whose history then looks longer than its events.
async fn leader_get(
    kv: &async_nats::jetstream::kv::Store,
    key: &str,
) -> Result<Option<bytes::Bytes>, String> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let subject = messages::subjects::kv_key(&kv.name, key);
    match kv.stream.get_last_raw_message_by_subject(&subject).await {
        Ok(m) if m.payload.is_empty() => Ok(None),
        Ok(m) => Ok(Some(m.payload)),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// What a run left behind waits on: its unfinished nodes with their status, its calls in
/// flight and its queue, for the report of a run that never ended.
fn waiting_on(record: &RunRecord) -> String {
    let nodes = serde_json::to_value(&record.state.nodes).unwrap_or_default();
    let unfinished: Vec<String> = nodes
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(id, n)| {
            let status = n["status"].as_str().unwrap_or("?");
            (!matches!(status, "success" | "skipped")).then(|| format!("{id} {status}"))
        })
        .collect();
    let calls = serde_json::to_string(&record.state.calls).unwrap_or_default();
    let timers: Vec<(&String, u64)> = record.timers.iter().map(|(k, t)| (k, t.at.0)).collect();
    let checks = serde_json::to_string(&record.checks).unwrap_or_default();
    format!(
        "nodes {unfinished:?}; calls {}; queue {:?}; {} events applied; timers {timers:?}; \
         checks {}; wake {:?}",
        calls.chars().take(600).collect::<String>(),
        record.state.queue,
        record.applied,
        checks.chars().take(300).collect::<String>(),
        record.wake,
    )
}

/// The entries the wakes bucket holds for run `execution` (key and value), for the report
/// of a run that never ended: a run waits on a wake its record names.
async fn wake_entries(
    js: &async_nats::jetstream::Context,
    execution: &workflow_node::core::ExecutionId,
) -> Vec<String> {
    let Ok(kv) = js.get_key_value(names::wakes_bucket("mesh")).await else {
        return vec!["(no wakes bucket)".into()];
    };
    let prefix = names::timer_key(NAME, execution, "");
    let Ok(keys) = kv.keys().await else {
        return vec!["(keys unreadable)".into()];
    };
    let keys: Vec<String> = futures::StreamExt::collect::<Vec<_>>(keys)
        .await
        .into_iter()
        .flatten()
        .filter(|k| k.starts_with(&prefix))
        .collect();
    let mut found = Vec::new();
    for key in keys {
        let value = kv.get(&key).await.ok().flatten().unwrap_or_default();
        found.push(format!("{key} = {}", String::from_utf8_lossy(&value)));
    }
    found
}

/// How many times the checker reads a run again while its store elects a leader (half a
/// second apart).
const READ_TRIES: usize = 60;

/// The most outbox entries a run's record may keep: its last event's, and those of events
/// other replicas held when it was committed.
const MAX_OUTBOX: usize = 8;

/// Prints the figures of a crash test.
pub(crate) fn report(what: &str, outcome: &Outcome, kills: usize) {
    let stalls = &outcome.longest_stall;
    let durations = &outcome.durations;
    eprintln!(
        "{what}: {} runs in {:.1} s, {kills} replicas killed, {} requests resent, {} decisions sent",
        durations.len(),
        outcome.elapsed.as_secs_f64(),
        outcome.resends,
        outcome.decisions,
    );
    eprintln!(
        "  run duration  p50 {:?} p90 {:?} max {:?}",
        percentile(durations, 50),
        percentile(durations, 90),
        percentile(durations, 100)
    );
    eprintln!(
        "  longest time a run made no progress: p50 {:?} p90 {:?} p99 {:?} max {:?}",
        percentile(stalls, 50),
        percentile(stalls, 90),
        percentile(stalls, 99),
        percentile(stalls, 100)
    );
}

/// Fails the test with `problems` and the replicas' log tail, if there are any problems.
/// With `CRASH_LOGS` set, prints the tail anyway.
pub(crate) fn assert_clean(problems: &[String], logs: &replicas::Logs) {
    if std::env::var_os("CRASH_LOGS").is_some() {
        eprintln!("replica log tail:\n{}", logs.tail());
    }
    if !problems.is_empty() {
        let shown: Vec<&String> = problems.iter().take(30).collect();
        panic!(
            "{} problems:\n{shown:#?}\nreplica log tail:\n{}",
            problems.len(),
            logs.tail()
        );
    }
}

/// A generous bound for the whole of a run's life under faults.
pub(crate) const RUN_DEADLINE: Duration = Duration::from_secs(150);
