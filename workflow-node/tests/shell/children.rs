//! A workflow calling another workflow (a `workflow` node) over a real nats-server: when
//! the parent stops the call (the parent is cancelled, the call times out, the parent's
//! deadline passes), the child run is cancelled too, and calls no more agents.

use std::time::Duration;

use agent_sdk::workflow::{invoke, RunResult};
use futures::StreamExt;
use messages::jsonrpc::Request;
use messages::subjects;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use workflow_node::core::{ExecutionId, RunStatus};
use workflow_node::shell::run::record::RunRecord;
use workflow_node::shell::{run::names, Config};

use crate::support;
use crate::support::mesh::Mesh;

const TIMEOUT: Duration = Duration::from_secs(30);

/// `Slow` answers long after every test has ended, unless it is cancelled; `After` is the
/// child's step that must never be called once the child is cancelled.
const STUBS: &str = r#"
agents:
  - name: Slow
    delay: 60s
    rules: [{output: {late: true}}]
  - name: After
    rules: [{output: "{{input}}"}]
"#;

const CHILD: &str = r#"
name: Child
workflow:
  description: a slow step, then another
  nodes:
    - {id: slow, type: agent, agent_name: Slow, input: {}}
    - {id: after, type: agent, agent_name: After, depends_on: [slow]}
  output_mapping: {after: "{{after.output}}"}
"#;

const PARENT: &str = r#"
name: Parent
workflow:
  description: calls Child and waits for it
  nodes:
    - {id: sub, type: workflow, workflow_name: Child, input: {}}
  output_mapping: {sub: "{{sub.output}}"}
"#;

const IMPATIENT: &str = r#"
name: Impatient
workflow:
  description: calls Child, but gives it one second
  nodes:
    - {id: sub, type: workflow, workflow_name: Child, input: {}, timeout: 1s}
  output_mapping: {sub: "{{sub.output}}"}
"#;

const LATE: &str = r#"
name: Late
max_workflow_execution_time_seconds: 1
workflow:
  description: calls Child, but may run for one second only
  nodes:
    - {id: sub, type: workflow, workflow_name: Child, input: {}}
  output_mapping: {sub: "{{sub.output}}"}
"#;

async fn mesh() -> Mesh {
    let config = support::mesh::trusting(Config {
        card_wait: Duration::from_millis(500),
        ..Config::default()
    });
    support::mesh::mesh(STUBS, &[CHILD, PARENT, IMPATIENT, LATE], config).await
}

/// What the test sees of the agents the child calls.
struct Watch {
    slow_calls: async_nats::Subscriber,
    slow_cancels: async_nats::Subscriber,
    after_calls: async_nats::Subscriber,
}

impl Mesh {
    async fn watch(&self) -> Watch {
        let sub = |subject: String| {
            let client = self.client.clone();
            async move { client.subscribe(subject).await.expect("subscribe") }
        };
        let watch = Watch {
            slow_calls: sub(subjects::agent_request("mesh", "Slow")).await,
            slow_cancels: sub(subjects::agent_cancel("mesh", "Slow")).await,
            after_calls: sub(subjects::agent_request("mesh", "After")).await,
        };
        self.client.flush().await.expect("flush");
        watch
    }

    /// Starts `workflow`; returns its execution id, once known, and its result.
    fn start(
        &self,
        workflow: &'static str,
    ) -> (
        mpsc::UnboundedReceiver<String>,
        tokio::task::JoinHandle<RunResult>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let client = self.client.clone();
        let run = tokio::spawn(async move {
            invoke(&client, "mesh", workflow, &json!({}), TIMEOUT, |p| {
                if let messages::workflow::WorkflowDataPart::ExecutionStart(s) = p {
                    let _ = tx.send(s.execution_id.clone());
                }
            })
            .await
            .expect("a result")
        });
        (rx, run)
    }

    /// The record of the child run, once it has ended.
    async fn ended_child(&self, execution: &ExecutionId) -> RunRecord {
        let js = async_nats::jetstream::new(self.client.clone());
        let runs = js
            .get_key_value(names::runs_bucket("mesh"))
            .await
            .expect("runs bucket");
        let key = names::run_key("Child", execution);
        let mut entries = runs.watch_with_history(&key).await.expect("watch");
        let wait = async {
            while let Some(entry) = entries.next().await {
                let entry = entry.expect("entry");
                if let Ok(record) = RunRecord::from_entry(&entry.value) {
                    if record.state.status.is_terminal() {
                        return record;
                    }
                }
            }
            panic!("the watch of {key} ended");
        };
        tokio::time::timeout(TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| panic!("the child run {execution} did not end"))
    }
}

impl Watch {
    /// Waits for the child's call to `Slow`; returns the child's execution id.
    async fn child_calling_slow(&mut self) -> ExecutionId {
        let msg = tokio::time::timeout(TIMEOUT, self.slow_calls.next())
            .await
            .expect("the child calls Slow")
            .expect("a request");
        let request: Value = serde_json::from_slice(&msg.payload).expect("JSON");
        let meta = &request["params"]["metadata"];
        assert_eq!(meta["workflow_name"], "Child", "{request}");
        let id = meta["execution_id"].as_str().expect("an execution id");
        ExecutionId::parse(id).expect("a valid execution id")
    }

    /// The child, once ended, cancelled its call to `Slow` and never called `After`.
    async fn child_stopped_calling(&mut self, client: &async_nats::Client) {
        let cancel = tokio::time::timeout(TIMEOUT, self.slow_cancels.next())
            .await
            .expect("the child cancels its call to Slow");
        assert!(cancel.is_some());
        client.flush().await.expect("flush");
        let after = tokio::time::timeout(Duration::from_millis(300), self.after_calls.next()).await;
        assert!(after.is_err(), "the child called After: {after:?}");
    }
}

fn assert_cancelled(child: &RunRecord) {
    let state = &child.state;
    assert_eq!(state.status, RunStatus::Cancelled, "{:?}", state.error);
    assert_eq!(state.node_status("slow").as_str(), "cancelled");
    assert_eq!(state.node_status("after").as_str(), "skipped");
}

#[tokio::test]
async fn cancelling_the_parent_cancels_its_child_run() {
    let m = mesh().await;
    let mut watch = m.watch().await;
    let (mut execution, run) = m.start("Parent");
    let child = watch.child_calling_slow().await;
    let parent = execution.recv().await.expect("the parent's execution id");
    // By its execution id: an operator's cancel.
    let cancel = Request::tasks_cancel("cancel-parent", parent.as_str());
    let operator = support::mesh::operator();
    let answer = support::mesh::ask_signed(&m.client, "Parent", &cancel, operator).await;
    assert!(answer.get("result").is_some(), "{answer}");

    let r = run.await.expect("the run");
    assert_eq!(r.status, "cancelled", "{:?}", r.error);
    assert_eq!(r.nodes.get("sub").map(String::as_str), Some("cancelled"));
    assert_cancelled(&m.ended_child(&child).await);
    watch.child_stopped_calling(&m.client).await;
}

#[tokio::test]
async fn a_parent_whose_call_times_out_cancels_its_child_run() {
    let m = mesh().await;
    let mut watch = m.watch().await;
    let (_, run) = m.start("Impatient");
    let child = watch.child_calling_slow().await;

    let r = run.await.expect("the run");
    // The node hit its timeout; the run (whose deadline did not pass) failed because of it.
    assert_eq!(r.status, "failure");
    assert_eq!(r.nodes.get("sub").map(String::as_str), Some("timed_out"));
    let error = r.error.unwrap_or_default();
    assert!(error.contains("timed out after 1 s"), "{error}");
    assert_cancelled(&m.ended_child(&child).await);
    watch.child_stopped_calling(&m.client).await;
}

#[tokio::test]
async fn a_parent_past_its_deadline_cancels_its_child_run() {
    let m = mesh().await;
    let mut watch = m.watch().await;
    let (_, run) = m.start("Late");
    let child = watch.child_calling_slow().await;

    let r = run.await.expect("the run");
    assert_eq!(r.status, "timed_out", "{:?}", r.error);
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("max_workflow_execution_time_seconds"),
        "{error}"
    );
    assert_cancelled(&m.ended_child(&child).await);
    watch.child_stopped_calling(&m.client).await;
}
