//! What a node costs on the wire, over a real nats-server: a run's history is
//! held in its record and published in batches (a long chain writes the history stream a
//! few times, not once per event, and a reader sees every entry, in order and once, whether
//! it is still held in the record or already published), and an event's progress reaches
//! a caller as one status update.

use std::time::Duration;

use agent_sdk::workflow::invoke;
use futures::StreamExt;
use messages::a2a::{Message, Role};
use messages::jsonrpc::Request;
use messages::{headers, subjects};
use serde_json::{json, Value};
use workflow_node::core::{ExecutionId, NodeStatus};
use workflow_node::shell::run::history::HELD_MAX;
use workflow_node::shell::Inspector;
use workflow_node::shell::{run::names, Config, RunRecord};

use crate::support;

const TIMEOUT: Duration = Duration::from_secs(30);

const STUBS: &str = support::fixtures::ECHO_STUBS;

/// A chain of `n` Echo nodes, then (with `gate`) an approval that waits an hour.
fn chain(name: &str, n: usize, gate: bool) -> String {
    let mut nodes = support::fixtures::chain_nodes(n, "");
    if gate {
        nodes.push_str(&format!(
            "    - {{id: gate, type: approval, timeout: 1h, depends_on: [n{}]}}\n",
            n - 1
        ));
    }
    format!("name: {name}\nworkflow:\n  description: a chain\n  nodes:\n{nodes}  output_mapping: {{}}\n")
}

/// How many messages the history stream holds for `workflow`'s runs.
async fn history_messages(client: &async_nats::Client, workflow: &str) -> u64 {
    let js = async_nats::jetstream::new(client.clone());
    let stream = js
        .get_stream(names::history_stream("mesh"))
        .await
        .expect("the history stream");
    let info = stream
        .info_with_subjects(format!("mesh.wf.{workflow}.history.>"))
        .await
        .expect("stream info");
    let mut n = 0;
    let mut subjects = info;
    while let Some(Ok((_, count))) = subjects.next().await {
        n += count as u64;
    }
    n
}

/// Asserts that `entries` are numbered 1, 2, ... `last`, each once.
fn contiguous(entries: &[workflow_node::shell::run::history::HistoryEntry], last: u64) {
    let ns: Vec<u64> = entries.iter().map(|e| e.n).collect();
    assert_eq!(ns, (1..=last).collect::<Vec<_>>(), "{entries:#?}");
}

#[tokio::test]
async fn a_long_chain_publishes_its_history_in_a_few_messages_and_loses_no_entry() {
    let yaml = chain("Long", 40, false);
    let m = support::mesh::mesh(STUBS, &[&yaml], support::mesh::trusting(Config::default())).await;
    let r = invoke(&m.client, "mesh", "Long", &json!({}), TIMEOUT, |_| {})
        .await
        .expect("a result");
    assert_eq!(r.status, "success", "{:?}", r.error);
    support::mesh::settled(&m.client, "Long").await;
    let inspector = Inspector::open(m.client.clone(), "mesh").await.unwrap();
    let id = r.execution_id.clone().expect("an execution id");
    let run = inspector
        .find(&id, Some("Long"), None)
        .await
        .unwrap()
        .expect("the run");
    let entries = inspector.history("Long", &run.execution).await.unwrap();
    // The start, 40 answers, nothing held back.
    let last = run.record.applied;
    assert!(last >= 41, "{last} events applied");
    contiguous(&entries, last);
    assert_eq!(entries[0].event, "started");
    assert_eq!(entries.last().unwrap().status.as_str(), "success");
    assert!(
        run.record.history_held.is_empty(),
        "an ended run holds no entry"
    );
    // One message per HELD_MAX entries, and one at the end: it was one per entry.
    let messages = history_messages(&m.client, "Long").await;
    let most = last.div_ceil(HELD_MAX as u64) + 1;
    assert!(
        messages <= most,
        "{messages} history messages for {last} entries (at most {most})"
    );
}

#[tokio::test]
async fn entries_still_held_in_the_record_are_read_with_the_published_ones() {
    let yaml = chain("Held", 20, true);
    let m = support::mesh::mesh(STUBS, &[&yaml], support::mesh::trusting(Config::default())).await;
    let js = async_nats::jetstream::new(m.client.clone());
    let runs = js.get_key_value(names::runs_bucket("mesh")).await.unwrap();
    let mut changes = runs.watch("Held.*").await.unwrap();
    let client = m.client.clone();
    let call = tokio::spawn(async move {
        invoke(
            &client,
            "mesh",
            "Held",
            &json!({}),
            Duration::from_secs(3600),
            |_| {},
        )
        .await
    });
    // Until the run waits at its gate, past its 20 answers.
    let (key, record) = loop {
        let entry = tokio::time::timeout(TIMEOUT, changes.next())
            .await
            .expect("the run waits at its gate in time")
            .expect("a watch")
            .expect("an entry");
        let Ok(record) = RunRecord::from_entry(&entry.value) else {
            continue;
        };
        if record.state.node_status("gate") == NodeStatus::Waiting {
            break (entry.key, record);
        }
    };
    support::mesh::settled(&m.client, "Held").await;
    let execution = ExecutionId(key.split('.').nth(1).unwrap().to_string());
    let inspector = Inspector::open(m.client.clone(), "mesh").await.unwrap();
    let entries = inspector.history("Held", &execution).await.unwrap();
    let last = record.applied;
    assert!(last >= 21, "{last} events applied");
    contiguous(&entries, last);
    // Some of them are only in the record: published at HELD_MAX, not yet at the end.
    let held = inspector
        .read_run("Held", &execution)
        .await
        .unwrap()
        .expect("the run")
        .record
        .history_held;
    assert!(
        !held.is_empty() && held.len() < HELD_MAX,
        "{} held",
        held.len()
    );
    assert!(history_messages(&m.client, "Held").await >= 1);
    call.abort();
}

#[tokio::test]
async fn an_events_progress_reaches_the_caller_as_one_status_update() {
    const NODES: usize = 10;
    let yaml = chain("Progress", NODES, false);
    let m = support::mesh::mesh(STUBS, &[&yaml], support::mesh::trusting(Config::default())).await;
    let (reply_to, status_to) = (m.client.new_inbox(), m.client.new_inbox());
    let mut replies = m.client.subscribe(reply_to.clone()).await.unwrap();
    let mut status = m.client.subscribe(status_to.clone()).await.unwrap();
    m.client.flush().await.unwrap();
    let task = "progress-1";
    let message = Message::new(task, Role::User, vec![messages::payload::wrap(json!({}))]);
    let body = serde_json::to_vec(&Request::message_send(task, message)).unwrap();
    let mut h = async_nats::HeaderMap::new();
    h.insert(headers::STATUS_TO, status_to.as_str());
    m.client
        .publish_with_reply_and_headers(
            subjects::agent_request("mesh", "Progress"),
            reply_to,
            h,
            body.into(),
        )
        .await
        .unwrap();
    tokio::time::timeout(TIMEOUT, replies.next())
        .await
        .expect("a final reply in time")
        .expect("a reply");
    support::mesh::settled(&m.client, "Progress").await;
    // Every status update sent before the final reply is in the subscription by now.
    m.client.flush().await.unwrap();
    let (mut updates, mut node_parts) = (0, Vec::new());
    while let Some(Some(msg)) = futures::FutureExt::now_or_never(status.next()) {
        let v: Value = serde_json::from_slice(&msg.payload).unwrap();
        let parts = v["result"]["status"]["message"]["parts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        updates += 1;
        let types: Vec<String> = parts
            .iter()
            .filter_map(|p| p["data"]["type"].as_str().map(String::from))
            .collect();
        node_parts.push(types);
    }
    let nodes: usize = node_parts
        .iter()
        .flatten()
        .filter(|t| {
            t.as_str() == "workflow_node_execution_start"
                || t.as_str() == "workflow_node_execution_result"
        })
        .count();
    // Each node starts and ends: 2 parts a node, every one delivered.
    assert_eq!(nodes, 2 * NODES, "{node_parts:?}");
    // A node's end and the next one's start came with one event: one update for both.
    let together = node_parts.iter().filter(|t| t.len() >= 2).count();
    assert!(together >= NODES - 1, "{node_parts:?}");
    assert!(
        updates <= NODES + 4,
        "{updates} status updates: {node_parts:?}"
    );
}
