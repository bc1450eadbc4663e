//! A replica whose clock is five minutes ahead of, or behind, the servers' (libfaketime
//! preloaded into the real binary, the monotonic clock left alone so that tokio's timers
//! work; the static nats-server is not skewed): far beyond the 60 s the node once allowed
//! between replicas. A replica with the right clock arms a loop's delay and is killed once
//! the skewed one serves, so the skewed one alone fires it. Timers go by the servers'
//! clock as each replica estimates it from the timestamps of what the servers stored
//! (`shell::clock`), never by its own: the delay ends no earlier than it was set for (but
//! for the latency of a delivery, under a second), and not five minutes late either (the
//! caller's patience is the delay plus a minute). Needs Debian's `faketime`.

use std::time::{Duration, Instant};

use agent_sdk::workflow::invoke;
use futures::StreamExt;
use serde_json::json;

use crate::support;
use crate::support::crash::replicas::{write_file, Logs, Spawner};

/// libfaketime as Debian installs it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

const STUBS: &str = r#"
agents:
  - name: Echo
    rules: [{output: {i: "{{input.i}}"}}]
"#;

const WORKFLOW: &str = r#"
name: Delayed
workflow:
  description: two iterations 30 s apart
  nodes:
    - {id: l, type: loop, node: step, condition: "{{_loop_iteration}} < 1", max_iterations: 3, delay: 30s}
    - {id: step, type: agent, agent_name: Echo, input: {i: "{{_loop_iteration}}"}}
  output_mapping: {last: "{{step.output.i}}"}
"#;

/// The loop's delay.
const DELAY: Duration = Duration::from_secs(30);
/// How much earlier than its delay the run may end: the latency of the delivery that told
/// a replica the servers' time.
const SLACK: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_five_minutes_ahead_fires_no_timer_early() {
    delay_fired_by(&[("FAKETIME", "+5m")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_five_minutes_behind_fires_its_timers_on_time() {
    delay_fired_by(&[("FAKETIME", "-5m")]).await;
}

/// Runs the delayed workflow: armed by a replica with the right clock, fired by one with
/// the clock `faketime` gives.
async fn delay_fired_by(faketime: &[(&str, &str)]) {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime"
    );
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let stub_file = agent_sdk::stub::load_stub_file(write_file(dir.path(), "stubs.yaml", STUBS))
        .expect("stub file");
    let _stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", stub_file)
        .await
        .expect("stubs");
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "delayed.yaml", WORKFLOW),
        ack_wait: 1.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let mut right = spawner.spawn(1, &server.url());
    right.wait_ready(Duration::from_secs(30)).await;

    let js = async_nats::jetstream::new(client.clone());
    let wakes = js
        .get_key_value(workflow_node::shell::run::names::wakes_bucket("mesh"))
        .await
        .expect("wakes bucket");
    let mut watch = wakes.watch_all().await.expect("watch");
    let started = Instant::now();
    let caller = client.clone();
    let run = tokio::spawn(async move {
        invoke(
            &caller,
            "mesh",
            "Delayed",
            &json!({}),
            DELAY + Duration::from_secs(60),
            |_| {},
        )
        .await
    });
    let armed = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(Ok(entry)) = watch.next().await {
            if String::from_utf8_lossy(&entry.value).contains("loop_delay") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(armed, Ok(true)),
        "the delay's wake was never armed"
    );
    let mut env = vec![
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    env.extend_from_slice(faketime);
    let mut skewed = spawner.spawn_env(2, &server.url(), &env);
    skewed.wait_ready(Duration::from_secs(30)).await;
    right.kill();

    let result = run.await.expect("caller");
    let took = started.elapsed();
    let result = result.unwrap_or_else(|e| {
        panic!(
            "no result within {:?} ({e}): the delay never fired; logs:\n{}",
            DELAY + Duration::from_secs(60),
            logs.tail()
        )
    });
    assert_eq!(result.status, "success", "logs:\n{}", logs.tail());
    assert!(
        took + SLACK >= DELAY,
        "the run took {took:?}: its {DELAY:?} delay fired early"
    );
    skewed.kill();
}
