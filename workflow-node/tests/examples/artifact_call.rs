//! Runs the `artifact_call` example against a real nats-server: a 4 MiB input stored as
//! an artifact is the input of a workflow called in artifact mode, and the output comes
//! back as a versioned artifact reference whose content is the workflow's result.

#[path = "../../examples/artifact_call.rs"]
mod example;

use serde_json::json;

#[tokio::test]
async fn a_workflow_called_in_artifact_mode_names_its_stored_output() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let input = example::input(4 << 20);
    let text = input["text"].as_str().unwrap().to_owned();
    let report = example::run(client, input).await.expect("the example ran");
    assert_eq!(report.input.name, "shouting-input.json");
    assert_eq!(report.input.version, Some(1));
    assert_eq!(report.output.version, Some(1));
    assert!(
        report.output.name.ends_with(".output.json"),
        "{:?}",
        report.output
    );
    assert_eq!(
        report.stored,
        format!("nats-object://mesh_artifacts/{}@v1", report.output.name),
        "the final reply points at the named artifact"
    );
    assert_eq!(report.result["title"], json!("a large text"));
    assert_eq!(report.result["length"], json!(4 << 20));
    assert!(
        report.result["text"].as_str() == Some(text.to_uppercase().as_str()),
        "the stored output is the upper-cased input"
    );
}
