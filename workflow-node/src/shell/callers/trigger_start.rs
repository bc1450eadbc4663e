//! A trigger's event taken, for every way one arrives (a message of an event trigger, a
//! webhook's delivery, a dead letter replayed): the decision ([`decide`]: the condition,
//! the input, the de-duplication key), the input checked, and the start through the one
//! start path (`start::publish_start`) under the caller name `trigger:{name}` with the
//! key as task id, so the same event, however often it comes and by whichever way, is
//! one run.

use std::sync::Arc;

use messages::jsonrpc::codes;
use serde_json::{Map, Value};

use crate::core::ExecutionId;
use crate::definition::{Trigger, Workflow};
use crate::shell::callers::signals::{self, Sender};
use crate::shell::callers::start::{check_input, publish_start};
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::envelope::Caller;
use crate::shell::run::names;

/// The longest de-duplication key (it becomes a task id).
const MAX_KEY: usize = 256;

/// What one message comes to, decided without I/O.
#[derive(Debug, PartialEq)]
pub(in crate::shell) enum Taken {
    /// The condition is false: nothing starts.
    Ignored,
    /// Start the run with this task id and input.
    Start {
        /// The de-duplication key.
        task: String,
        /// The run's input.
        input: Value,
    },
    /// Deliver it as a signal to the run waiting under `key`.
    Signal {
        /// The key the run's wait node waits under.
        key: String,
        /// The signal's id (from the de-duplication key).
        id: String,
        /// The payload.
        data: Value,
    },
    /// It can never start a run: park it.
    Poison(String),
}

/// The decision for one event (`scope`, see [`Trigger::scope`]); `default_key` is its
/// de-duplication key when the trigger names none (a message's stream and sequence, a
/// delivery's body digest).
pub(in crate::shell) fn decide(
    trigger: &Trigger,
    scope: &Map<String, Value>,
    default_key: &str,
) -> Taken {
    if let Some(condition) = &trigger.condition {
        match condition.evaluate(scope) {
            Ok(true) => {}
            Ok(false) => return Taken::Ignored,
            Err(e) => return Taken::Poison(format!("the condition fails on it: {e}")),
        }
    }
    let input = match &trigger.input {
        Some(t) => match t.resolve(scope) {
            Ok(v) => v,
            Err(e) => return Taken::Poison(format!("the input fails on it: {e}")),
        },
        None => scope["event"]["payload"].clone(),
    };
    let task = match &trigger.dedup_key {
        Some(t) => match t.resolve(scope) {
            Ok(Value::Null) => return Taken::Poison("its dedup_key is null".into()),
            Ok(v) => workflow_expr::to_text(&v).into_owned(),
            Err(e) => return Taken::Poison(format!("the dedup_key fails on it: {e}")),
        },
        None => default_key.to_string(),
    };
    if task.is_empty() || task.len() > MAX_KEY {
        return Taken::Poison(format!(
            "its dedup_key is empty or longer than {MAX_KEY} bytes"
        ));
    }
    let Some(route) = &trigger.signal else {
        return Taken::Start { task, input };
    };
    let key = match route.key.resolve(scope) {
        Ok(Value::Null) => return Taken::Poison("its key is null".into()),
        Ok(v) => workflow_expr::to_text(&v).into_owned(),
        Err(e) => return Taken::Poison(format!("the key fails on it: {e}")),
    };
    let id = if messages::signal::valid_signal_id(&task) {
        task
    } else {
        use sha2::Digest;
        hex::encode(&sha2::Sha256::digest(task.as_bytes())[..16])
    };
    Taken::Signal {
        key,
        id,
        data: input,
    }
}

/// What taking one event came to.
#[derive(Debug)]
pub(in crate::shell) enum Outcome {
    /// The condition is false: nothing started.
    Ignored,
    /// The run (its execution id) was started, or had been (`false`: a duplicate).
    Started(ExecutionId, bool),
    /// It was delivered as a signal to a waiting run.
    Signalled,
    /// It can never start a run: why.
    Poison(String),
    /// The start failed for the store: why (it may be taken again).
    Failed(String),
}

/// Takes one event (`scope`, see [`Trigger::scope`]) of `trigger`: decides, checks the
/// input, starts the run. `default_key` as for [`decide`].
pub(in crate::shell) async fn take_event(
    shared: &Shared,
    workflow: &Arc<Workflow>,
    trigger: &Trigger,
    scope: &Map<String, Value>,
    default_key: &str,
) -> Outcome {
    match decide(trigger, scope, default_key) {
        Taken::Ignored => Outcome::Ignored,
        Taken::Poison(why) => Outcome::Poison(why),
        Taken::Start { task, input } => match check_input(workflow, &input) {
            Err(why) => Outcome::Poison(why),
            Ok(()) => match start(shared, workflow, trigger, &task, input).await {
                Ok((stored, execution)) => Outcome::Started(execution, stored),
                Err(e) => Outcome::Failed(format!("the run could not be started: {e}")),
            },
        },
        Taken::Signal { key, id, data } => route(shared, workflow, trigger, key, id, data).await,
    }
}

/// Delivers an event as a signal. A run not (yet) waiting under its key, or a store that
/// fails, may be taken again (and is parked after `max_deliveries`); a signal its run
/// refuses (its payload, the run ended) is poison.
async fn route(
    shared: &Shared,
    workflow: &Arc<Workflow>,
    trigger: &Trigger,
    key: String,
    id: String,
    data: Value,
) -> Outcome {
    let name = trigger
        .signal
        .as_ref()
        .map(|s| s.name.clone())
        .unwrap_or_default();
    let signal = messages::signal::WorkflowSignal {
        execution_id: None,
        key: Some(key),
        signal: name,
        data,
        signal_id: Some(id),
        by: None,
    };
    match signals::deliver(shared, workflow, Sender::Node, signal).await {
        Ok(_) => Outcome::Signalled,
        Err(e) => {
            let why = format!("the signal was not delivered: {}", e.message);
            if matches!(e.code, codes::TASK_NOT_FOUND | codes::INTERNAL_ERROR) {
                Outcome::Failed(why)
            } else {
                Outcome::Poison(why)
            }
        }
    }
}

/// A message's headers as an event shows them: name → first value.
pub(in crate::shell) fn headers_of(h: &Option<async_nats::HeaderMap>) -> Map<String, Value> {
    let mut headers = Map::new();
    for (name, values) in h.iter().flat_map(|h| h.iter()) {
        if let Some(v) = values.first() {
            headers.insert(name.to_string(), Value::String(v.as_str().to_string()));
        }
    }
    headers
}

/// The run `trigger` starts for de-duplication key `task`: its execution id is derived
/// from the workflow, the caller name `trigger:{name}` and the key.
pub(in crate::shell) fn execution_of(
    workflow: &Workflow,
    trigger: &Trigger,
    task: &str,
) -> ExecutionId {
    let caller_name = format!("trigger:{}", trigger.name);
    names::caller_execution_id(&workflow.name, Some(&caller_name), task)
}

/// Starts the run of `trigger` for key `task` through the one start path: whether it was
/// stored (not a duplicate), and its execution id.
pub(in crate::shell) async fn start(
    shared: &Shared,
    workflow: &Workflow,
    trigger: &Trigger,
    task: &str,
    input: Value,
) -> Result<(bool, ExecutionId)> {
    let execution = execution_of(workflow, trigger, task);
    let caller = Caller {
        request_id: Value::String(task.to_string()),
        name: Some(format!("trigger:{}", trigger.name)),
        ..Caller::default()
    };
    let (stored, _) = publish_start(shared, workflow, &execution, &caller, input).await?;
    Ok((stored, execution))
}

#[cfg(test)]
mod tests {
    use super::{decide, Taken};
    use serde_json::{json, Map};

    fn trigger(fields: &str) -> crate::definition::Trigger {
        let text = format!(
            "name: T\nworkflow:\n  description: d\n  triggers:\n    - {{name: t, subject: s.>, {fields}}}\n  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
        );
        let wf = crate::definition::parse_str(&text, "t.yaml").unwrap();
        wf.triggers[0].clone()
    }

    fn event(payload: &str) -> Map<String, serde_json::Value> {
        let mut h = Map::new();
        h.insert("X-User".into(), json!("ann"));
        crate::definition::Trigger::scope("s.x", payload.as_bytes(), h, 9)
    }

    #[test]
    fn a_message_starts_is_ignored_or_is_poison() {
        let t = trigger("condition: '{{event.payload.n}} > 1', input: {n: '{{event.payload.n}}', by: '{{event.headers.X-User}}'}, dedup_key: '{{event.payload.id}}'");
        let start = decide(&t, &event(r#"{"n": 2, "id": "k"}"#), "S-9");
        let input = json!({"n": 2, "by": "ann"});
        assert_eq!(
            start,
            Taken::Start {
                task: "k".into(),
                input
            }
        );
        assert_eq!(
            decide(&t, &event(r#"{"n": 1, "id": "k"}"#), "S-9"),
            Taken::Ignored
        );
        let null_key = decide(&t, &event(r#"{"n": 2}"#), "S-9");
        assert!(
            matches!(null_key, Taken::Poison(ref why) if why.contains("null")),
            "{null_key:?}"
        );
        let long = format!(r#"{{"n": 2, "id": "{}"}}"#, "x".repeat(300));
        assert!(matches!(decide(&t, &event(&long), "S-9"), Taken::Poison(_)));
        // Without a key, the message itself is the key; without an input, its payload.
        let plain = trigger("max_deliveries: 2");
        let start = decide(&plain, &event("text"), "S-9");
        assert_eq!(
            start,
            Taken::Start {
                task: "S-9".into(),
                input: json!("text")
            }
        );
    }
}
