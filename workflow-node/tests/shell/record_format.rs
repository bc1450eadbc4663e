//! How run entries are stored: LZ4-compressed JSON by default, plain JSON with
//! `Config::record_format` set to `Json` (`serve --record-format json`, for a rolling
//! upgrade from a build that reads only JSON). Over a real nats-server, a run started by a
//! replica of one form and waiting on a signal is ended by a replica of the other: each
//! reads what the other wrote, and the entry's bytes are in the form of its last writer.

use std::time::Duration;

use agent_sdk::workflow::{invoke_as, new_task_id, StartAs};
use agent_sdk::{signal, Signal, SignalTo};
use serde_json::json;
use workflow_node::core::{ExecutionId, NodeStatus};
use workflow_node::shell::run::entry::RecordFormat;
use workflow_node::shell::{run::names, Config, Inspector, WorkflowNode};

use crate::support;

const TIMEOUT: Duration = Duration::from_secs(30);

/// An echo, a wait for the test's signal, an echo of both.
const HOLD: &str = r#"
name: Hold
workflow:
  description: an echo, a wait, an echo
  nodes:
    - {id: first, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
    - {id: held, type: wait, signal: go, depends_on: [first], timeout: 1h}
    - {id: last, type: agent, agent_name: Echo, depends_on: [held], input: {n: "{{first.output.n}}", go: "{{held.output.data.go}}"}}
  output_mapping: {n: "{{last.output.n}}", go: "{{last.output.go}}"}
"#;

/// Which form `stored` is in: a compressed entry starts with its magic bytes, JSON with
/// `{`.
fn form_of(stored: &[u8]) -> RecordFormat {
    match stored {
        [0x93, b'L', b'Z', b'4', ..] => RecordFormat::Lz4,
        [b'{', ..] => RecordFormat::Json,
        other => panic!(
            "a run entry in neither form: {:?}",
            &other[..other.len().min(8)]
        ),
    }
}

async fn run_handed_over(from: RecordFormat, to: RecordFormat) {
    let config = |format| Config {
        record_format: format,
        ..Config::default()
    };
    let mut m = support::mesh::mesh(support::fixtures::ECHO_STUBS, &[HOLD], config(from)).await;
    let runs = async_nats::jetstream::new(m.client.clone())
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("runs bucket");
    let task = new_task_id();
    let execution = names::execution_id("Hold", &task);
    let client = m.client.clone();
    let started = task.clone();
    let run = tokio::spawn(async move {
        let input = json!({"n": 7});
        let start = StartAs::from(started.as_str());
        invoke_as(&client, "mesh", "Hold", &input, TIMEOUT, start, |_| {})
            .await
            .expect("a final reply")
    });
    waiting(&m.client, &execution).await;
    let key = names::run_key("Hold", &execution);
    let stored = runs.get(&key).await.expect("read").expect("an entry");
    assert_eq!(form_of(&stored), from, "written by the first replica");

    // The first replica is replaced by one writing the other form; the run goes on there.
    let other = WorkflowNode::start(
        m.client.clone(),
        support::mesh::workflows(&[HOLD]),
        config(to),
    )
    .await
    .expect("the second replica");
    m.replace_node(other).shutdown().await;
    let to_run = SignalTo::Run {
        id: &task,
        caller: None,
    };
    let go = Signal {
        name: "go",
        data: json!({"go": "on"}),
        id: None,
    };
    signal(&m.client, "mesh", "Hold", to_run, go, None)
        .await
        .expect("the signal taken");
    let result = run.await.expect("the run");
    assert_eq!(result.status, "success", "{:?}", result.error);
    assert_eq!(result.output, Some(json!({"n": 7, "go": "on"})));
    let stored = runs.get(&key).await.expect("read").expect("an entry");
    assert_eq!(form_of(&stored), to, "written last by the second replica");
}

/// Waits (bounded) until run `execution` waits on its signal, read as operators read it.
async fn waiting(client: &async_nats::Client, execution: &ExecutionId) {
    let inspector = Inspector::open(client.clone(), "mesh").await.unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(run) = inspector.read_run("Hold", execution).await.unwrap() {
            if run.record.state.node_status("held") == NodeStatus::Waiting {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {execution} never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_run_written_as_json_is_carried_on_and_ended_by_a_compressing_replica() {
    run_handed_over(RecordFormat::Json, RecordFormat::Lz4).await;
}

#[tokio::test]
async fn a_run_written_compressed_is_carried_on_and_ended_by_a_json_replica() {
    run_handed_over(RecordFormat::Lz4, RecordFormat::Json).await;
}
