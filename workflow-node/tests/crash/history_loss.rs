//! A run's history batch lost to a late ack, reproduced at the exact point. The commit
//! that takes a run's sixteen held history entries out of its record keeps them in its
//! outbox entry, to publish after the commit. If that publish fails (here: the history
//! stream's subjects moved away, so the stream refuses it as a server in trouble would),
//! the event comes back to publish them again. But an event can go without that: acks are
//! matched by stream sequence only, so a frozen replica's late ack of its own, earlier
//! delivery of the event (here: the test acks that first delivery, captured on the
//! replica's inbox) removes it from the work queue. The run's next commit then drops the
//! entry as settled, and the entries were in neither the record nor the stream: the
//! soak's "history has [17]".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sdk::workflow::invoke_as;
use async_nats::jetstream;
use futures::StreamExt;
use messages::workflow::{Decision, WorkflowApprovalDecision};
use serde_json::json;
use workflow_node::core::NodeStatus;
use workflow_node::shell::{run::names, Inspector, RunRecord};

use crate::support;
use crate::support::crash::load::approve;
use crate::support::crash::replicas::{write_file, Logs, Spawner};
use crate::support::fixtures::echo;

const NAME: &str = "Held";

/// Eighteen calls in a loop (the sixteenth event's commit publishes the first batch of
/// history), then an approval that waits for the test.
const WORKFLOW: &str = r#"
name: Held
workflow:
  description: a loop of calls, then an approval
  nodes:
    - {id: l, type: loop, node: step, condition: "{{_loop_iteration}} < 17", max_iterations: 30}
    - {id: step, type: agent, agent_name: Echo, input: {i: "{{_loop_iteration}}"}}
    - {id: gate, type: approval, depends_on: [l], approvers: [alice], message: "go?", timeout: 1h}
  output_mapping: {by: "{{gate.output.by}}"}
"#;

/// Every delivery of an event seen on a replica's inbox, by stream sequence, first first.
type Deliveries = Arc<Mutex<BTreeMap<u64, Vec<jetstream::Message>>>>;

/// Records the deliveries of `stream`'s events to any replica (their reply subject is the
/// ack subject of that delivery).
async fn spy_deliveries(client: &async_nats::Client, stream: &str) -> Deliveries {
    let seen: Deliveries = Arc::default();
    let mut sub = client.subscribe("_INBOX.>").await.expect("subscribe");
    let (s, js, prefix) = (
        seen.clone(),
        jetstream::new(client.clone()),
        format!("$JS.ACK.{stream}."),
    );
    tokio::spawn(async move {
        while let Some(message) = sub.next().await {
            if !message
                .reply
                .as_ref()
                .is_some_and(|r| r.as_str().starts_with(&prefix))
            {
                continue;
            }
            let msg = jetstream::Message {
                message,
                context: js.clone(),
            };
            let Ok(seq) = msg.info().map(|i| i.stream_sequence) else {
                continue;
            };
            let mut seen = s.lock().unwrap_or_else(|e| e.into_inner());
            seen.entry(seq).or_default().push(msg);
        }
    });
    seen
}

/// Moves the history stream's subjects away (`away`) or back.
async fn history_subjects(js: &jetstream::Context, away: bool) {
    let name = names::history_stream("mesh");
    let mut config = js
        .get_stream(&name)
        .await
        .expect("history stream")
        .info()
        .await
        .expect("info")
        .config
        .clone();
    config.subjects = vec![match away {
        true => "parked.history.>".to_string(),
        false => messages::subjects::run_history_all("mesh"),
    }];
    js.update_stream(config).await.expect("update the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_batch_whose_event_a_late_ack_removed_is_still_published() {
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client.clone());
    let stubs = write_file(dir.path(), "stubs.yaml", concat!("agents:", echo!()));
    let stub_file = agent_sdk::stub::load_stub_file(stubs).expect("stub file");
    let _stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", stub_file)
        .await
        .expect("stubs");
    let deliveries = spy_deliveries(&client, &names::event_stream("mesh", NAME)).await;
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "held.yaml", WORKFLOW),
        ack_wait: 5.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let mut replica = spawner.spawn(1, &server.url());
    replica.wait_ready(Duration::from_secs(30)).await;
    history_subjects(&js, true).await;

    let task = "history-loss-1";
    let execution = names::execution_id(NAME, task);
    let caller = {
        let client = client.clone();
        tokio::spawn(async move {
            invoke_as(
                &client,
                "mesh",
                NAME,
                &json!({}),
                Duration::from_secs(60),
                task,
                |_| {},
            )
            .await
        })
    };

    // The run waits for its approval, the entry holding the first batch still in its
    // record: the event that committed it keeps coming back, its publish refused.
    let kv = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("runs bucket");
    let key = names::run_key(NAME, &execution);
    let mut watch = kv.watch(&key).await.expect("watch");
    let held_by = loop {
        let entry = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .unwrap_or_else(|_| panic!("the run never waited\n{}", logs.tail()))
            .expect("watch ended")
            .expect("watch entry");
        let Ok(record) = RunRecord::from_entry(&entry.value) else {
            continue;
        };
        let batch = record.outbox.iter().find(|e| e.more_history.len() >= 16);
        if let (Some(e), NodeStatus::Waiting) = (batch, record.state.node_status("gate")) {
            break e.seq;
        }
    };
    drop(watch);

    // The late ack: the first delivery of that event, acked as its frozen holder would.
    let first = deliveries
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&held_by)
        .and_then(|d| d.first().cloned())
        .expect("the event's first delivery was seen");
    first.double_ack().await.expect("the late ack is taken");
    history_subjects(&js, false).await;

    let decision = WorkflowApprovalDecision {
        execution_id: execution.0.clone(),
        node_id: "gate".into(),
        decision: Decision::Approve,
        by: Some("alice".into()),
        comment: None,
    };
    assert!(approve(&client, "mesh", NAME, &decision).await);
    let result = caller.await.expect("caller task").expect("a final reply");
    assert_eq!(result.status, "success", "{result:?}");

    let record = RunRecord::from_entry(&kv.get(&key).await.expect("read").expect("a record"))
        .expect("a record");
    let inspector = Inspector::open(client.clone(), "mesh")
        .await
        .expect("inspector");
    let history = inspector.history(NAME, &execution).await.expect("history");
    let ns: Vec<u64> = history.iter().map(|e| e.n).collect();
    assert_eq!(
        ns,
        (1..=record.applied).collect::<Vec<_>>(),
        "every applied event once in the history\n{}",
        logs.tail()
    );
}
