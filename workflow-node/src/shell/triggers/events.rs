//! Event triggers: each replica pulls a trigger's messages through one durable consumer
//! shared by the workflow's replicas (on the trigger's `stream`, or on a stream the node
//! makes to capture its `subject`), so a message published while no replica runs waits in
//! the stream. For each message: the condition, then the input and the de-duplication
//! key; the run starts through the one start path (`start::publish_start`) with the
//! caller name `trigger:{name}` and the key as its task id, so a redelivered or
//! re-published event starts no second run; the message is acked after the start is
//! stored.
//!
//! A message that cannot start a run (a template or condition that fails on it, an input
//! the schema refuses, a key too long) is parked at once as a dead letter on
//! `{ns}.dead.wf.{workflow}.{trigger}` (stream `{ns}_wf_dead_letters`), with its original
//! subject, headers and the reason, then acked; one that keeps failing for the store is
//! taken again, and parked after `max_deliveries`. Nothing is retried for ever.
//!
//! A trigger with `signal` routes its event instead to the run whose wait node waits under
//! the event's key (`callers::signals`), with the de-duplication key as the signal's id;
//! a key no run waits under yet is tried again, as a failing store is.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, AckKind};
use futures::StreamExt;
use serde_json::{Map, Value};

use crate::definition::{Trigger, Workflow};
use crate::shell::callers::signals::{self, Sender};
use crate::shell::callers::start::{check_input, publish_start};
use crate::shell::context::Shared;
use crate::shell::error::{Context, Result};
use crate::shell::mesh::setup as mesh_setup;
use crate::shell::run::envelope::Caller;
use crate::shell::run::names::{self, dead};
use messages::jsonrpc::codes;

/// The longest de-duplication key (it becomes a task id).
const MAX_KEY: usize = 256;

/// How long a message may be in hand before the server gives it to another replica.
const ACK_WAIT: Duration = Duration::from_secs(30);

/// Makes (or finds) the dead-letter stream.
pub(in crate::shell) async fn dead_letters(shared: &Shared) -> Result<()> {
    let name = names::dead_letter_stream(&shared.ns);
    let config = stream::Config {
        name: name.clone(),
        subjects: vec![format!("{}.dead.wf.>", shared.ns)],
        storage: stream::StorageType::File,
        num_replicas: shared.config.replicas,
        max_age: shared.config.retention,
        max_bytes: mesh_setup::bytes_limit(shared.config.store_limits.history / 4),
        ..Default::default()
    };
    shared
        .js
        .get_or_create_stream(config)
        .await
        .context(|| format!("making stream {name}"))?;
    Ok(())
}

/// The durable consumer of `trigger`, made (with its stream, when the node makes it) if
/// it is missing.
pub(in crate::shell) async fn consumer(
    shared: &Shared,
    workflow: &Workflow,
    trigger: &Trigger,
) -> Result<jetstream::consumer::Consumer<pull::Config>> {
    let stream_name = match &trigger.stream {
        Some(s) => s.clone(),
        None => names::trigger_stream(&shared.ns, &workflow.name, &trigger.name),
    };
    let stream = match &trigger.stream {
        Some(_) => shared.js.get_stream(&stream_name).await.context(|| {
            format!(
                "trigger {}: stream {stream_name} (it must exist)",
                trigger.name
            )
        })?,
        None => {
            let config = stream::Config {
                name: stream_name.clone(),
                subjects: trigger.subject.iter().cloned().collect(),
                storage: stream::StorageType::File,
                num_replicas: shared.config.replicas,
                max_age: shared.config.retention,
                max_bytes: mesh_setup::bytes_limit(shared.config.store_limits.events),
                ..Default::default()
            };
            shared
                .js
                .get_or_create_stream(config)
                .await
                .context(|| format!("making stream {stream_name}"))?
        }
    };
    let durable = names::trigger_consumer(&workflow.name, &trigger.name);
    let config = pull::Config {
        durable_name: Some(durable.clone()),
        filter_subject: trigger.subject.clone().unwrap_or_default(),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: ACK_WAIT,
        ..Default::default()
    };
    stream
        .get_or_create_consumer(&durable, config)
        .await
        .context(|| format!("making consumer {durable} on {stream_name}"))
}

/// Takes `trigger`'s messages until the task is stopped.
pub(in crate::shell) async fn run(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    trigger: Trigger,
    consumer: jetstream::consumer::Consumer<pull::Config>,
) {
    loop {
        let messages = match consumer.messages().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(trigger = %trigger.name, "pulling messages: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut messages = messages;
        while let Some(message) = messages.next().await {
            match message {
                Ok(m) => take(&shared, &workflow, &trigger, m).await,
                Err(e) => {
                    tracing::warn!(trigger = %trigger.name, "pulling messages: {e}");
                    break;
                }
            }
        }
    }
}

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

/// The decision for one event (`scope`, see [`Trigger::scope`]) read from `stream` at
/// `sequence`.
pub(in crate::shell) fn decide(
    trigger: &Trigger,
    scope: &Map<String, Value>,
    stream: &str,
    sequence: u64,
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
        None => format!("{stream}-{sequence}"),
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

/// Takes one message: start, ignore or park, then ack.
async fn take(shared: &Shared, workflow: &Arc<Workflow>, trigger: &Trigger, m: jetstream::Message) {
    let Ok(info) = m.info() else {
        let _ = m.ack().await;
        return;
    };
    let (stream, sequence, delivered) = (
        info.stream.to_string(),
        info.stream_sequence,
        info.delivered,
    );
    let mut headers = Map::new();
    if let Some(h) = &m.headers {
        for (name, values) in h.iter() {
            if let Some(v) = values.first() {
                headers.insert(name.to_string(), Value::String(v.as_str().to_string()));
            }
        }
    }
    let scope = Trigger::scope(m.subject.as_str(), &m.payload, headers, sequence);
    let outcome = match decide(trigger, &scope, &stream, sequence) {
        Taken::Ignored => Ok(()),
        Taken::Poison(why) => Err((why, true)),
        Taken::Start { task, input } => match check_input(workflow, &input) {
            Err(why) => Err((why, true)),
            Ok(()) => start(shared, workflow, trigger, &task, input)
                .await
                .map_err(|e| (format!("the run could not be started: {e}"), false)),
        },
        Taken::Signal { key, id, data } => route(shared, workflow, trigger, key, id, data).await,
    };
    match outcome {
        Ok(()) => {
            let _ = m.ack().await;
        }
        Err((why, poison)) if poison || delivered >= trigger.max_deliveries as i64 => {
            match park(shared, workflow, trigger, &m, &why).await {
                Ok(()) => {
                    let _ = m.ack_with(AckKind::Term).await;
                }
                Err(e) => {
                    tracing::warn!(trigger = %trigger.name, "parking a dead letter: {e}");
                    let _ = m.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await;
                }
            }
        }
        Err((why, _)) => {
            tracing::warn!(trigger = %trigger.name, "taking a message again: {why}");
            let _ = m.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await;
        }
    }
}

/// Delivers an event as a signal. A run not (yet) waiting under its key, or a store that
/// fails, is tried again (and parked after `max_deliveries`); a signal its run refuses
/// (its payload, the run ended) is parked at once.
async fn route(
    shared: &Shared,
    workflow: &Arc<Workflow>,
    trigger: &Trigger,
    key: String,
    id: String,
    data: Value,
) -> std::result::Result<(), (String, bool)> {
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
        Ok(_) => Ok(()),
        Err(e) => {
            let again = matches!(e.code, codes::TASK_NOT_FOUND | codes::INTERNAL_ERROR);
            Err((
                format!("the signal was not delivered: {}", e.message),
                !again,
            ))
        }
    }
}

async fn start(
    shared: &Shared,
    workflow: &Workflow,
    trigger: &Trigger,
    task: &str,
    input: Value,
) -> Result<()> {
    let caller_name = format!("trigger:{}", trigger.name);
    let execution = names::caller_execution_id(&workflow.name, Some(&caller_name), task);
    let caller = Caller {
        request_id: Value::String(task.to_string()),
        name: Some(caller_name),
        ..Caller::default()
    };
    publish_start(shared, workflow, &execution, &caller, input).await?;
    Ok(())
}

/// Parks `m` as a dead letter of `trigger`, with why.
async fn park(
    shared: &Shared,
    workflow: &Workflow,
    trigger: &Trigger,
    m: &jetstream::Message,
    why: &str,
) -> Result<()> {
    let mut h = m.headers.clone().unwrap_or_default();
    h.insert(dead::SUBJECT, m.subject.as_str());
    // A header value is one line.
    let why: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(1000)
        .collect();
    h.insert(dead::REASON, why.as_str());
    h.insert(
        dead::TRIGGER,
        format!("{}.{}", workflow.name, trigger.name).as_str(),
    );
    let subject = names::dead_letter_subject(&shared.ns, &workflow.name, &trigger.name);
    let ack = shared
        .js
        .publish_with_headers(subject, h, m.payload.clone())
        .await
        .context(|| "parking a dead letter".into())?;
    ack.await.context(|| "parking a dead letter".into())?;
    tracing::warn!(trigger = %trigger.name, "a message was parked as a dead letter: {why}");
    Ok(())
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
        let start = decide(&t, &event(r#"{"n": 2, "id": "k"}"#), "S", 9);
        let input = json!({"n": 2, "by": "ann"});
        assert_eq!(
            start,
            Taken::Start {
                task: "k".into(),
                input
            }
        );
        assert_eq!(
            decide(&t, &event(r#"{"n": 1, "id": "k"}"#), "S", 9),
            Taken::Ignored
        );
        let null_key = decide(&t, &event(r#"{"n": 2}"#), "S", 9);
        assert!(
            matches!(null_key, Taken::Poison(ref why) if why.contains("null")),
            "{null_key:?}"
        );
        let long = format!(r#"{{"n": 2, "id": "{}"}}"#, "x".repeat(300));
        assert!(matches!(
            decide(&t, &event(&long), "S", 9),
            Taken::Poison(_)
        ));
        // Without a key, the message itself is the key; without an input, its payload.
        let plain = trigger("max_deliveries: 2");
        let start = decide(&plain, &event("text"), "S", 9);
        assert_eq!(
            start,
            Taken::Start {
                task: "S-9".into(),
                input: json!("text")
            }
        );
    }
}
