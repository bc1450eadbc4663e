//! Crash test of event triggers with real processes: two `workflow-node serve` replicas
//! of a workflow with a trigger, a killer that `kill -9`s a random replica every
//! 300–700 ms (while messages are in hand among others) and starts a new one, and a
//! producer publishing orders, each twice. Every order must start exactly one run, which
//! succeeds: none lost (the durable consumer gives a message in hand to another replica),
//! none started twice (the de-duplication key names the run), none parked.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use workflow_node::shell::{run::names, RunRecord};

use crate::support;
use crate::support::crash::replicas::{write_file, Fleet, Logs, Spawner};
use crate::support::crash::stubs;

const ORDERS: &str = r#"
name: Orders
workflow:
  description: a run per order
  triggers:
    - {name: each, subject: "orders.>", input: {order: "{{event.payload.id}}"}, dedup_key: "{{event.payload.id}}"}
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {order: "{{workflow.input.order}}"}}
  output_mapping: {order: "{{echo.output.order}}"}
"#;

/// Orders published (each twice): enough that replicas die while messages are in hand.
const ORDERS_SENT: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_starts_one_run_while_replicas_are_killed() {
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let _stubs = stubs(&client, dir.path()).await;
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "orders.yaml", ORDERS),
        ack_wait: 1.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let fleet = Fleet::start(spawner, vec![server.url()], 2).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let killer = tokio::spawn(fleet.clone().run_killer(
        (Duration::from_millis(300), Duration::from_millis(700)),
        stop_rx,
    ));
    let js = async_nats::jetstream::new(client.clone());
    let runs = js.get_key_value(names::runs_bucket("mesh")).await.unwrap();
    let mut watch = runs.watch_with_history("Orders.*").await.expect("watch");
    let producer = {
        let js = js.clone();
        tokio::spawn(async move {
            let mut sent = 0;
            while sent < ORDERS_SENT {
                for _ in 0..2 {
                    let body = format!(r#"{{"id": "o-{sent}"}}"#);
                    let ack = js.publish(format!("orders.o{sent}"), body.into()).await;
                    ack.expect("published").await.expect("stored");
                }
                sent += 1;
            }
            sent
        })
    };
    let sent = producer.await.expect("the producer");
    // Order id → the runs started for it, by execution id.
    let mut orders: BTreeMap<String, BTreeMap<String, RunRecord>> = BTreeMap::new();
    let watching = async {
        while let Some(Ok(entry)) = watch.next().await {
            let Ok(record) = serde_json::from_slice::<RunRecord>(&entry.value) else {
                continue;
            };
            let Some(id) = record.state.input["order"].as_str() else {
                continue;
            };
            let execution = entry.key.trim_start_matches("Orders.").to_string();
            orders
                .entry(id.to_string())
                .or_default()
                .insert(execution, record);
            let ended = orders
                .values()
                .flat_map(|runs| runs.values())
                .filter(|r| r.state.status.is_terminal())
                .count();
            if ended >= sent {
                break;
            }
        }
    };
    let watched = tokio::time::timeout(Duration::from_secs(240), watching).await;
    let _ = stop_tx.send(true);
    let _ = killer.await;
    fleet.kill_all();
    let report = || {
        format!(
            "kills {}; {} orders seen\nlogs:\n{}",
            fleet.kill_count(),
            orders.len(),
            logs.tail()
        )
    };
    assert!(watched.is_ok(), "not every order ran: {}", report());
    assert_eq!(orders.len(), sent, "{}", report());
    for (id, runs) in &orders {
        assert_eq!(
            runs.len(),
            1,
            "order {id} started {} runs: {}",
            runs.len(),
            report()
        );
        for (execution, record) in runs {
            assert_eq!(
                record.state.status.as_str(),
                "success",
                "order {id}: {:?}",
                record.state
            );
            let derived = names::caller_execution_id("Orders", Some("trigger:each"), id);
            assert_eq!(execution, &derived.0);
        }
    }
    let dead = workflow_node::ops::triggers::list(&client, "mesh", None)
        .await
        .unwrap();
    assert!(dead.is_empty(), "parked: {dead:?}");
    eprintln!(
        "{sent} orders, one run each, through {} kills",
        fleet.kill_count()
    );
}
