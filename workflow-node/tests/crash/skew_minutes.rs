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

use crate::support::crash::clock::{delayed, skewed, Wakes, ECHO_STUBS};
use crate::support::crash::rig::Rig;

/// The loop's delay.
const DELAY: Duration = Duration::from_secs(30);
/// How much earlier than its delay the run may end: the latency of the delivery that told
/// a replica the servers' time.
const SLACK: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_five_minutes_ahead_fires_no_timer_early() {
    delay_fired_by("+5m").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_five_minutes_behind_fires_its_timers_on_time() {
    delay_fired_by("-5m").await;
}

/// Runs the delayed workflow: armed by a replica with the right clock, fired by one with
/// the clock `faketime` gives.
async fn delay_fired_by(faketime: &'static str) {
    let env = skewed(faketime);
    let rig = Rig::start(ECHO_STUBS, "delayed.yaml", &delayed(DELAY)).await;
    let mut right = rig.spawner.spawn(1, &rig.url());
    right.wait_ready(Duration::from_secs(30)).await;

    let mut wakes = Wakes::watch(&rig.client).await;
    let started = Instant::now();
    let run = rig.invoke("Delayed", DELAY + Duration::from_secs(60));
    wakes.loop_delay_armed().await;
    let mut skewed = rig.spawner.spawn_env(2, &rig.url(), &env);
    skewed.wait_ready(Duration::from_secs(30)).await;
    right.kill();

    let result = run.await.expect("caller");
    let took = started.elapsed();
    let result = result.unwrap_or_else(|e| {
        panic!(
            "no result within {:?} ({e}): the delay never fired; logs:\n{}",
            DELAY + Duration::from_secs(60),
            rig.logs.tail()
        )
    });
    assert_eq!(result.status, "success", "logs:\n{}", rig.logs.tail());
    assert!(
        took + SLACK >= DELAY,
        "the run took {took:?}: its {DELAY:?} delay fired early"
    );
    skewed.kill();
}
