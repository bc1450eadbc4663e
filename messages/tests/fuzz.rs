//! Fuzzing of JSON-RPC requests and replies, which come from any client on the mesh: arbitrary
//! bytes and generated envelopes. Every input is read or refused with an error response that
//! says why; nothing panics, and nesting is refused at serde_json's 128 levels with a message
//! that says so.
//!
//! `cargo test` runs a bounded number of cases; `FUZZ_CASES=100000 cargo test -p messages
//! --test fuzz` runs more.

use messages::jsonrpc::codes;
use messages::reply::{decode_reply, final_task, output_part, read_task, ReplyError};
use messages::{Outcome, Request, Response};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Cases per property: `FUZZ_CASES`, or `default` (what a plain `cargo test` runs).
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}

const CODES: [i64; 5] = [
    codes::PARSE_ERROR,
    codes::INVALID_REQUEST,
    codes::METHOD_NOT_FOUND,
    codes::INVALID_PARAMS,
    codes::UNSUPPORTED_OPERATION,
];

/// Reads `bytes` as a request; a refusal must be a JSON-RPC error with a known code and a
/// message, that itself encodes and reads back. A request read must write back to itself.
fn exercise_request(bytes: &[u8]) -> Result<(), TestCaseError> {
    match Request::from_slice(bytes) {
        Ok(request) => {
            let written = serde_json::to_vec(&request).expect("a request encodes");
            let again = Request::from_slice(&written).map_err(|e| {
                TestCaseError::fail(format!("a request written does not read back: {e:?}"))
            })?;
            prop_assert_eq!(again, request);
        }
        Err(response) => {
            let Outcome::Error(e) = &response.outcome else {
                return Err(TestCaseError::fail("a refusal that is not an error"));
            };
            prop_assert!(CODES.contains(&e.code), "code {}", e.code);
            prop_assert!(e.message.trim().len() > 3, "unclear: {:?}", e.message);
            let bytes = serde_json::to_vec(&*response).expect("an error response encodes");
            let back: Response = serde_json::from_slice(&bytes).expect("and reads back");
            prop_assert_eq!(&back, &*response);
        }
    }
    Ok(())
}

/// Reads `bytes` as a reply, through every step a caller takes.
fn exercise_reply(bytes: &[u8]) -> Result<(), TestCaseError> {
    match decode_reply(bytes) {
        Ok(reply) => {
            if let Some(task) = final_task(reply) {
                let _ = read_task(&task);
                if let Some(m) = &task.status.message {
                    let _ = output_part(&m.parts);
                }
            }
        }
        Err(e @ ReplyError::NotJsonRpc(_)) => {
            prop_assert!(e.to_string().len() > "not a JSON-RPC response: ".len())
        }
        Err(ReplyError::Rpc(_)) => {}
    }
    Ok(())
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(5, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value that is usually what `of` makes, sometimes anything (a wrong type).
fn mostly(of: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
    prop_oneof![8 => of, 1 => json_value()].boxed()
}

fn part() -> impl Strategy<Value = Value> {
    prop_oneof![
        ".{0,12}".prop_map(|t| json!({"kind": "text", "text": t})),
        json_value().prop_map(|v| json!({"kind": "data", "data": {"value": v}})),
        (json_value(), any::<bool>()).prop_map(|(v, wrapped)| {
            let meta = if wrapped {
                json!({"mesh_wrapped": true})
            } else {
                json!({})
            };
            json!({"kind": "data", "data": {"value": v}, "metadata": meta})
        }),
        "[a-z:/._-]{0,24}".prop_map(|u| json!({"kind": "file", "file": {"uri": u}})),
        "[A-Za-z0-9+/=]{0,12}".prop_map(|b| json!({"kind": "file", "file": {"bytes": b}})),
        (
            prop::sample::select(vec!["success", "failure", "error", "other"]),
            json_value()
        )
            .prop_map(|(s, v)| json!({"kind": "data", "data": {
                "type": "workflow_node_result", "status": s, "output": v,
                "error_message": "broke", "retry_count": 1}})),
        json_value().prop_map(|v| json!({"kind": "data", "data": {
            "type": "workflow_node_request", "node_id": v}})),
        json_value(),
    ]
}

fn message() -> impl Strategy<Value = Value> {
    (
        ".{0,8}",
        mostly(prop::sample::select(vec!["user", "agent"]).prop_map(Value::from)),
        prop::collection::vec(part(), 0..4),
        prop::option::of(".{0,8}"),
        prop::option::of(json_value()),
    )
        .prop_map(|(id, role, parts, task, metadata)| {
            let mut m = json!({"kind": "message", "messageId": id, "role": role, "parts": parts});
            if let Some(t) = task {
                m["taskId"] = json!(t);
            }
            if let Some(meta) = metadata {
                m["metadata"] = meta;
            }
            m
        })
}

fn request() -> impl Strategy<Value = Value> {
    let method = prop::sample::select(vec![
        "message/send",
        "message/stream",
        "tasks/get",
        "tasks/cancel",
        "tasks/resubscribe",
        "",
    ]);
    let params = prop_oneof![
        message().prop_map(|m| json!({"message": m})),
        ".{0,8}".prop_map(|id| json!({"id": id, "historyLength": 3})),
        json_value(),
    ];
    (
        mostly(Just(json!("2.0"))),
        mostly(prop_oneof![any::<i64>().prop_map(Value::from), ".{0,6}".prop_map(Value::from)]),
        mostly(method.prop_map(Value::from)),
        params,
    )
        .prop_map(|(v, id, method, params)| json!({"jsonrpc": v, "id": id, "method": method, "params": params}))
}

fn reply() -> impl Strategy<Value = Value> {
    let state = prop::sample::select(vec![
        "submitted",
        "working",
        "completed",
        "failed",
        "canceled",
        "rejected",
        "unknown",
        "done",
    ]);
    let result = prop_oneof![
        (
            ".{0,6}",
            state.clone(),
            prop::option::of(message()),
            prop::option::of(json_value())
        )
            .prop_map(|(id, s, m, artifacts)| {
                let mut status = json!({"state": s});
                if let Some(m) = m {
                    status["message"] = m;
                }
                let mut t = json!({"kind": "task", "id": id, "contextId": "c", "status": status});
                if let Some(a) = artifacts {
                    t["artifacts"] = a;
                }
                t
            }),
        message(),
        (state, any::<bool>()).prop_map(|(s, f)| json!({"kind": "status-update", "taskId": "t",
            "contextId": "c", "status": {"state": s}, "final": f})),
        json_value(),
    ];
    prop_oneof![
        (mostly(Just(json!("1"))), result)
            .prop_map(|(id, r)| json!({"jsonrpc": "2.0", "id": id, "result": r})),
        (any::<i64>(), ".{0,8}").prop_map(
            |(c, m)| json!({"jsonrpc": "2.0", "id": null, "error": {"code": c, "message": m}})
        ),
        json_value(),
    ]
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn arbitrary_bytes_as_requests_and_replies(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        exercise_request(&bytes)?;
        exercise_reply(&bytes)?;
    }

    #[test]
    fn generated_requests(value in request()) {
        exercise_request(&serde_json::to_vec(&value).unwrap())?;
    }

    #[test]
    fn generated_replies(value in reply()) {
        exercise_reply(&serde_json::to_vec(&value).unwrap())?;
    }

    #[test]
    fn truncated_and_mutated_requests(value in request(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = serde_json::to_vec(&value).unwrap();
        let at = cut.index(bytes.len());
        exercise_request(&bytes[..at])?;
        bytes[at] = byte;
        exercise_request(&bytes)?;
        exercise_reply(&bytes)?;
    }
}

/// Text nested `depth` levels deep at `at` inside a valid envelope.
fn nested_in(envelope: &str, depth: usize) -> Vec<u8> {
    let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    envelope.replace("@", &deep).into_bytes()
}

#[test]
fn nesting_100_000_deep_is_refused_clearly() {
    for envelope in [
        "@",
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"data","data":{"value":@}}]}}}"#,
    ] {
        let refused = Request::from_slice(&nested_in(envelope, 100_000)).unwrap_err();
        let Outcome::Error(e) = refused.outcome else {
            panic!("not an error")
        };
        assert_eq!(e.code, codes::PARSE_ERROR);
        assert!(
            e.message.contains("nests deeper than 128 levels"),
            "{}",
            e.message
        );
    }
    let reply = r#"{"jsonrpc":"2.0","id":"1","result":{"kind":"task","id":"t","contextId":"c","status":{"state":"completed","message":{"kind":"message","messageId":"m","role":"agent","parts":[{"kind":"data","data":{"value":@}}]}}}}"#;
    let err = decode_reply(&nested_in(reply, 100_000)).unwrap_err();
    assert!(
        err.to_string().contains("nests deeper than 128 levels"),
        "{err}"
    );
    // 100 levels of input inside the envelope still read.
    assert!(decode_reply(&nested_in(reply, 100)).is_ok());
}
