//! Timers as one wake entry per run, over a real nats-server: a chain
//! writes the timers bucket a constant number of times whatever its length, and timeouts,
//! retries and the run's deadline still fire through the wake.

use std::time::Duration;

use agent_sdk::workflow::{invoke, RunResult};
use serde_json::{json, Value};
use workflow_node::shell::{run::names, Config};

use crate::support;
use crate::support::fixtures::echo;

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = concat!(
    "agents:",
    echo!(),
    r#"
  - name: Sleepy
    delay: 20s
    rules: [{output: {late: true}}]
"#,
);

/// A chain of `n` Echo nodes, each with a node timeout of an hour.
fn chain(n: usize) -> String {
    let nodes = support::fixtures::chain_nodes(n, ", timeout: 1h");
    format!(
        "name: Long\nworkflow:\n  description: a chain\n  nodes:\n{nodes}  output_mapping: {{last: \"{{{{n{}.output.i}}}}\"}}\n",
        n - 1
    )
}

const TIMED: &str = r#"
name: Timed
workflow:
  description: a call that answers too late, tried twice, then the run goes on
  nodes:
    - {id: slow, type: agent, agent_name: Sleepy, input: {}, timeout: 300ms, retry_strategy: {limit: 1, retry_policy: OnError, backoff: {duration: 50ms}}}
  output_mapping: {}
"#;

async fn run(client: &async_nats::Client, workflow: &str, input: Value) -> RunResult {
    invoke(client, "mesh", workflow, &input, TIMEOUT, |_| {})
        .await
        .expect("a result")
}

/// How many messages the timers bucket's stream has ever stored.
async fn timer_writes(client: &async_nats::Client) -> u64 {
    let js = async_nats::jetstream::new(client.clone());
    let mut stream = js
        .get_stream(format!("KV_{}", names::wakes_bucket("mesh")))
        .await
        .expect("the timers bucket");
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence
}

#[tokio::test]
async fn a_chain_writes_the_timers_bucket_a_constant_number_of_times_not_per_node() {
    let yaml = chain(20);
    let m = support::mesh::mesh(STUBS, &[&yaml], support::mesh::trusting(Config::default())).await;
    let before = timer_writes(&m.client).await;
    let r = run(&m.client, "Long", json!({})).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    support::mesh::settled(&m.client, "Long").await;
    let writes = timer_writes(&m.client).await - before;
    // The wake armed at the start, dropped at the end: 20 nodes with a timeout each used to
    // write 2 entries per node (armed at dispatch, purged at the result).
    assert!(
        writes <= 3,
        "{writes} writes to the timers bucket for a chain of 20"
    );
}

#[tokio::test]
async fn timeouts_and_retries_fire_through_the_wake_and_the_run_ends_with_none_left() {
    let m = support::mesh::mesh(STUBS, &[TIMED], support::mesh::trusting(Config::default())).await;
    let r = run(&m.client, "Timed", json!({})).await;
    assert_eq!(r.status, "failure");
    let e = r.error.unwrap_or_default();
    assert!(e.contains("timed out") || e.contains("timeout"), "{e}");
    support::mesh::settled(&m.client, "Timed").await;
    let js = async_nats::jetstream::new(m.client.clone());
    let timers = js.get_key_value(names::wakes_bucket("mesh")).await.unwrap();
    // The drop of the last wake is published before the last event is acked; the purge
    // marker may still be on its way: wait for the bucket to show it, boundedly.
    let mut left = Vec::new();
    for _ in 0..100 {
        use futures::StreamExt;
        left = timers
            .keys()
            .await
            .unwrap()
            .filter_map(|k| async { k.ok() })
            .collect::<Vec<_>>()
            .await;
        if left.is_empty() {
            break;
        }
        m.client.flush().await.unwrap();
        tokio::task::yield_now().await;
    }
    assert!(left.is_empty(), "timers left behind: {left:?}");
}
