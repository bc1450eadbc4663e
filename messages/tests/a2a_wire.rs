//! Pins the A2A wire format: every type is read from a JSON literal and must write back
//! exactly that JSON. Unknown fields must be tolerated.

use messages::jsonrpc::{codes, MessageSendParams};
use messages::{
    AgentReply, Message, Method, Outcome, Part, Request, RequestId, Response, Role, Task,
    TaskState, TaskStatusUpdateEvent,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// Reads `literal` as `T`, writes it back, and requires the same JSON.
fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug>(literal: Value) -> T {
    let parsed: T = serde_json::from_value(literal.clone()).expect("parses");
    let written = serde_json::to_value(&parsed).expect("serialises");
    assert_eq!(written, literal, "round trip of {parsed:?}");
    parsed
}

fn message_json() -> Value {
    json!({
        "kind": "message",
        "messageId": "m-1",
        "role": "user",
        "parts": [
            {"kind": "text", "text": "hello"},
            {"kind": "file", "file": {"uri": "obj://bucket/input.json", "name": "input.json",
                                       "mimeType": "application/json"}},
            {"kind": "file", "file": {"bytes": "e30="}, "metadata": {"k": 1}},
            {"kind": "data", "data": {"type": "workflow_node_result", "status": "success",
                                       "output": {"x": 1}, "retry_count": 0}}
        ],
        "taskId": "t-1",
        "contextId": "c-1",
        "metadata": {"workflow_name": "Wf"}
    })
}

#[test]
fn message_round_trips() {
    let m: Message = round_trip(message_json());
    assert_eq!(m.role, Role::User);
    assert_eq!(m.parts.len(), 4);
    assert_eq!(m.text(), "hello");
    let r = m
        .find_data::<messages::WorkflowNodeResult>()
        .expect("present")
        .expect("valid");
    assert_eq!(r.output, Some(json!({"x": 1})));
    assert!(m.find_data::<messages::WorkflowNodeRequest>().is_none());
}

#[test]
fn minimal_message_round_trips() {
    round_trip::<Message>(json!({
        "kind": "message", "messageId": "m", "role": "agent", "parts": []
    }));
}

#[test]
fn unknown_fields_are_ignored() {
    let mut v = message_json();
    v["extensions"] = json!(["urn:x"]);
    v["referenceTaskIds"] = json!(["a"]);
    v["parts"][0]["somethingNew"] = json!(true);
    let m: Message = serde_json::from_value(v).expect("parses");
    assert_eq!(m.message_id, "m-1");
}

#[test]
fn part_kind_is_checked() {
    assert!(serde_json::from_value::<Part>(json!({"kind": "video", "url": "x"})).is_err());
    assert!(serde_json::from_value::<Part>(json!({"kind": "data", "data": [1, 2]})).is_err());
}

#[test]
fn part_data_part_writes_the_type() {
    let p = Part::data_part(&messages::WorkflowNodeResult::failure("boom"));
    assert_eq!(
        serde_json::to_value(&p).unwrap(),
        json!({"kind": "data", "data": {"type": "workflow_node_result", "status": "failure",
                                         "error_message": "boom", "retry_count": 0}})
    );
}

fn task_json() -> Value {
    json!({
        "kind": "task",
        "id": "t-1",
        "contextId": "c-1",
        "status": {
            "state": "completed",
            "message": {"kind": "message", "messageId": "m-2", "role": "agent",
                        "parts": [{"kind": "data", "data": {"type": "workflow_node_result",
                                   "status": "success", "output": 3, "retry_count": 1}}]},
            "timestamp": "2026-01-01T00:00:00Z"
        },
        "artifacts": [{"artifactId": "a-1", "name": "out", "parts": [{"kind": "text", "text": "x"}]}],
        "metadata": {"workflow_name": "Wf"}
    })
}

#[test]
fn task_round_trips() {
    let t: Task = round_trip(task_json());
    assert_eq!(t.status.state, TaskState::Completed);
    let r = t
        .find_data::<messages::WorkflowNodeResult>()
        .unwrap()
        .unwrap();
    assert_eq!(r.retry_count, 1);
}

#[test]
fn every_task_state_has_its_wire_name() {
    let names = [
        "submitted",
        "working",
        "input-required",
        "completed",
        "canceled",
        "failed",
        "rejected",
        "auth-required",
        "unknown",
    ];
    for n in names {
        let s: TaskState = round_trip(json!(n));
        assert_eq!(
            s.is_terminal(),
            matches!(n, "completed" | "canceled" | "failed" | "rejected")
        );
    }
}

#[test]
fn status_update_round_trips() {
    let u: TaskStatusUpdateEvent = round_trip(json!({
        "kind": "status-update",
        "taskId": "t-1",
        "contextId": "c-1",
        "status": {"state": "working"},
        "final": false,
        "metadata": {"seq": 3}
    }));
    assert!(!u.is_final);
}

#[test]
fn agent_reply_dispatches_on_kind() {
    assert!(matches!(
        round_trip::<AgentReply>(task_json()),
        AgentReply::Task(_)
    ));
    assert!(matches!(
        round_trip::<AgentReply>(message_json()),
        AgentReply::Message(_)
    ));
    assert!(serde_json::from_value::<AgentReply>(json!({"kind": "nope"})).is_err());
}

#[test]
fn message_send_request_round_trips() {
    let literal = json!({
        "jsonrpc": "2.0",
        "id": "req-1",
        "method": "message/send",
        "params": {"message": {"kind": "message", "messageId": "m", "role": "user",
                               "parts": [{"kind": "text", "text": "hi"}]},
                   "metadata": {"a": 1}}
    });
    let r: Request = round_trip(literal.clone());
    assert_eq!(r.id, RequestId::String("req-1".into()));
    let Method::MessageSend(MessageSendParams { message, metadata }) = &r.method else {
        panic!("wrong method");
    };
    assert_eq!(message.text(), "hi");
    assert_eq!(metadata.as_ref().unwrap()["a"], 1);
    let bytes = serde_json::to_vec(&literal).unwrap();
    assert_eq!(Request::from_slice(&bytes).unwrap(), r);
}

#[test]
fn tasks_cancel_request_round_trips() {
    let r: Request = round_trip(json!({
        "jsonrpc": "2.0", "id": 7, "method": "tasks/cancel", "params": {"id": "t-1"}
    }));
    assert_eq!(r, Request::tasks_cancel(RequestId::Number(7), "t-1"));
}

#[test]
fn tasks_get_request_round_trips_with_and_without_history_length() {
    let r: Request = round_trip(json!({
        "jsonrpc": "2.0", "id": "g1", "method": "tasks/get", "params": {"id": "t-1"}
    }));
    assert_eq!(r, Request::tasks_get("g1", "t-1"));
    let r: Request = round_trip(json!({
        "jsonrpc": "2.0", "id": 2, "method": "tasks/get",
        "params": {"id": "t-2", "historyLength": 5}
    }));
    let Method::TasksGet(params) = &r.method else {
        panic!("wrong method: {r:?}");
    };
    assert_eq!(
        (params.id.as_str(), params.history_length),
        ("t-2", Some(5))
    );
    assert_eq!(r.method.name(), "tasks/get");
}

#[test]
fn bad_requests_map_to_error_codes() {
    let code = |bytes: &[u8]| match Request::from_slice(bytes).unwrap_err().outcome {
        Outcome::Error(e) => e.code,
        Outcome::Result(_) => unreachable!(),
    };
    assert_eq!(code(b"{not json"), codes::PARSE_ERROR);
    assert_eq!(code(br#"{"jsonrpc":"2.0"}"#), codes::INVALID_REQUEST);
    assert_eq!(
        code(br#"{"jsonrpc":"1.0","id":1,"method":"message/send","params":{}}"#),
        codes::INVALID_REQUEST
    );
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{}}"#),
        codes::METHOD_NOT_FOUND
    );
    // Not served on NATS, and said so: a stream is rejoined by resending its request.
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","id":1,"method":"tasks/resubscribe","params":{}}"#),
        codes::UNSUPPORTED_OPERATION
    );
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}"#),
        codes::INVALID_PARAMS
    );
    let err =
        Request::from_slice(br#"{"jsonrpc":"2.0","id":"x","method":"message/send","params":{}}"#)
            .unwrap_err();
    assert_eq!(err.id, Some(RequestId::String("x".into())));
    assert!(matches!(err.outcome, Outcome::Error(ref e) if e.code == codes::INVALID_PARAMS));
}

#[test]
fn responses_round_trip() {
    let ok: Response = round_trip(json!({"jsonrpc": "2.0", "id": "req-1", "result": task_json()}));
    assert!(matches!(ok.outcome, Outcome::Result(ref r) if matches!(**r, AgentReply::Task(_))));
    let err: Response = round_trip(json!({
        "jsonrpc": "2.0", "id": null,
        "error": {"code": -32001, "message": "task not found", "data": {"id": "t"}}
    }));
    assert!(matches!(err.outcome, Outcome::Error(ref e) if e.code == codes::TASK_NOT_FOUND));
}

#[test]
fn error_codes_are_the_a2a_ones() {
    assert_eq!(
        [
            codes::PARSE_ERROR,
            codes::INVALID_REQUEST,
            codes::METHOD_NOT_FOUND,
            codes::INVALID_PARAMS,
            codes::INTERNAL_ERROR,
            codes::TASK_NOT_FOUND,
            codes::TASK_NOT_CANCELABLE,
            codes::PUSH_NOTIFICATION_NOT_SUPPORTED,
            codes::UNSUPPORTED_OPERATION,
            codes::CONTENT_TYPE_NOT_SUPPORTED,
            codes::INVALID_AGENT_RESPONSE,
            codes::AUTHENTICATED_EXTENDED_CARD_NOT_CONFIGURED,
        ],
        [
            -32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003, -32004, -32005, -32006,
            -32007
        ]
    );
}
