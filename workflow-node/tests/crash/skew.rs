//! A replica whose wall clock is 50 s behind the others' (libfaketime preloaded into the
//! real binary, the monotonic clock left alone so that tokio's timers work; the static
//! nats-server cannot be skewed, and is not). It arms a loop's 90 s delay by its own clock;
//! a replica with the right clock, started once the delay is armed, fires it by its own:
//! 50 s early. The node's promise is a timer no earlier than its deadline by more than the
//! skew it allows between replicas (`TIMER_EARLY_TOLERANCE_MS`, 60 s), and never lost:
//! the run must end, and no sooner than the delay less that allowance. Timers now go by
//! the servers' clock (`shell::clock`), so the skew does not show at all; a skew of
//! minutes is `skew_minutes.rs`.
//! Needs Debian's `faketime` (`.ci/run` installs it).

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
  description: two iterations 90 s apart
  nodes:
    - {id: l, type: loop, node: step, condition: "{{_loop_iteration}} < 1", max_iterations: 3, delay: 90s}
    - {id: step, type: agent, agent_name: Echo, input: {i: "{{_loop_iteration}}"}}
  output_mapping: {last: "{{step.output.i}}"}
"#;

/// The loop's delay: longer than the skew allowed, so that firing at once breaks the
/// promise.
const DELAY: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_clock_behind_makes_timers_early_by_no_more_than_the_allowance() {
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
    let mut behind = spawner.spawn_env(
        1,
        &server.url(),
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", "-50s"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    behind.wait_ready(Duration::from_secs(30)).await;

    // The run's wake, armed by the replica behind once the first iteration ended.
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
            Duration::from_secs(240),
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
    let mut right = spawner.spawn(2, &server.url());
    right.wait_ready(Duration::from_secs(30)).await;
    let result = run.await.expect("caller").expect("a result");
    let took = started.elapsed();
    assert_eq!(result.status, "success", "logs:\n{}", logs.tail());
    let tolerance = Duration::from_millis(workflow_node::core::TIMER_EARLY_TOLERANCE_MS);
    assert!(
        took + tolerance >= DELAY,
        "the run took {took:?}: its {DELAY:?} delay ended early"
    );
}
