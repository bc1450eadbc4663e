//! Versioned artifacts (agent-sdk's `ArtifactStore`) over a real nats-server, with a real
//! workflow node: put/get/list with versions, the size cap, a workflow called with an
//! input artifact, and a large output coming back as an `output_artifact_ref`.

use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, ArtifactError, ArtifactStore, NodeRequest};
use futures::StreamExt;
use messages::workflow::ArtifactRef;
use messages::{subjects, Part};
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn put_get_and_list_keep_versions_and_refuse_what_is_too_large() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let store = ArtifactStore::new(client.clone(), "mesh")
        .for_run("run-1")
        .max_bytes(1024);
    let v1 = store
        .put("notes.txt", b"first", "text/plain")
        .await
        .unwrap();
    let v2 = store
        .put("notes.txt", b"second", "text/plain")
        .await
        .unwrap();
    assert_eq!(
        v1,
        ArtifactRef {
            name: "notes.txt".into(),
            version: Some(1)
        }
    );
    assert_eq!(v2.version, Some(2));
    assert_eq!(store.get(&v1).await.unwrap().bytes, b"first");
    let latest = store
        .get(&ArtifactRef {
            name: "notes.txt".into(),
            version: None,
        })
        .await
        .unwrap();
    assert_eq!(
        (latest.bytes.as_slice(), latest.reference.version),
        (&b"second"[..], Some(2))
    );
    assert_eq!(latest.mime, "text/plain");

    let other = ArtifactStore::new(client.clone(), "mesh").for_run("run-2");
    other
        .put("data.json", b"{}", "application/json")
        .await
        .unwrap();
    let listed: Vec<_> = store
        .list("run-1")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.reference)
        .collect();
    assert_eq!(listed, vec![v1.clone(), v2]);
    assert_eq!(other.list("run-2").await.unwrap().len(), 1);

    match store
        .put("big.bin", vec![0u8; 2048], "application/octet-stream")
        .await
    {
        Err(
            e @ ArtifactError::TooLarge {
                size: 2048,
                limit: 1024,
                ..
            },
        ) => {
            assert!(e.to_string().contains("above the limit of 1024"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(store
        .get(&ArtifactRef {
            name: "big.bin".into(),
            version: None
        })
        .await
        .is_err());
    let bad = store.put("x@v3", b"", "text/plain").await.unwrap_err();
    assert!(bad.to_string().contains("version suffix"), "{bad}");
}

#[tokio::test]
async fn a_workflow_takes_an_input_artifact_and_names_its_large_output_by_reference() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let _echo = AgentBuilder::new("Echo")
        .description("returns its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }))
        .serve(client.clone())
        .await
        .unwrap();
    let yaml = "name: Copy\nworkflow:\n  description: copies\n  nodes:\n    - {id: a, type: agent, agent_name: Echo}\n  output_mapping: {copy: \"{{a.output}}\"}\n";
    let wf = parse_str(yaml, "copy.yaml").unwrap_or_else(|p| panic!("{p:?}"));
    let _node = WorkflowNode::start(client.clone(), vec![wf], Config::default())
        .await
        .unwrap();

    // A 400 KiB input, stored, then passed by reference (over the 256 KiB inline limit).
    let store = ArtifactStore::new(client.clone(), "mesh").for_run("caller");
    let input = json!({"blob": "x".repeat(400 * 1024)});
    let input_ref = store
        .put(
            "big-input.json",
            serde_json::to_vec(&input).unwrap(),
            "application/json",
        )
        .await
        .unwrap();

    let reply = client.new_inbox();
    let mut replies = client.subscribe(reply.clone()).await.unwrap();
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": "m1", "taskId": "copy-1", "role": "user",
            "parts": [
                {"kind": "data", "data": {"type": "structured_invocation_request",
                    "workflow_name": "Outer", "node_id": "n"}},
                serde_json::to_value(store.input_part(&input_ref, Some("application/json"))).unwrap()]}}});
    client
        .publish_with_reply(
            subjects::agent_request("mesh", "Copy"),
            reply,
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    let task = tokio::time::timeout(TIMEOUT, async {
        loop {
            let msg = replies.next().await.expect("replies");
            let v: Value = serde_json::from_slice(&msg.payload).unwrap();
            if v["result"]["kind"] == "task" {
                return v["result"].clone();
            }
        }
    })
    .await
    .expect("a final reply");
    assert_eq!(task["status"]["state"], "completed", "{task}");
    let parts: Vec<Part> =
        serde_json::from_value(task["status"]["message"]["parts"].clone()).unwrap();
    let result = parts[0].as_data().expect("the result DataPart");
    assert!(
        result.get("output").is_none(),
        "the output is too large to be inline"
    );
    let output_ref: ArtifactRef =
        serde_json::from_value(result["output_artifact_ref"].clone()).unwrap();
    assert_eq!(output_ref.version, Some(1));
    let output = store.get(&output_ref).await.unwrap();
    let output: Value = serde_json::from_slice(&output.bytes).unwrap();
    assert_eq!(output, json!({"copy": input}));

    // The run's artifacts are listed under its execution id, which begins the output's
    // name (`{execution}.{tag}.output.json`).
    let execution = output_ref
        .name
        .strip_suffix(".output.json")
        .and_then(|n| n.rsplit_once('.'))
        .map(|(execution, _tag)| execution)
        .expect("a run output");
    let listed = store.list(execution).await.unwrap();
    assert!(
        listed.iter().any(|a| a.reference == output_ref),
        "{listed:?}"
    );
}
