//! What the crash tests of timers share: a workflow whose loop waits a delay between two
//! iterations, the wait until a replica has armed that delay's wake, and a replica's wall
//! clock skewed with libfaketime (preloaded into the real binary, the monotonic clock
//! left alone so that tokio's timers work; the static nats-server cannot be skewed).
//! Needs Debian's `faketime` (`.ci/run` installs it).

use std::time::Duration;

use futures::StreamExt;

/// libfaketime as Debian installs it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The stub agent the delayed workflow calls.
pub(crate) const ECHO_STUBS: &str = r#"
agents:
  - name: Echo
    rules: [{output: {i: "{{input.i}}"}}]
"#;

/// The workflow `Delayed`: two iterations of a loop `delay` apart.
pub(crate) fn delayed(delay: Duration) -> String {
    let s = delay.as_secs();
    format!(
        r#"
name: Delayed
workflow:
  description: two iterations {s} s apart
  nodes:
    - {{id: l, type: loop, node: step, condition: "{{{{_loop_iteration}}}} < 1", max_iterations: 3, delay: {s}s}}
    - {{id: step, type: agent, agent_name: Echo, input: {{i: "{{{{_loop_iteration}}}}"}}}}
  output_mapping: {{last: "{{{{step.output.i}}}}"}}
"#
    )
}

/// The environment of a replica whose wall clock libfaketime sets as `faketime` says
/// (`+5m`, `-50s`); fails the test when libfaketime is not installed.
pub(crate) fn skewed(faketime: &'static str) -> [(&'static str, &'static str); 3] {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime"
    );
    [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", faketime),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]
}

/// A watch of the wakes bucket, opened before a run starts so that no wake is missed.
pub(crate) struct Wakes(async_nats::jetstream::kv::Watch);

impl Wakes {
    /// Watches every wake from now on.
    pub(crate) async fn watch(client: &async_nats::Client) -> Wakes {
        let js = async_nats::jetstream::new(client.clone());
        let wakes = js
            .get_key_value(workflow_node::shell::run::names::wakes_bucket("mesh"))
            .await
            .expect("wakes bucket");
        Wakes(wakes.watch_all().await.expect("watch"))
    }

    /// Waits (a minute at most) until a loop's delay is armed as a wake; fails the test
    /// otherwise.
    pub(crate) async fn loop_delay_armed(&mut self) {
        let armed = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(Ok(entry)) = self.0.next().await {
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
    }
}
