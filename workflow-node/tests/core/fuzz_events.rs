//! Fuzzing of what the node reads back from NATS: event
//! envelopes from a workflow's stream, run records from KV, agents' replies and request
//! inputs. Arbitrary bytes, and real ones (from runs of generated workflows on the
//! simulator) mutated at random. Everything decodes or is refused with a message; what
//! decodes writes back to itself; nesting is bounded; the core fails a node whose input
//! would nest too deep instead of making a record nobody can read.
//!
//! `cargo test` runs a bounded number of cases; `FUZZ_CASES=20000 cargo test -p
//! workflow-node --test fuzz_events` runs more.

use messages::a2a::{AgentReply, Message, Part, Role, Task, TaskState, TaskStatus};
use messages::jsonrpc::Response;
use messages::workflow::WorkflowNodeResult;
use proptest::prelude::*;
use serde_json::{json, Value};
use workflow_node::core::sim::{Reply, Sim};
use workflow_node::core::{Command, Event, Execution, ExecutionId, Millis, NodeStatus, Progress};
use workflow_node::limits::MAX_JSON_DEPTH;
use workflow_node::shell::run::record::OutboxEntry;
use workflow_node::shell::run::wire::{interpret_reply, request_input, ReplyMeaning};
use workflow_node::shell::{Caller, Envelope, RunRecord};

#[allow(dead_code)]
use crate::support::workflows;

use crate::support::fuzz::{config, json_value, mutate, mutation, nested};

/// A run of a generated workflow on the simulator, stopped after `events` events: its
/// record (with the last commands in the outbox) and its events as envelopes.
fn run(
    spec: &workflows::WorkflowSpec,
    events: usize,
    outputs: &[Value],
) -> (RunRecord, Vec<Envelope>) {
    let (yaml, input) = workflows::build(spec);
    let workflow = workflows::load(&yaml);
    let mut sim = Sim::new(&workflow);
    for (i, name) in ["A", "B", "C", "X"].into_iter().enumerate() {
        let output = outputs.get(i).cloned().unwrap_or(Value::Null);
        sim = sim.agent(name, move |_| Reply::ok(output.clone()));
    }
    sim.max_events = events;
    sim.run(input.clone());
    let caller = Caller {
        reply_to: Some("_INBOX.x".into()),
        request_id: json!("r-1"),
        call_depth: 1,
        name: Some("fuzz".into()),
        ..Caller::default()
    };
    let mut record = RunRecord::new(sim.state.clone(), caller.clone());
    record.outbox.push(OutboxEntry {
        seq: 7,
        at: Millis(1),
        commands: sim.commands.iter().rev().take(3).map(thin).collect(),
        results: Vec::new(),
        history: None,
        spans: Vec::new(),
        wake: None,
        group: Vec::new(),
        more_history: Vec::new(),
        timers_in_wake: true,
    });
    let mut envelopes: Vec<Envelope> = sim
        .events
        .iter()
        .map(|(_, e)| Envelope::event(e.clone()))
        .collect();
    envelopes.push(Envelope {
        event: Event::Started { input },
        caller: Some(caller),
        attach: true,
        definition: Some("abc".into()),
        wake: None,
    });
    (record, envelopes)
}

/// A command as the outbox keeps it: outputs are left out (and taken back from the state
/// on a replay), so a node's `null` output is never written there as a missing one.
fn thin(command: &Command) -> Command {
    match command.clone() {
        Command::Progress(Progress::NodeFinished {
            node_id,
            status,
            error,
            condition_result,
            selected_branch,
            ..
        }) => Command::Progress(Progress::NodeFinished {
            node_id,
            status,
            output: None,
            error,
            condition_result,
            selected_branch,
        }),
        other => other,
    }
}

fn bytes_of<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("encodes")
}

/// Decodes `bytes` as `T`: refused with a message, or read, in which case it writes back
/// to bytes that read as the same value.
fn exercise<T>(bytes: &[u8]) -> Result<(), TestCaseError>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    match serde_json::from_slice::<T>(bytes) {
        Ok(read) => {
            let again = bytes_of(&read);
            let reread: T = serde_json::from_slice(&again)
                .map_err(|e| TestCaseError::fail(format!("written, not read back: {e}")))?;
            prop_assert_eq!(
                serde_json::to_value(&reread).unwrap(),
                serde_json::to_value(&read).unwrap()
            );
        }
        Err(e) => prop_assert!(e.to_string().len() > 5, "unclear: {}", e),
    }
    Ok(())
}

/// What interpreting a reply may give: no panic, a failure with a message, an output that
/// nests at most `max_json_depth`.
fn exercise_reply(bytes: &[u8]) -> Result<(), TestCaseError> {
    match interpret_reply(bytes) {
        None | Some(ReplyMeaning::Artifact(_)) => {}
        Some(ReplyMeaning::Output(v)) => {
            prop_assert!(!workflow_expr::limits::deeper_than(&v, MAX_JSON_DEPTH))
        }
        Some(ReplyMeaning::Failed(f)) => prop_assert!(f.message.len() > 5, "{:?}", f),
    }
    Ok(())
}

/// An agent's final reply with `result` in a `workflow_node_result`, or `output` inline.
fn reply_bytes(output: Value, as_result: bool, state: TaskState) -> Vec<u8> {
    let part = if as_result {
        Part::data(
            match serde_json::to_value(WorkflowNodeResult::success(output)).unwrap() {
                Value::Object(m) => m,
                _ => unreachable!(),
            },
        )
    } else {
        messages::payload::wrap(output)
    };
    let task = Task {
        id: "t".into(),
        context_id: "c".into(),
        status: TaskStatus {
            state,
            message: Some(Message::new("m", Role::Agent, vec![part])),
            timestamp: None,
        },
        artifacts: None,
        metadata: None,
    };
    bytes_of(&Response::result("1".into(), AgentReply::Task(task)))
}

fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        prop::sample::select(vec![
            "status", "event", "caller", "node", "attempt", "output", "type", "kind"
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,8}",
    ]
}

fn value() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        4 => json_value(),
        1 => Just(json!("running")),
        1 => Just(json!("Success")),
        1 => Just(json!({"node": "n0", "slot": "single"})),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(-1)),
        1 => Just(nested(MAX_JSON_DEPTH + 1)),
    ]
}

fn outputs() -> impl Strategy<Value = Vec<Value>> {
    prop::collection::vec(json_value(), 4)
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        exercise::<Envelope>(&bytes)?;
        exercise::<RunRecord>(&bytes)?;
        exercise_reply(&bytes)?;
    }

    /// Records and envelopes of real runs write back to themselves.
    #[test]
    fn real_records_and_envelopes_round_trip(spec in workflows::workflow_spec(), events in 1usize..60, outs in outputs()) {
        let (record, envelopes) = run(&spec, events, &outs);
        let read: RunRecord = serde_json::from_slice(&bytes_of(&record)).unwrap();
        prop_assert_eq!(read, record);
        for e in envelopes {
            exercise::<Envelope>(&bytes_of(&e))?;
        }
    }

    #[test]
    fn mutated_records_and_envelopes(
        spec in workflows::workflow_spec(),
        events in 1usize..60,
        outs in outputs(),
        pick in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(key(), value()), 1..4),
    ) {
        let (record, envelopes) = run(&spec, events, &outs);
        let mut record = serde_json::to_value(&record).unwrap();
        let mut envelope = serde_json::to_value(&envelopes[pick.index(envelopes.len())]).unwrap();
        for m in &mutations {
            mutate(&mut record, m);
            mutate(&mut envelope, m);
        }
        exercise::<RunRecord>(&bytes_of(&record))?;
        exercise::<Envelope>(&bytes_of(&envelope))?;
    }

    #[test]
    fn replies(output in json_value(), as_result in any::<bool>(), failed in any::<bool>(),
               cut in any::<prop::sample::Index>(), mutations in prop::collection::vec(mutation(key(), value()), 0..3)) {
        let state = if failed { TaskState::Failed } else { TaskState::Completed };
        let bytes = reply_bytes(output.clone(), as_result, state);
        match interpret_reply(&bytes) {
            Some(ReplyMeaning::Output(v)) => prop_assert_eq!(v, output),
            other => prop_assert!(failed, "{:?}", other),
        }
        exercise_reply(&bytes[..cut.index(bytes.len())])?;
        let mut doc: Value = serde_json::from_slice(&bytes).unwrap();
        for m in &mutations {
            mutate(&mut doc, m);
        }
        exercise_reply(&bytes_of(&doc))?;
    }

    #[test]
    fn request_inputs(message in json_value(), parts in prop::collection::vec(json_value(), 0..3)) {
        let mut doc = json!({"kind": "message", "messageId": "m", "role": "user", "parts": []});
        for p in parts {
            doc["parts"].as_array_mut().unwrap().push(json!({"kind": "data", "data": {"value": p}}));
        }
        doc["parts"].as_array_mut().unwrap().push(json!({"kind": "file", "file": {"uri": message.to_string()}}));
        if let Ok(m) = serde_json::from_value::<Message>(doc) {
            if let Err(e) = request_input(&m, "mesh_artifacts") {
                prop_assert!(e.len() > 5, "{}", e);
            }
        }
    }
}

/// Depth 100 000 in an envelope, a record and a reply: refused by the parser, clearly.
#[test]
fn nesting_100_000_deep_is_refused() {
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let start =
        serde_json::to_string(&Envelope::event(Event::Started { input: json!("@") })).unwrap();
    let envelope = start.replace("\"@\"", &deep);
    assert_ne!(envelope, start);
    let e = serde_json::from_slice::<Envelope>(envelope.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("recursion limit exceeded"), "{e}");
    let mut state = Execution::new(ExecutionId("x".into()), "w");
    state.input = json!("@");
    let record = bytes_of(&RunRecord::new(state, Caller::default()));
    let record = String::from_utf8(record).unwrap().replace("\"@\"", &deep);
    let e = RunRecord::from_entry(record.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("recursion limit exceeded"), "{e}");
    let reply = String::from_utf8(reply_bytes(json!("@"), true, TaskState::Completed))
        .unwrap()
        .replace("\"@\"", &deep);
    let Some(ReplyMeaning::Failed(f)) = interpret_reply(reply.as_bytes()) else {
        panic!("not a failure")
    };
    assert!(
        f.message.contains("nests deeper than 128 levels"),
        "{}",
        f.message
    );
}

/// An output deeper than `max_json_depth` fails the call: held in the run's record, a few
/// levels deeper, it would make the record unreadable.
#[test]
fn replies_deeper_than_max_json_depth_fail_the_call() {
    for as_result in [true, false] {
        let ok = reply_bytes(nested(MAX_JSON_DEPTH), as_result, TaskState::Completed);
        assert!(matches!(
            interpret_reply(&ok),
            Some(ReplyMeaning::Output(_))
        ));
        let deep = reply_bytes(nested(MAX_JSON_DEPTH + 1), as_result, TaskState::Completed);
        let Some(ReplyMeaning::Failed(f)) = interpret_reply(&deep) else {
            panic!("not a failure")
        };
        assert_eq!(
            f.message,
            "the agent's reply was refused: the nesting depth of the output exceeds max_json_depth (64)"
        );
    }
}

/// A template that would make an input deeper than `max_json_depth` fails its node with a
/// message; the run's record stays readable.
#[test]
fn inputs_resolved_too_deep_fail_the_node() {
    let yaml = r#"
name: Nest
workflow:
  description: wraps its input twice
  nodes:
    - {id: wrap, type: agent, agent_name: A, input: {a: {b: "{{workflow.input.x}}"}}}
  output_mapping: {out: "{{wrap.output}}"}
"#;
    let workflow = workflows::load(yaml);
    let mut sim = Sim::new(&workflow).agent("A", |d| Reply::ok(d.input.clone()));
    sim.run(json!({"x": nested(MAX_JSON_DEPTH - 2)}));
    assert_eq!(sim.state.node_status("wrap"), NodeStatus::Success);
    let mut sim = Sim::new(&workflow).agent("A", |d| Reply::ok(d.input.clone()));
    sim.run(json!({"x": nested(MAX_JSON_DEPTH - 1)}));
    assert_eq!(sim.state.node_status("wrap"), NodeStatus::Failure);
    let error = serde_json::to_string(&sim.state.error).unwrap();
    assert!(
        error.contains("nesting depth of the value a template resolves to exceeds the limit of 64"),
        "{error}"
    );
    let record = RunRecord::new(sim.state.clone(), Caller::default());
    let read: RunRecord = serde_json::from_slice(&bytes_of(&record)).unwrap();
    assert_eq!(read, record);
}
