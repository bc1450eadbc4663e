//! Artifacts under the shipped configuration: an object is read by whoever was handed its
//! name, and by nobody else. Bob starts a signed run whose input (300 KB) and output are
//! too large for a message: the node stores both, the called agent reads its input, Bob
//! reads the output, each through a workflow node. Alice, another caller who knows the
//! run's id, can neither list the bucket, nor read the objects by the names that id once
//! gave them, nor read the stream's messages by sequence, nor ask JetStream with
//! wildcards for every object's metadata or chunks.

use agent_sdk::{ArtifactStore, Mesh, Output, Signer};
use serde_json::{json, Value};
use workflow_node::core::TaskKey;
use workflow_node::ops::runs::Runs;
use workflow_node::shell::{Config, WorkflowNode};

use crate::support::security::{stubs_file, Secure, WAIT};

const NS: &str = "mesh";

/// A workflow whose call input and output are as large as its input.
const BIG: &str = r#"
name: Big
workflow:
  description: doubles a value beside a large blob, and hands the blob back
  nodes:
    - id: double
      type: agent
      agent_name: Doubler
      input: {value: "{{workflow.input.value}}", blob: "{{workflow.input.blob}}"}
  output_mapping: {value: "{{double.output.value}}", blob: "{{workflow.input.blob}}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_who_is_handed_an_artifact_reads_it() {
    let secure = Secure::start();
    let node_conn = secure.connect("node").await;
    let workflows = vec![workflow_node::definition::parse_str(BIG, "big.yaml").unwrap()];
    let _node = WorkflowNode::start(node_conn.client.clone(), workflows, Config::default())
        .await
        .expect("the node starts as user node");
    let mut agents = secure.connect("agents").await;
    let _stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs_file())
        .await
        .expect("the stub agents serve as user agents");

    // Bob's signed run: a 300 KB input, sent inline (callers write no objects); the node
    // stores it, the call's input and the run's output as artifacts.
    let mut bob = secure.connect("bob").await;
    let blob = "b".repeat(300_000);
    let mesh = Mesh::new(bob.client.clone())
        .timeout(WAIT)
        .signer(Signer::generate());
    let catalog = mesh.catalog().await.expect("bob sees the cards");
    assert!(
        catalog.wait_for("Big", WAIT).await.is_some(),
        "no card of Big"
    );
    let call = mesh
        .agent("Big")
        .artifact_threshold(1 << 20)
        .call(json!({"value": 21, "blob": blob}));
    let Output::Stored(uri) = call.output().await.expect("Bob's run succeeds") else {
        panic!("an output of 300 KB comes back as a reference");
    };
    // Bob reads his output by the reference he was handed.
    let output = mesh.artifacts().get_uri(&uri).await.expect("bob reads it");
    assert_eq!(output, json!({"value": 42, "blob": blob}));
    assert_eq!(bob.errors().await, Vec::<String>::new());
    // The agent read its 300 KB input within its rights.
    assert_eq!(agents.errors().await, Vec::<String>::new());

    // The run's id, as alice may learn it (from an operator, a log, a shared link).
    let runs = Runs::open(node_conn.client.clone(), NS).await.unwrap();
    let run = runs.all(Some("Big")).await.unwrap();
    let execution = run.first().expect("Bob's run").execution.clone();
    let call_id = |attempt| TaskKey::single("double").sub_task_id(&execution, attempt);

    let mut alice = secure.connect("alice").await;
    let hers = ArtifactStore::new(alice.client.clone(), NS);
    // Listing the bucket (a consumer on every object's metadata): refused, from its first
    // step on.
    let listed = hers.list(&execution.0).await;
    assert!(listed.is_err(), "alice listed the bucket: {listed:?}");
    alice
        .denied("Publish", "$JS.API.STREAM.INFO.OBJ_mesh_artifacts")
        .await;
    // The names a run's id once gave its objects name nothing now.
    for name in [
        format!("{execution}.input.json"),
        format!("{execution}.output.json"),
        format!("{}.input.json", call_id(0)),
        format!("{}.input.json", call_id(1)),
    ] {
        let read = hers.get_bytes(hers.bucket(), &name).await;
        assert!(
            matches!(read, Err(agent_sdk::ArtifactError::NotFound { .. })),
            "{name}: {read:?}"
        );
    }
    // Reading the stream's messages by sequence, as the JetStream API allows, and asking
    // it with wildcards (the subjects that name one object take them) for the latest
    // metadata of any object or a consumer on every object's chunks: the server refuses
    // each request before JetStream sees it.
    let asks = [
        (
            "$JS.API.STREAM.MSG.GET.OBJ_mesh_artifacts",
            json!({"seq": 1}),
        ),
        ("$JS.API.DIRECT.GET.OBJ_mesh_artifacts", json!({"seq": 1})),
        (
            "$JS.API.DIRECT.GET.OBJ_mesh_artifacts.$O.mesh_artifacts.M.*",
            Value::Null,
        ),
        (
            "$JS.API.CONSUMER.CREATE.OBJ_mesh_artifacts.all.$O.mesh_artifacts.C.*",
            json!({"stream_name": "OBJ_mesh_artifacts", "config": {"name": "all",
                "filter_subject": "$O.mesh_artifacts.C.*", "ack_policy": "none",
                "deliver_subject": "_INBOX.alice.all"}}),
        ),
    ];
    for (subject, body) in asks {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let inbox = alice.client.new_inbox();
        alice
            .client
            .publish_with_reply(subject, inbox, body.into())
            .await
            .unwrap();
        alice.denied("Publish", subject).await;
    }
    // And bob still reads his output.
    let again: Value = mesh.artifacts().get_uri(&uri).await.expect("bob reads it");
    assert_eq!(again["value"], 42);
}
