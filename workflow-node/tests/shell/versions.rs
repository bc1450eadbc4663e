//! Rolling upgrades over a real nats-server: a run keeps the definition it started with
//! when its replica is replaced by one serving another version of the workflow, a new run
//! uses the version of the replica that took its request, and a run whose definition
//! cannot be found fails with an error that says so.

use std::time::Duration;

use agent_sdk::workflow::{invoke, invoke_as, new_task_id, RunResult, StartAs};
use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use workflow_node::definition::parse_str;
use workflow_node::shell::store::versions::{self, StoredDefinition};
use workflow_node::shell::{run::names, Config, WorkflowNode};

const V1: &str = r#"
name: Flow
workflow:
  description: version 1, a then b
  version: "1"
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
    - {id: b, type: agent, agent_name: Gate, depends_on: [a], input: {n: "{{a.output.n}}"}}
  output_mapping: {version: "one", n: "{{b.output.n}}"}
"#;

const V2: &str = r#"
name: Flow
workflow:
  description: version 2, b renamed c, and d added
  version: "2"
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
    - {id: c, type: agent, agent_name: Gate, depends_on: [a], input: {n: "{{a.output.n}}"}}
    - {id: d, type: agent, agent_name: Echo, depends_on: [c], input: {n: "{{c.output.n}}"}}
  output_mapping: {version: "two", n: "{{d.output.n}}"}
"#;

/// Agents: `Echo`, and `Gate`, which tells the test of each call and answers once the
/// test opens it (`true` on the returned sender).
async fn agents(
    client: &async_nats::Client,
) -> (
    Vec<agent_sdk::AgentHandle>,
    mpsc::UnboundedReceiver<()>,
    watch::Sender<bool>,
) {
    let echo = AgentBuilder::new("Echo")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }))
        .serve(client.clone())
        .await
        .expect("echo");
    let (called, calls) = mpsc::unbounded_channel();
    let (open, gate_open) = watch::channel(false);
    let gate = AgentBuilder::new("Gate")
        .handler(handler_fn(move |req: NodeRequest| {
            let (called, mut open) = (called.clone(), gate_open.clone());
            async move {
                let _ = called.send(());
                let _ = open.wait_for(|open| *open).await;
                Ok(req.input)
            }
        }))
        .serve(client.clone())
        .await
        .expect("gate");
    (vec![echo, gate], calls, open)
}

async fn node(server: &test_harness::NatsServer, yaml: &str) -> WorkflowNode {
    let client = async_nats::connect(server.url()).await.expect("connect");
    let wf = parse_str(yaml, "flow.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    WorkflowNode::start(client, vec![wf], Config::default())
        .await
        .expect("node")
}

/// Starts a run under version 1, waits until it waits on `Gate` in node `b`, and replaces
/// the only replica by one serving version 2; `between` runs before the gate opens.
async fn upgrade_mid_run<F, Fut>(between: F) -> RunResult
where
    F: FnOnce(async_nats::Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let (_agents, mut calls, open) = agents(&client).await;
    let v1 = node(&server, V1).await;
    let caller = client.clone();
    let run = tokio::spawn(async move {
        invoke(
            &caller,
            "mesh",
            "Flow",
            &json!({"n": 7}),
            Duration::from_secs(60),
            |_| {},
        )
        .await
        .expect("a result")
    });
    calls.recv().await.expect("b calls Gate");
    v1.shutdown().await;
    let _v2 = node(&server, V2).await;
    between(client.clone()).await;
    open.send_replace(true);
    run.await.expect("the caller")
}

#[tokio::test]
async fn a_run_finishes_with_the_definition_it_started_with_after_an_upgrade() {
    let r = upgrade_mid_run(|_| async {}).await;
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"version": "one", "n": 7})));
}

#[tokio::test]
async fn a_run_whose_definition_is_gone_fails_and_says_so() {
    let r = upgrade_mid_run(|client| async move {
        // The stored version 1 is lost: the new replica cannot apply the run's events.
        let js = async_nats::jetstream::new(client);
        let defs = js
            .get_key_value(names::versions_bucket("mesh"))
            .await
            .expect("definitions bucket");
        let v1 = parse_str(V1, "flow.yaml").expect("v1");
        let key = format!("Flow.{}", v1.hash);
        assert!(
            defs.get(&key).await.expect("get").is_some(),
            "version 1 was stored"
        );
        defs.purge(&key).await.expect("purge");
    })
    .await;
    assert_eq!(r.status, "failure");
    let error = r.error.unwrap_or_default();
    assert!(error.contains("is not stored"), "{error}");
    assert!(
        error.contains(&parse_str(V1, "flow.yaml").expect("v1").hash),
        "{error}"
    );
}

const V0: &str = r#"
name: Flow
workflow:
  description: version 0, a alone
  version: "0"
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
  output_mapping: {version: "zero", n: "{{a.output.n}}"}
"#;

/// The real binary with `args` against `server`: exit code, stdout, stderr.
async fn cli(server: &test_harness::NatsServer, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .args(args)
        .args(["--nats-url", &server.url()])
        .env_remove("NATS_URL")
        .output()
        .await
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Stores `yaml` as a definition last served `days_ago` days ago.
async fn store_old(defs: &async_nats::jetstream::kv::Store, yaml: &str, days_ago: u64) -> String {
    let wf = parse_str(yaml, "flow.yaml").expect("parses");
    let mut stored = StoredDefinition::of(&wf);
    stored.served_at.0 -= days_ago * 24 * 3600 * 1000;
    defs.put(
        versions::key(&wf.name, &wf.hash),
        serde_json::to_vec(&stored).expect("json").into(),
    )
    .await
    .expect("put");
    wf.hash
}

async fn run_pinned(client: &async_nats::Client, version: Option<&str>) -> RunResult {
    let start = StartAs {
        task_id: new_task_id(),
        version: version.map(str::to_string),
        signer: None,
        priority: None,
    };
    invoke_as(
        client,
        "mesh",
        "Flow",
        &json!({"n": 7}),
        Duration::from_secs(60),
        start,
        |_| {},
    )
    .await
    .expect("a result")
}

#[tokio::test]
async fn versions_are_pinned_listed_and_retired_only_when_no_run_uses_them() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let (_agents, mut calls, open) = agents(&client).await;
    node(&server, V1).await.shutdown().await;
    let v2 = node(&server, V2).await;
    let v1_hash = parse_str(V1, "flow.yaml").expect("v1").hash;
    let defs = async_nats::jetstream::new(client.clone())
        .get_key_value(names::versions_bucket("mesh"))
        .await
        .expect("definitions bucket");

    // A run pinned to version 1, served by a replica of version 2, waits in v1's `b`.
    let caller = client.clone();
    let pinned = tokio::spawn(async move { run_pinned(&caller, Some("1")).await });
    calls.recv().await.expect("b calls Gate");

    let (code, out, err) = cli(
        &server,
        &["definitions", "list", "--workflow", "Flow", "--json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("json");
    let v1_row = rows
        .iter()
        .find(|r| r["version"] == "1")
        .expect("version 1 listed");
    assert_eq!(v1_row["running"], 1, "{out}");
    assert!(rows.iter().any(|r| r["version"] == "2"), "{out}");

    let (code, _, err) = cli(&server, &["definitions", "delete", "Flow", "1"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("1 running run(s)"), "{err}");
    let (code, _, err) = cli(&server, &["definitions", "delete", "Flow", "2"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("stop serving it first"), "{err}");
    let (code, _, err) = cli(&server, &["definitions", "delete", "Flow", "9"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("no stored definition '9'") && err.contains("1, 2"),
        "{err}"
    );

    let (code, out, err) = cli(&server, &["runs", "list", "--workflow", "Flow", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let runs: Vec<serde_json::Value> = serde_json::from_str(&out).expect("json");
    let running = runs
        .iter()
        .find(|r| r["status"] == "running")
        .expect("the pinned run");
    let id = running["execution_id"].as_str().expect("an id");
    let (code, out, err) = cli(&server, &["runs", "show", id]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("definition version 1 ({v1_hash})")),
        "{out}"
    );

    // Not served for longer than the retention: version 0, used by no run, is deleted;
    // version 1 is kept while a run names it.
    store_old(&defs, V0, 8).await;
    store_old(&defs, V1, 8).await;
    assert_eq!(v2.sweep_versions().await.expect("sweep"), 1);
    let v0_hash = parse_str(V0, "flow.yaml").expect("v0").hash;
    assert!(defs
        .get(versions::key("Flow", &v0_hash))
        .await
        .expect("get")
        .is_none());
    assert!(defs
        .get(versions::key("Flow", &v1_hash))
        .await
        .expect("get")
        .is_some());

    open.send_replace(true);
    let r = pinned.await.expect("the caller");
    assert_eq!(
        r.output,
        Some(json!({"version": "one", "n": 7})),
        "{:?}",
        r.error
    );
    // Ended runs keep their definition until their records expire.
    assert_eq!(v2.sweep_versions().await.expect("sweep"), 0);

    let r = run_pinned(&client, None).await;
    assert_eq!(
        r.output,
        Some(json!({"version": "two", "n": 7})),
        "{:?}",
        r.error
    );
    let r = run_pinned(&client, Some("3")).await;
    assert_eq!(r.status, "failure");
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("no stored version '3'") && error.contains("stored: 1, 2"),
        "{error}"
    );

    // An old version no run uses is deleted on request.
    store_old(&defs, V0, 8).await;
    let (code, out, err) = cli(&server, &["definitions", "delete", "Flow", "0"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("deleted version 0"), "{out}");
}

/// A run uses the version of the replica that took its request (and checked its input),
/// not that of the replica that happens to pull its start from the stream: the version 1
/// replica takes the request while the shared consumer is paused, and is replaced by a
/// version 2 replica before the start is pulled.
#[tokio::test]
async fn a_run_uses_the_version_of_the_replica_that_took_its_request() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let (_agents, _calls, open) = agents(&client).await;
    open.send_replace(true);
    let v1 = node(&server, V1).await;
    let js = async_nats::jetstream::new(client.clone());
    let stream = js
        .get_stream(names::event_stream("mesh", "Flow"))
        .await
        .expect("the event stream");
    let in_an_hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        + Duration::from_secs(3600);
    let far = async_nats::datetime::from_nanos(in_an_hour.as_nanos() as i128).expect("a date");
    stream
        .pause_consumer(names::CONSUMER, far)
        .await
        .expect("pause the consumer");
    let mut events = client
        .subscribe(messages::subjects::run_events_all("mesh", "Flow"))
        .await
        .expect("subscribe");
    agent_sdk::Mesh::new(client.clone())
        .roundtrip()
        .await
        .expect("the server took the subscription");
    let caller = client.clone();
    let run = tokio::spawn(async move {
        invoke(
            &caller,
            "mesh",
            "Flow",
            &json!({"n": 7}),
            Duration::from_secs(60),
            |_| {},
        )
        .await
        .expect("a result")
    });
    let started = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
    assert!(
        matches!(started, Ok(Some(_))),
        "version 1 published no start"
    );
    v1.shutdown().await;
    let _v2 = node(&server, V2).await;
    stream
        .resume_consumer(names::CONSUMER)
        .await
        .expect("resume the consumer");
    let r = run.await.expect("the caller");
    assert_eq!(r.status, "success", "{:?}", r.error);
    assert_eq!(r.output, Some(json!({"version": "one", "n": 7})));
}
