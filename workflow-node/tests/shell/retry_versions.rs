//! A retry runs with the definition version of the run it retries, over a
//! real nats-server: a run fails under version 1, its replica is replaced by one serving
//! version 2, and the retry still runs version 1, from the failed node, for the caller that
//! asked for it (named by the task id its caller started the first run with).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::workflow::{invoke_as, new_task_id, retry};
use agent_sdk::{handler_fn, AgentBuilder, AgentError, NodeRequest, Timing};
use serde_json::json;
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

const V1: &str = r#"
name: Flow
workflow:
  description: version 1, a then b
  version: "1"
  nodes:
    - {id: a, type: agent, agent_name: Counted, input: {}}
    - {id: b, type: agent, agent_name: FailsOnce, depends_on: [a], input: {}}
  output_mapping: {version: "one", a: "{{a.output.n}}"}
"#;

const V2: &str = r#"
name: Flow
workflow:
  description: version 2, b renamed c
  version: "2"
  nodes:
    - {id: a, type: agent, agent_name: Counted, input: {}}
    - {id: c, type: agent, agent_name: FailsOnce, depends_on: [a], input: {}}
  output_mapping: {version: "two", a: "{{a.output.n}}"}
"#;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn node(server: &test_harness::NatsServer, yaml: &str) -> WorkflowNode {
    let client = async_nats::connect(server.url()).await.expect("connect");
    let wf = parse_str(yaml, "flow.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    WorkflowNode::start(client, vec![wf], Config::default())
        .await
        .expect("node")
}

#[tokio::test]
async fn a_retry_runs_the_version_its_run_started_with_after_an_upgrade() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let counted = Arc::new(AtomicU32::new(0));
    let n = counted.clone();
    let count = AgentBuilder::new("Counted").handler(handler_fn(move |_req: NodeRequest| {
        let n = n.clone();
        async move { Ok(json!({"n": n.fetch_add(1, Ordering::SeqCst) + 1})) }
    }));
    let failed = Arc::new(AtomicU32::new(0));
    let fails_once =
        AgentBuilder::new("FailsOnce").handler(handler_fn(move |_req: NodeRequest| {
            let failed = failed.clone();
            async move {
                if failed.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(AgentError::new("not yet"))
                } else {
                    Ok(json!({}))
                }
            }
        }));
    let _agents = [
        count.serve(client.clone()).await.unwrap(),
        fails_once.serve(client.clone()).await.unwrap(),
    ];

    let v1 = node(&server, V1).await;
    let first_task = new_task_id();
    let first = invoke_as(
        &client,
        "mesh",
        "Flow",
        &json!({}),
        TIMEOUT,
        &first_task,
        |_| {},
    )
    .await
    .expect("a final reply");
    assert_eq!(first.status, "failure", "{first:?}");
    v1.shutdown().await;
    let _v2 = node(&server, V2).await;

    // The first run's caller retries it, naming it by its task id (unsigned, as it started).
    let task_id = new_task_id();
    let timing = Timing {
        timeout: TIMEOUT,
        resend_interval: Duration::from_secs(3),
    };
    let result = retry(
        &client,
        "mesh",
        "Flow",
        &first_task,
        timing,
        &task_id,
        |_| {},
    )
    .await
    .expect("a final reply");
    assert_eq!(result.status, "success", "{result:?}");
    let output = result.output.expect("an output");
    // Version 1's output, with a's first (kept) output: a ran once in all.
    assert_eq!(output, json!({"version": "one", "a": 1}));
    assert_eq!(counted.load(Ordering::SeqCst), 1);
}
