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

use crate::support::crash::clock::{delayed, skewed, Wakes, ECHO_STUBS};
use crate::support::crash::rig::Rig;

/// The loop's delay: longer than the skew allowed, so that firing at once breaks the
/// promise.
const DELAY: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_clock_behind_makes_timers_early_by_no_more_than_the_allowance() {
    let clock = skewed("-50s");
    let rig = Rig::start(ECHO_STUBS, "delayed.yaml", &delayed(DELAY)).await;
    let mut behind = rig.spawner.spawn_env(1, &rig.url(), &clock);
    behind.wait_ready(Duration::from_secs(30)).await;

    // The run's wake, armed by the replica behind once the first iteration ended.
    let mut wakes = Wakes::watch(&rig.client).await;
    let started = Instant::now();
    let run = rig.invoke("Delayed", Duration::from_secs(240));
    wakes.loop_delay_armed().await;
    let mut right = rig.spawner.spawn(2, &rig.url());
    right.wait_ready(Duration::from_secs(30)).await;
    let result = run.await.expect("caller").expect("a result");
    let took = started.elapsed();
    assert_eq!(result.status, "success", "logs:\n{}", rig.logs.tail());
    let tolerance = Duration::from_millis(workflow_node::core::TIMER_EARLY_TOLERANCE_MS);
    assert!(
        took + tolerance >= DELAY,
        "the run took {took:?}: its {DELAY:?} delay ended early"
    );
}
