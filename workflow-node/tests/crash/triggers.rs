//! Crash test of event triggers with real processes: two `workflow-node serve` replicas
//! of a workflow with a trigger, a killer that `kill -9`s a random replica every
//! 300–700 ms (while messages are in hand among others) and starts a new one, and a
//! producer publishing orders, each twice. Every order must start exactly one run, which
//! succeeds: none lost (the durable consumer gives a message in hand to another replica),
//! none started twice (the de-duplication key names the run), none parked.

use std::collections::BTreeMap;
use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use workflow_node::shell::run::names;

use crate::support::crash::rig::{
    assert_none_parked, ended, one_success_each, watch_runs, Killer, Rig, RunsBy,
};
use crate::support::crash::STUBS;

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
    let rig = Rig::start(STUBS, "orders.yaml", ORDERS).await;
    let fleet = rig.fleet(2).await;
    let killer = Killer::start(&fleet);
    let js = async_nats::jetstream::new(rig.client.clone());
    let mut watch = pin!(watch_runs(&rig.client, "Orders").await);
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
    let mut orders: RunsBy<String> = BTreeMap::new();
    let watching = async {
        while let Some((execution, record)) = watch.next().await {
            let Some(id) = record.state.input["order"].as_str() else {
                continue;
            };
            orders
                .entry(id.to_string())
                .or_default()
                .insert(execution, record);
            if ended(&orders) >= sent {
                break;
            }
        }
    };
    let watched = tokio::time::timeout(Duration::from_secs(240), watching).await;
    killer.stop().await;
    fleet.kill_all();
    let report = || {
        format!(
            "kills {}; {} orders seen\nlogs:\n{}",
            fleet.kill_count(),
            orders.len(),
            rig.logs.tail()
        )
    };
    assert!(watched.is_ok(), "not every order ran: {}", report());
    assert_eq!(orders.len(), sent, "{}", report());
    for (id, execution, _) in one_success_each(&orders, "order", report) {
        let derived = names::caller_execution_id("Orders", Some("trigger:each"), id);
        assert_eq!(execution, &derived.0);
    }
    assert_none_parked(&rig.client).await;
    eprintln!(
        "{sent} orders, one run each, through {} kills",
        fleet.kill_count()
    );
}
