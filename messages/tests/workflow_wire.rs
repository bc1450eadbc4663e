//! Pins the wire format of the workflow DataParts and the agent card: each is read from a
//! JSON literal and must write back exactly that JSON.

use messages::card::{
    AgentCard, AgentSkill, EXT_AGENT_TYPE, EXT_DISPLAY_NAME, EXT_SCHEMAS,
    EXT_WORKFLOW_VISUALIZATION,
};
use messages::workflow::*;
use messages::{DataPartType, Message, Part, Role};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// Reads `literal` as `T` and as [`WorkflowDataPart`], writes both back, and requires the
/// same JSON each time.
fn round_trip<T>(literal: Value) -> T
where
    T: Serialize + DeserializeOwned + DataPartType + std::fmt::Debug,
{
    assert_eq!(literal["type"], T::TYPE);
    let parsed: T = serde_json::from_value(literal.clone()).expect("parses");
    assert_eq!(
        serde_json::to_value(&parsed).unwrap(),
        literal,
        "{parsed:?}"
    );
    let any: WorkflowDataPart = serde_json::from_value(literal.clone()).expect("enum parses");
    assert_eq!(any.type_name(), T::TYPE);
    assert_eq!(serde_json::to_value(&any).unwrap(), literal);
    let data = literal.as_object().unwrap();
    assert_eq!(WorkflowDataPart::from_data(data).unwrap(), Some(any));
    // Inside a message, found by type.
    let msg = Message::new(
        "m",
        Role::Agent,
        vec![Part::text("x"), Part::data_part(&parsed)],
    );
    let found: T = msg.find_data().unwrap().unwrap();
    assert_eq!(serde_json::to_value(&found).unwrap(), literal);
    parsed
}

#[test]
fn node_request() {
    let r: WorkflowNodeRequest = round_trip(json!({
        "type": "workflow_node_request",
        "workflow_name": "OrderWorkflow",
        "node_id": "check",
        "input_schema": {"type": "object"},
        "output_schema": null,
        "suggested_output_filename": "OrderWorkflow_check_abcd1234.json",
        "execution_id": "e1",
        "sub_task_id": "e1_check_m0_a1",
        "map_index": 0,
        "loop_iteration": 2,
        "attempt": 1
    }));
    assert_eq!(r.node_id, "check");
    // The seed's minimal form (no optional fields at all) is accepted too.
    let min: WorkflowNodeRequest = serde_json::from_value(json!({
        "type": "workflow_node_request", "workflow_name": "W", "node_id": "n"
    }))
    .unwrap();
    assert_eq!(min.input_schema, None);
}

#[test]
fn node_result() {
    let ok: WorkflowNodeResult = round_trip(json!({
        "type": "workflow_node_result",
        "status": "success",
        "output": {"category": "small"},
        "retry_count": 0
    }));
    assert_eq!(
        ok,
        WorkflowNodeResult::success(json!({"category": "small"}))
    );
    round_trip::<WorkflowNodeResult>(json!({
        "type": "workflow_node_result",
        "status": "failure",
        "artifact_name": "out.json",
        "artifact_version": 2,
        "error_message": "upstream unavailable",
        "error_kind": "transient",
        "validation_errors": ["/x: is required"],
        "retry_count": 2
    }));
    // The reference's "error" reads as failure; retry_count defaults to 0.
    let legacy: WorkflowNodeResult = serde_json::from_value(json!({
        "type": "workflow_node_result", "status": "error", "error_message": "x"
    }))
    .unwrap();
    assert_eq!(legacy.status, ResultStatus::Failure);
    assert_eq!(legacy.retry_count, 0);
}

#[test]
fn execution_start() {
    round_trip::<WorkflowExecutionStart>(json!({
        "type": "workflow_execution_start",
        "workflow_name": "W",
        "execution_id": "e1",
        "input_artifact_ref": {"name": "in.json", "version": 1},
        "workflow_input": {"value": 5}
    }));
}

#[test]
fn node_execution_start() {
    round_trip::<WorkflowNodeExecutionStart>(json!({
        "type": "workflow_node_execution_start",
        "node_id": "route",
        "node_type": "switch",
        "agent_name": "A",
        "input_artifact_ref": {"name": "x"},
        "iteration_index": 3,
        "sub_task_id": "s",
        "parent_node_id": "p",
        "parallel_group_id": "g",
        "condition": "{{a.output.ok}}",
        "true_branch": "t",
        "false_branch": "f",
        "cases": [{"condition": "{{x}} == 1", "node": "one"}],
        "default_branch": "d",
        "wait_for": ["a", "b"],
        "join_strategy": "n_of_m",
        "join_n": 1,
        "max_iterations": 10,
        "loop_delay": "5s",
        "attempt": 2
    }));
    round_trip::<WorkflowNodeExecutionStart>(json!({
        "type": "workflow_node_execution_start", "node_id": "a", "node_type": "agent"
    }));
}

#[test]
fn node_execution_result() {
    for status in ["success", "failure", "skipped", "cancelled", "timed_out"] {
        round_trip::<WorkflowNodeExecutionResult>(json!({
            "type": "workflow_node_execution_result", "node_id": "a", "status": status
        }));
    }
    round_trip::<WorkflowNodeExecutionResult>(json!({
        "type": "workflow_node_execution_result",
        "node_id": "c",
        "status": "success",
        "output_artifact_ref": {"name": "o", "version": 3},
        "output": {"selected_branch": "t"},
        "error_message": "none",
        "condition_result": true,
        "selected_branch": "t",
        "iteration_index": 0,
        "metadata": {"k": "v"}
    }));
}

#[test]
fn map_progress() {
    for status in ["in-progress", "completed", "failed"] {
        round_trip::<WorkflowMapProgress>(json!({
            "type": "workflow_map_progress", "node_id": "m", "total_items": 10,
            "completed_items": 4, "status": status
        }));
    }
}

#[test]
fn execution_result() {
    for status in ["success", "failure", "cancelled", "timed_out"] {
        round_trip::<WorkflowExecutionResult>(json!({
            "type": "workflow_execution_result", "workflow_name": "W", "execution_id": "e",
            "status": status
        }));
    }
    round_trip::<WorkflowExecutionResult>(json!({
        "type": "workflow_execution_result",
        "workflow_name": "W",
        "execution_id": "e",
        "status": "failure",
        "output_artifact_ref": {"name": "r"},
        "workflow_output": {"a": 1},
        "error_message": "node 'b' failed: boom",
        "error_node_id": "b"
    }));
}

#[test]
fn approvals() {
    round_trip::<WorkflowApprovalRequest>(json!({
        "type": "workflow_approval_request",
        "workflow_name": "W",
        "execution_id": "e",
        "node_id": "gate",
        "approvers": ["alice", "bob"],
        "message": "Ship order 42?"
    }));
    for decision in ["approve", "reject"] {
        round_trip::<WorkflowApprovalDecision>(json!({
            "type": "workflow_approval_decision", "execution_id": "e", "node_id": "gate",
            "decision": decision
        }));
    }
    round_trip::<WorkflowApprovalDecision>(json!({
        "type": "workflow_approval_decision", "execution_id": "e", "node_id": "gate",
        "decision": "reject", "by": "alice", "comment": "too expensive"
    }));
}

#[test]
fn run_state() {
    let running = round_trip::<WorkflowRunState>(json!({
        "type": "workflow_run_state",
        "workflow_name": "W",
        "execution_id": "e",
        "status": "running",
        "nodes": {"a": "success", "gate": "waiting", "b": "pending"}
    }));
    assert_eq!(running.nodes["gate"], NodePhase::Waiting);
    round_trip::<WorkflowRunState>(json!({
        "type": "workflow_run_state", "workflow_name": "W", "execution_id": "e",
        "status": "success", "nodes": {"a": "success"}, "output": {"x": 1}
    }));
    round_trip::<WorkflowRunState>(json!({
        "type": "workflow_run_state", "workflow_name": "W", "execution_id": "e",
        "status": "failure", "nodes": {"a": "failure", "b": "skipped"},
        "error_message": "node a failed", "error_node_id": "a"
    }));
    round_trip::<WorkflowRunState>(json!({
        "type": "workflow_run_state", "workflow_name": "W", "execution_id": "e",
        "status": "success", "nodes": {},
        "output_artifact_ref": {"name": "e.output.json"}
    }));
    let timed_out = round_trip::<WorkflowRunState>(json!({
        "type": "workflow_run_state", "workflow_name": "W", "execution_id": "e",
        "status": "timed_out", "nodes": {"a": "timed_out", "b": "cancelled"},
        "error_message": "the run exceeded max_workflow_execution_time_seconds (5 s)"
    }));
    assert_eq!(timed_out.status, RunPhase::TimedOut);
    assert_eq!(timed_out.nodes["a"], NodePhase::TimedOut);
}

#[test]
fn the_reference_dialect_says_error_for_a_timeout() {
    let mut data = json!({"type": "workflow_execution_result", "workflow_name": "W",
        "execution_id": "e", "status": "timed_out"});
    Dialect::Reference.rewrite(data.as_object_mut().unwrap());
    assert_eq!(data["status"], "error");
    let mut data = json!({"type": "workflow_execution_result", "workflow_name": "W",
        "execution_id": "e", "status": "timed_out"});
    Dialect::Mesh.rewrite(data.as_object_mut().unwrap());
    assert_eq!(data["status"], "timed_out");
}

#[test]
fn data_part_enum_rejects_and_ignores() {
    assert!(serde_json::from_value::<WorkflowDataPart>(json!({"type": "other"})).is_err());
    assert!(serde_json::from_value::<WorkflowDataPart>(json!({"x": 1})).is_err());
    let other = json!({"type": "agent_progress"});
    assert_eq!(
        WorkflowDataPart::from_data(other.as_object().unwrap()).unwrap(),
        None
    );
    let bad = json!({"type": "workflow_map_progress", "node_id": 3});
    assert!(WorkflowDataPart::from_data(bad.as_object().unwrap()).is_err());
    // Unknown extra fields are fine.
    let extra = json!({"type": "workflow_map_progress", "node_id": "m", "total_items": 1,
                       "completed_items": 1, "status": "completed", "future": [1]});
    assert!(WorkflowDataPart::from_data(extra.as_object().unwrap())
        .unwrap()
        .is_some());
}

fn card_json() -> Value {
    json!({
        "protocolVersion": "0.3.0",
        "name": "OrderWorkflow",
        "description": "Processes orders",
        "url": "nats:mesh.a2a.v1.agent.request.OrderWorkflow",
        "preferredTransport": "NATS",
        "version": "1.0.0",
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extensions": [
                {"uri": "https://solace.com/a2a/extensions/agent-type",
                 "description": "Specifies the type of agent (e.g., 'workflow').",
                 "required": false,
                 "params": {"type": "workflow"}},
                {"uri": "https://solace.com/a2a/extensions/sam/schemas",
                 "description": "Input and output JSON schemas for the workflow.",
                 "required": false,
                 "params": {"input_schema": {"type": "object"}}},
                {"uri": "https://solace.com/a2a/extensions/sam/workflow-visualization",
                 "description": "Mermaid diagram and JSON configuration of the workflow.",
                 "required": false,
                 "params": {"mermaid_source": "graph TD", "workflow_config": {"nodes": []}}},
                {"uri": "https://solace.com/a2a/extensions/display-name",
                 "description": "Display name for UI",
                 "required": false,
                 "params": {"display_name": "Order processing"}}
            ]
        },
        "defaultInputModes": ["text", "application/json"],
        "defaultOutputModes": ["text", "application/json"],
        "skills": [
            {"id": "process", "name": "Process", "description": "Processes one order",
             "tags": ["orders"], "examples": ["order 42"], "inputModes": ["application/json"],
             "outputModes": ["application/json"]}
        ]
    })
}

#[test]
fn card_round_trips_and_builders_write_the_same_json() {
    let card: AgentCard = serde_json::from_value(card_json()).unwrap();
    assert_eq!(serde_json::to_value(&card).unwrap(), card_json());
    assert_eq!(card.agent_type(), Some("workflow"));
    assert!(card.is_workflow());
    assert_eq!(card.schemas(), (Some(json!({"type": "object"})), None));
    assert_eq!(card.mermaid_source(), Some("graph TD"));
    assert_eq!(card.workflow_config(), Some(&json!({"nodes": []})));
    assert_eq!(card.display_name(), Some("Order processing"));

    let mut built = AgentCard::new(
        "OrderWorkflow",
        "Processes orders",
        "nats:mesh.a2a.v1.agent.request.OrderWorkflow",
        "1.0.0",
    )
    .with_agent_type("workflow")
    .with_schemas(Some(json!({"type": "object"})), None)
    .with_visualization("graph TD".into(), json!({"nodes": []}))
    .with_display_name("Order processing");
    built.skills.push(AgentSkill {
        id: "process".into(),
        name: "Process".into(),
        description: "Processes one order".into(),
        tags: vec!["orders".into()],
        examples: Some(vec!["order 42".into()]),
        input_modes: Some(vec!["application/json".into()]),
        output_modes: Some(vec!["application/json".into()]),
    });
    assert_eq!(serde_json::to_value(&built).unwrap(), card_json());

    // Setting an extension again replaces it; no schemas removes the extension.
    let again = built
        .clone()
        .with_agent_type("agent")
        .with_schemas(None, None);
    assert_eq!(again.agent_type(), Some("agent"));
    assert_eq!(again.schemas(), (None, None));
    let uris: Vec<_> = again
        .capabilities
        .extensions
        .iter()
        .map(|e| e.uri.as_str())
        .collect();
    assert_eq!(
        uris,
        [EXT_AGENT_TYPE, EXT_WORKFLOW_VISUALIZATION, EXT_DISPLAY_NAME]
    );
    assert_ne!(EXT_SCHEMAS, EXT_AGENT_TYPE);
}

#[test]
fn reference_card_parses() {
    // The shape the reference system publishes (a2a-sdk 0.3.7), with fields we do not model.
    let card: AgentCard = serde_json::from_value(json!({
        "capabilities": {"streaming": false, "extensions": [
            {"uri": "https://solace.com/a2a/extensions/agent-type",
             "params": {"type": "workflow"}},
            {"uri": "https://solace.com/a2a/extensions/sam/schemas",
             "params": {"input_schema": {"type": "object"}, "output_schema": null}}]},
        "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
        "description": "d", "name": "MapIterationWorkflow",
        "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
        "skills": [{"id": "s", "name": "S", "description": "d", "tags": []}],
        "url": "solace:myns/a2a/v1/agent/request/MapIterationWorkflow", "version": "1.0.0",
        "provider": {"organization": "x", "url": "y"},
        "supportsAuthenticatedExtendedCard": false
    }))
    .unwrap();
    assert!(card.is_workflow());
    assert_eq!(card.schemas(), (Some(json!({"type": "object"})), None));
    assert_eq!(card.display_name(), None);
}

#[test]
fn the_reference_dialect_is_read_and_written() {
    use messages::workflow::{ArtifactRef, Dialect, ResultStatus, WorkflowNodeResult};
    // The reference's names are read as ours, with its `error` and `output_artifact_ref`.
    let request = json!({"type": "structured_invocation_request", "workflow_name": "W",
                         "node_id": "n", "input_schema": null, "output_schema": null,
                         "suggested_output_filename": "W_n_12345678.json"});
    match WorkflowDataPart::from_data(request.as_object().unwrap()).unwrap() {
        Some(WorkflowDataPart::NodeRequest(r)) => assert_eq!(r.node_id, "n"),
        other => panic!("{other:?}"),
    }
    let result = json!({"type": "structured_invocation_result", "status": "error",
                        "error_message": "boom", "validation_errors": [], "retry_count": 1});
    match WorkflowDataPart::from_data(result.as_object().unwrap()).unwrap() {
        Some(WorkflowDataPart::NodeResult(r)) => {
            assert_eq!(r.status, ResultStatus::Failure);
            assert_eq!(r.error_message.as_deref(), Some("boom"));
        }
        other => panic!("{other:?}"),
    }
    let stored = json!({"type": "structured_invocation_result", "status": "success",
                        "output_artifact_ref": {"name": "out.json", "version": 2}});
    let r: WorkflowNodeResult = serde_json::from_value(stored).unwrap();
    let reference = r.output_artifact_ref.unwrap();
    assert_eq!(
        reference,
        ArtifactRef {
            name: "out.json".into(),
            version: Some(2)
        }
    );
    assert_eq!(reference.object_key(), "out.json@v2");

    // Written in the reference's words only when asked.
    let failed = WorkflowNodeResult::failure("x");
    let mut data = serde_json::to_value(&failed).unwrap();
    let obj = data.as_object_mut().unwrap();
    Dialect::Mesh.rewrite(obj);
    assert_eq!(
        (obj["type"].as_str(), obj["status"].as_str()),
        (Some("workflow_node_result"), Some("failure"))
    );
    Dialect::Reference.rewrite(obj);
    assert_eq!(
        (obj["type"].as_str(), obj["status"].as_str()),
        (Some("structured_invocation_result"), Some("error"))
    );
    let mut progress = json!({"type": "workflow_execution_result", "status": "failure"});
    Dialect::Reference.rewrite(progress.as_object_mut().unwrap());
    assert_eq!(progress["status"], "error");
    assert_eq!(progress["type"], "workflow_execution_result");
    // Payloads that are not workflow DataParts keep their `status`.
    let mut payload = json!({"status": "failure"});
    Dialect::Reference.rewrite(payload.as_object_mut().unwrap());
    assert_eq!(payload["status"], "failure");
    assert_eq!("reference".parse::<Dialect>(), Ok(Dialect::Reference));
    assert!("sam"
        .parse::<Dialect>()
        .unwrap_err()
        .contains("expected 'mesh' or 'reference'"));
}

#[test]
fn version_keys_round_trip() {
    use messages::payload::{split_version_key, version_key};
    assert_eq!(version_key("a.json", 3), "a.json@v3");
    assert_eq!(split_version_key("a.json@v3"), Some(("a.json", 3)));
    assert_eq!(split_version_key("a.json"), None);
    assert_eq!(split_version_key("a@vx"), None);
    assert_eq!(split_version_key("@v1"), None);
}
