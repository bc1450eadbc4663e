//! Crash test of signals with real processes: two `workflow-node serve` replicas, a
//! killer that `kill -9`s a random replica every 300–700 ms and starts a new one, runs
//! started by an event trigger that each wait for a payment, and each payment (published
//! twice, as a producer that retries would) routed by a second trigger to the run waiting
//! under its order. Every run must end once, successfully, with its payment's amount in
//! its output: no signal lost (the trigger's durable consumer gives a message in hand to
//! another replica; the signal is an event in the run's stream), none applied twice (its
//! id is the payment's), none parked.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use workflow_node::core::NodeStatus;

use crate::support::crash::rig::{
    assert_none_parked, ended, one_success_each, watch_runs, Killer, Rig, RunsBy,
};
use crate::support::crash::STUBS;

const PAY: &str = r#"
name: Pay
workflow:
  description: a run per order, each waiting for its payment
  triggers:
    - {name: order, subject: "orders.>", input: {order: "{{event.payload.id}}"}, dedup_key: "{{event.payload.id}}"}
    - {name: payment, subject: "payments.>", signal: paid, key: "{{event.payload.order}}", input: {amount: "{{event.payload.amount}}"}, dedup_key: "{{event.payload.id}}", max_deliveries: 50}
  nodes:
    - {id: pay, type: wait, signal: paid, correlation: "{{workflow.input.order}}", timeout: 10m}
    - {id: echo, type: agent, agent_name: Echo, depends_on: [pay], input: {order: "{{workflow.input.order}}", amount: "{{pay.output.data.amount}}"}}
  output_mapping: {order: "{{echo.output.order}}", amount: "{{echo.output.amount}}", signal: "{{pay.output.signal_id}}"}
"#;

/// Orders started, each paid once (published twice).
const ORDERS_SENT: usize = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_takes_its_signal_once_while_replicas_are_killed() {
    let rig = Rig::start(STUBS, "pay.yaml", PAY).await;
    let fleet = rig.fleet(2).await;
    let killer = Killer::start(&fleet);
    let js = async_nats::jetstream::new(rig.client.clone());
    let mut watch = pin!(watch_runs(&rig.client, "Pay").await);
    for i in 0..ORDERS_SENT {
        let body = format!(r#"{{"id": "o-{i}"}}"#);
        let ack = js.publish(format!("orders.o{i}"), body.into()).await;
        ack.expect("published").await.expect("stored");
    }
    // Order id → its runs by execution id; the orders paid.
    let mut orders: RunsBy<String> = BTreeMap::new();
    let mut paid: BTreeSet<String> = BTreeSet::new();
    let watching = async {
        while let Some((execution, record)) = watch.next().await {
            let Some(id) = record.state.input["order"].as_str().map(str::to_owned) else {
                continue;
            };
            // Paid once it waits, the payment published twice with one id.
            if record.state.node_status("pay") == NodeStatus::Waiting && paid.insert(id.clone()) {
                let n: usize = id.trim_start_matches("o-").parse().unwrap();
                let body = format!(r#"{{"id": "p-{n}", "order": "{id}", "amount": {n}}}"#);
                for _ in 0..2 {
                    let ack = js
                        .publish(format!("payments.p{n}"), body.clone().into())
                        .await;
                    ack.expect("published").await.expect("stored");
                }
            }
            orders.entry(id).or_default().insert(execution, record);
            if ended(&orders) >= ORDERS_SENT {
                break;
            }
        }
    };
    let watched = tokio::time::timeout(Duration::from_secs(300), watching).await;
    killer.stop().await;
    fleet.kill_all();
    let report = || {
        format!(
            "kills {}; {} orders seen, {} paid\nlogs:\n{}",
            fleet.kill_count(),
            orders.len(),
            paid.len(),
            rig.logs.tail()
        )
    };
    assert!(watched.is_ok(), "not every run ended: {}", report());
    assert_eq!(orders.len(), ORDERS_SENT, "{}", report());
    for (id, _, record) in one_success_each(&orders, "order", report) {
        let n: u64 = id.trim_start_matches("o-").parse().unwrap();
        let state = &record.state;
        let output = state.output.clone().unwrap_or_default();
        assert_eq!(output["amount"], n, "order {id}: {output}");
        assert_eq!(output["signal"], format!("p-{n}"), "order {id}: {output}");
        assert!(state.signals.kept.is_empty(), "order {id}: {state:?}");
    }
    assert_none_parked(&rig.client).await;
    eprintln!(
        "{ORDERS_SENT} runs, each paid once, through {} kills",
        fleet.kill_count()
    );
}
