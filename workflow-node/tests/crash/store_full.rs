//! A store that fills up under callers that each run, one after another, runs that store
//! about 100 KiB: the runs bucket, limited to 1 MiB (`serve --store-limit runs=…`; the
//! node's limits are reserved against the server's `max_file_store`, so a bucket's limit
//! is where a deployment's store fills first). The promise (`docs/faults.md`): a run in
//! flight keeps retrying its commit, every 5 s at most, for as long as the store is full
//! (abandoning it would need a write as well), and ends right once space is made (here:
//! the bucket's limit raised, as an operator does with `nats kv edit` or a larger
//! `--store-limit`); a start whose own write is refused is answered at once with an error
//! naming the full store; every caller gets one answer.
//!
//! Found before: the run in flight was abandoned after its ten tries, which the full store
//! refused to store too, so its caller heard nothing while the store was full, and then
//! heard that its accepted run failed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::workflow::invoke;
use serde_json::json;

use crate::support::crash::assert_clean;
use crate::support::crash::replicas::Logs;
use crate::support::crash::rig::Rig;

const STUBS: &str = r#"
agents:
  - name: Echo
    rules: [{output: {text: "{{input.text}}"}}]
"#;

const WORKFLOW: &str = r#"
name: Filler
workflow:
  description: one call that stores its input and output
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {text: "{{workflow.input.text}}"}}
  output_mapping: {text: "{{echo.output.text}}"}
"#;

/// Callers running at once.
const CALLERS: usize = 4;
/// The runs bucket's limit, filled after some ten runs.
const SMALL: u64 = 1 << 20;
/// Every other stream's and bucket's limit, small enough for the server's store: each
/// store the node makes (`StoreLimits::NAMES`, so a store added later is limited too) gets
/// 1 MiB, but for the streams a run writes most to.
fn others() -> Vec<String> {
    workflow_node::limits::StoreLimits::NAMES
        .iter()
        .filter(|name| **name != "runs")
        .map(|name| {
            let bytes: u64 = match *name {
                "events" | "artifacts" => 16 << 20,
                "history" => 8 << 20,
                _ => 1 << 20,
            };
            format!("{name}={bytes}")
        })
        .collect()
}

/// What one caller saw: runs that ended right, starts refused for the full store, and
/// anything else (a wrong answer, no answer).
#[derive(Default)]
struct Seen {
    right: usize,
    refused: usize,
    problems: Vec<String>,
}

/// Runs one run after another until the store has filled (`full`).
async fn caller(client: async_nats::Client, full: Arc<AtomicBool>, text: String) -> Seen {
    let mut seen = Seen::default();
    while !full.load(Ordering::SeqCst) {
        let input = json!({"text": text});
        let result = invoke(
            &client,
            "mesh",
            "Filler",
            &input,
            Duration::from_secs(180),
            |_| {},
        )
        .await;
        match result {
            Ok(r) if r.status == "success" && r.output == Some(input) => seen.right += 1,
            Ok(r) => {
                let error = r.error.clone().unwrap_or_default();
                if error.starts_with("could not start the run: the mesh's JetStream store is full")
                {
                    seen.refused += 1;
                } else {
                    seen.problems.push(format!("{} {error}", r.status));
                }
            }
            Err(e) => seen.problems.push(format!("no answer: {e}")),
        }
    }
    seen
}

/// Whether the replica's log shows a commit the full store refused ten times (the
/// replica's `max_deliver`): a run in flight is then past the tries an ordinary failure
/// gets.
fn refused_ten_times(logs: &Logs) -> bool {
    let tail = logs.tail();
    let refused = tail
        .lines()
        .filter(|l| l.contains("maximum bytes exceeded") || l.contains("insufficient"));
    let mut tries: std::collections::HashMap<&str, usize> = Default::default();
    for line in refused {
        if line.contains("abandoning") {
            return true;
        }
        // "event on SUBJECT failed, trying again in 5s: ..."
        let subject = line
            .split("event on ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next());
        // An agent's reply (one event per call; a run's own subject carries several).
        let reply = subject.is_some_and(|s| s.contains(".agent.response."));
        if let (Some(subject), true) = (subject, reply && line.contains("trying again in 5s")) {
            *tries.entry(subject).or_default() += 1;
        }
    }
    tries.values().any(|n| *n >= 6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_in_flight_when_the_store_fills_wait_and_end_right_once_space_is_made() {
    let options = test_harness::Options {
        max_file_store: Some(64 << 20),
        ..test_harness::Options::default()
    };
    let rig = Rig::start_with(options, STUBS, "filler.yaml", WORKFLOW).await;
    let (client, logs) = (&rig.client, &rig.logs);
    let mut limits = vec!["--store-limit".to_string(), format!("runs={SMALL}")];
    for other in others() {
        limits.extend(["--store-limit".to_string(), other]);
    }
    let limits: Vec<&str> = limits.iter().map(String::as_str).collect();
    let mut replica = rig.spawner.spawn_with(1, &rig.url(), &limits);
    replica.wait_ready(Duration::from_secs(30)).await;

    let full = Arc::new(AtomicBool::new(false));
    let text = "x".repeat(48 * 1024);
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| tokio::spawn(caller(client.clone(), full.clone(), text.clone())))
        .collect();
    // The store fills; the runs then in flight wait, past the tries of an ordinary
    // failure.
    let mut ticks = tokio::time::interval(Duration::from_millis(200));
    let waited = tokio::time::timeout(Duration::from_secs(150), async {
        loop {
            ticks.tick().await;
            if refused_ten_times(logs) {
                return;
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "the store never filled\n{}", logs.tail());
    full.store(true, Ordering::SeqCst);

    // Space is made: the bucket's limit raised, as an operator does.
    let js = async_nats::jetstream::new(client.clone());
    let bucket = format!(
        "KV_{}",
        workflow_node::shell::run::names::runs_bucket("mesh")
    );
    let mut config = js
        .get_stream(&bucket)
        .await
        .expect("the runs bucket")
        .info()
        .await
        .expect("its info")
        .config
        .clone();
    config.max_bytes = 32 << 20;
    js.update_stream(config).await.expect("raising its limit");

    let (mut right, mut refused, mut problems) = (0, 0, Vec::new());
    for c in callers {
        let seen = c.await.expect("caller task");
        right += seen.right;
        refused += seen.refused;
        problems.extend(seen.problems);
    }
    eprintln!("full store: {right} runs ended right, {refused} starts refused");
    assert_clean(&problems, logs);
}
