//! Which spans of a run an event ended, decided without I/O from the core's state before
//! and after the event (the core itself knows nothing of tracing).
//!
//! A run's spans are emitted when what they cover ends, with explicit start and end
//! times, by whichever replica processed that event; their ids are derived from the run
//! and what they cover (see `telemetry`), so spans emitted by different replicas, before
//! and after a crash, join one tree:
//!
//! ```text
//! caller's span (traceparent of the request)
//! └─ workflow.run                    the run, when it ends
//!    └─ workflow.node                a node (not a map's or loop's inner node)
//!       ├─ workflow.node             a map item or loop iteration of its inner node
//!       │  └─ agent.call             one attempt: the agent's spans nest under it
//!       └─ agent.call                an attempt of an agent/workflow node or fork branch
//! ```
//!
//! What the end of a span needs and the core's state does not keep (when each call in
//! flight and its current attempt started) is kept in the run's record, `call_times`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::core::{CallPhase, Event, Execution, Millis, RunStatus, Slot, TaskKey, TimerId};
use crate::definition::{Call, NodeId, NodeKind, NodeRole, Workflow};

/// What a span covers; its id is derived from this and the run's execution id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "span", rename_all = "snake_case")]
pub enum SpanKey {
    /// The run (`workflow.run`).
    Run,
    /// A node of the run (`workflow.node`).
    Node {
        /// The node.
        node: NodeId,
    },
    /// One map item or loop iteration of an inner node (`workflow.node`).
    Slot {
        /// The inner node's call for that item or iteration.
        task: TaskKey,
    },
    /// One attempt of a call (`agent.call`).
    Attempt {
        /// The call.
        task: TaskKey,
        /// The attempt (1-based).
        attempt: u32,
    },
}

impl SpanKey {
    /// The span's name.
    pub fn name(&self) -> &'static str {
        match self {
            SpanKey::Run => "workflow.run",
            SpanKey::Node { .. } | SpanKey::Slot { .. } => "workflow.node",
            SpanKey::Attempt { .. } => "agent.call",
        }
    }

    /// A text naming what the span covers within its run (its id is a hash of it).
    pub fn seed(&self) -> String {
        match self {
            SpanKey::Run => "run".into(),
            SpanKey::Node { node } => format!("node/{node}"),
            SpanKey::Slot { task } => format!("slot/{task}"),
            SpanKey::Attempt { task, attempt } => format!("call/{task}/{attempt}"),
        }
    }

    /// The span an attempt of `task` nests under: its map item or loop iteration, else
    /// its node (a fork branch's is the fork).
    pub fn attempt_parent(task: &TaskKey) -> SpanKey {
        match task.slot {
            Slot::Item(_) | Slot::Iteration(_) => SpanKey::Slot { task: task.clone() },
            Slot::Single | Slot::Branch(_) => SpanKey::Node {
                node: task.node.clone(),
            },
        }
    }
}

/// A span of a run that has ended: what the worker emits once the event's commit holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedSpan {
    /// What it covers.
    pub key: SpanKey,
    /// The span it nests under; `None` for the run, which nests under its caller's span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SpanKey>,
    /// When it started.
    pub start: Millis,
    /// When it ended.
    pub end: Millis,
    /// Its attributes (strings, numbers, booleans).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, Value>,
    /// Why it failed, when it did (the span's error status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// When a call in flight started, and its current attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallTimes {
    /// When the call was created (queued or dispatched): its item's or iteration's start.
    pub first: Millis,
    /// The attempt last dispatched (0 before the first).
    pub attempt: u32,
    /// When that attempt was dispatched.
    pub started: Millis,
}

/// How an attempt ended.
struct AttemptEnd {
    outcome: &'static str,
    kind: Option<String>,
    message: Option<String>,
}

/// The spans that applying `events` (one, or the timers one wake fired) at `now` ended,
/// from the state `before` and `after`
/// it; `times` (the record's `call_times`) is brought up to date: calls and attempts that
/// started are added, ended ones removed.
pub(crate) fn ended(
    workflow: &Workflow,
    before: &Execution,
    after: &Execution,
    events: &[Event],
    times: &mut BTreeMap<TaskKey, CallTimes>,
    now: Millis,
) -> Vec<EndedSpan> {
    let mut spans = Vec::new();
    let running = |st: &Execution, key: &TaskKey| match st.calls.get(key) {
        Some(c) if matches!(c.phase, CallPhase::Running { .. }) => Some(c.attempt),
        _ => None,
    };
    // Attempts that ended: running before, not (as the same attempt) after.
    let mut last_end: BTreeMap<TaskKey, &'static str> = BTreeMap::new();
    for (key, call) in &before.calls {
        let CallPhase::Running { deadline } = call.phase else {
            continue;
        };
        let attempt = call.attempt;
        if running(after, key) == Some(attempt) {
            continue;
        }
        let end = attempt_end(workflow, key, attempt, events);
        last_end.insert(key.clone(), end.outcome);
        let start = times
            .get(key)
            .filter(|t| t.attempt == attempt)
            .map(|t| t.started)
            .unwrap_or_else(|| guessed_start(workflow, key, deadline, before, now));
        spans.push(attempt_span(workflow, key, attempt, start, now, end));
    }
    // Calls that ended: map items and loop iterations end their own span.
    for key in before.calls.keys() {
        if after.calls.contains_key(key) {
            continue;
        }
        let t = times.remove(key);
        if matches!(key.slot, Slot::Item(_) | Slot::Iteration(_)) {
            let outcome = last_end.get(key).copied().unwrap_or("cancelled");
            let start = t.map_or(now, |t| t.first);
            spans.push(slot_span(workflow, key, start, now, outcome));
        }
    }
    // Calls and attempts that started.
    for (key, call) in &after.calls {
        let entry = times.entry(key.clone()).or_insert(CallTimes {
            first: now,
            attempt: 0,
            started: now,
        });
        if matches!(call.phase, CallPhase::Running { .. })
            && running(before, key) != Some(call.attempt)
        {
            entry.attempt = call.attempt;
            entry.started = now;
        }
    }
    times.retain(|key, _| after.calls.contains_key(key));
    // Nodes that ended (inner nodes end per item or iteration, above; skipped nodes never
    // ran).
    for (id, node) in &after.nodes {
        if !node.status.is_terminal() || before.node_status(id).is_terminal() {
            continue;
        }
        let Some(started) = node.started_at else {
            continue;
        };
        let Some(&idx) = workflow.graph.index.get(id) else {
            continue;
        };
        if matches!(workflow.graph.roles[idx], NodeRole::Inner { .. }) {
            continue;
        }
        let def = &workflow.nodes[idx];
        let mut attributes = attrs([
            ("node.id", json!(id)),
            ("node.type", json!(def.kind.type_name())),
            ("node.status", json!(node.status.as_str())),
            ("workflow.execution_id", json!(after.id.0)),
        ]);
        if let NodeKind::Call(call) = &def.kind {
            attributes.insert("agent.name".into(), json!(call.target.agent_name()));
        }
        if workflow.graph.roles[idx] == NodeRole::ExitHandler {
            attributes.insert("node.exit_handler".into(), json!(true));
        }
        if let Some(kind) = &node.error_kind {
            attributes.insert("error.kind".into(), json!(kind));
        }
        let error = node
            .status
            .is_failed()
            .then(|| node.error.as_deref().map_or_else(|| "failed".into(), clip));
        if let (Some(e), false) = (&node.error, node.status.is_failed()) {
            attributes.insert("node.reason".into(), json!(clip(e)));
        }
        spans.push(EndedSpan {
            key: SpanKey::Node { node: id.clone() },
            parent: Some(SpanKey::Run),
            start: started,
            end: node.ended_at.unwrap_or(now).max(started),
            attributes,
            error,
        });
    }
    // The run, once it ended.
    if after.status.is_terminal() && !before.status.is_terminal() {
        let start = if after.started { after.started_at } else { now };
        let mut attributes = attrs([
            ("workflow.name", json!(after.workflow)),
            ("workflow.execution_id", json!(after.id.0)),
            ("workflow.status", json!(after.status.as_str())),
        ]);
        if let Some(kind) = after.error.as_ref().and_then(|e| e.kind.as_ref()) {
            attributes.insert("error.kind".into(), json!(kind));
        }
        if let Some(node) = after.error.as_ref().and_then(|e| e.node_id.as_ref()) {
            attributes.insert("error.node_id".into(), json!(node));
        }
        let error = matches!(after.status, RunStatus::Failure | RunStatus::TimedOut).then(|| {
            after
                .error
                .as_ref()
                .map_or_else(|| "failed".into(), |e| clip(&e.message))
        });
        spans.push(EndedSpan {
            key: SpanKey::Run,
            parent: None,
            start,
            end: now.max(start),
            attributes,
            error,
        });
    }
    spans
}

/// Spans an outbox entry keeps, to emit again on a redelivery: at most this many (an
/// event that ends a large map's calls at once ends many), parents first, so that what is
/// lost in a crash then is leaves, never the parent of spans that were exported.
pub(crate) const OUTBOX_SPANS: usize = 64;

/// The spans of `spans` that an outbox entry keeps (see [`OUTBOX_SPANS`]).
pub(crate) fn for_outbox(spans: &[EndedSpan]) -> Vec<EndedSpan> {
    if spans.len() <= OUTBOX_SPANS {
        return spans.to_vec();
    }
    let rank = |s: &EndedSpan| match s.key {
        SpanKey::Run => 0,
        SpanKey::Node { .. } => 1,
        SpanKey::Slot { .. } => 2,
        SpanKey::Attempt { .. } => 3,
    };
    let mut kept: Vec<&EndedSpan> = spans.iter().collect();
    kept.sort_by_key(|s| rank(s));
    kept.into_iter().take(OUTBOX_SPANS).cloned().collect()
}

/// Texts from agents and the run (error messages) go on spans at most this long.
const MAX_TEXT: usize = 1024;

fn clip(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn attrs<const N: usize>(pairs: [(&str, Value); N]) -> BTreeMap<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The call a task makes (a fork branch's, or its node's).
fn call_def<'a>(workflow: &'a Workflow, key: &TaskKey) -> Option<&'a Call> {
    let node = workflow.node(&key.node)?;
    match (&node.kind, key.slot) {
        (NodeKind::Fork { branches, .. }, Slot::Branch(i)) => {
            branches.get(i as usize).map(|b| &b.call)
        }
        (NodeKind::Call(call), _) => Some(call),
        _ => None,
    }
}

/// When an attempt whose start was not kept (dispatched by a replica that exported no
/// traces, or by an older version) started: its deadline less its timeout.
fn guessed_start(
    workflow: &Workflow,
    key: &TaskKey,
    deadline: Millis,
    before: &Execution,
    now: Millis,
) -> Millis {
    let timeout = call_def(workflow, key)
        .and_then(|c| c.timeout)
        .unwrap_or(workflow.default_node_timeout);
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    Millis(deadline.0.saturating_sub(ms))
        .max(before.started_at)
        .min(now)
}

/// How attempt `attempt` of `key` ended, given the events that ended it: cancelled when
/// none of them concerns it.
fn attempt_end(workflow: &Workflow, key: &TaskKey, attempt: u32, events: &[Event]) -> AttemptEnd {
    let by = |event| ended_by(workflow, key, attempt, event);
    events.iter().find_map(by).unwrap_or(AttemptEnd {
        outcome: "cancelled",
        kind: None,
        message: None,
    })
}

/// How attempt `attempt` of `key` ended, if `event` ended it.
fn ended_by(workflow: &Workflow, key: &TaskKey, attempt: u32, event: &Event) -> Option<AttemptEnd> {
    let this = |task: &TaskKey, a: u32| task == key && a == attempt;
    Some(match event {
        Event::CallSucceeded {
            task,
            attempt: a,
            output,
        } if this(task, *a) => {
            let violations = call_def(workflow, key)
                .and_then(|c| c.output_schema_override.as_ref())
                .map(|s| s.violations(output))
                .unwrap_or_default();
            if violations.is_empty() {
                AttemptEnd {
                    outcome: "success",
                    kind: None,
                    message: None,
                }
            } else {
                AttemptEnd {
                    outcome: "failure",
                    kind: None,
                    message: Some(clip(&format!(
                        "output does not match output_schema_override: {}",
                        violations.join("; ")
                    ))),
                }
            }
        }
        Event::CallFailed {
            task,
            attempt: a,
            failure,
        } if this(task, *a) => AttemptEnd {
            outcome: match failure.class {
                crate::core::FailureClass::Failed => "failure",
                crate::core::FailureClass::Unreachable => "unreachable",
                crate::core::FailureClass::TimedOut => "timeout",
            },
            kind: failure.kind.clone(),
            message: Some(clip(&failure.message)),
        },
        Event::TimerFired {
            timer: TimerId::CallTimeout { task, attempt: a },
        } if this(task, *a) => AttemptEnd {
            outcome: "timeout",
            kind: Some(crate::core::Failure::TIMEOUT.into()),
            message: Some("the call timed out".into()),
        },
        _ => return None,
    })
}

/// Index attributes of a call's slot.
fn slot_attributes(key: &TaskKey, attributes: &mut BTreeMap<String, Value>) {
    match key.slot {
        Slot::Single => {}
        Slot::Item(i) => {
            attributes.insert("map.index".into(), json!(i));
        }
        Slot::Iteration(i) => {
            attributes.insert("loop.iteration".into(), json!(i));
        }
        Slot::Branch(i) => {
            attributes.insert("fork.branch".into(), json!(i));
        }
    }
}

fn attempt_span(
    workflow: &Workflow,
    key: &TaskKey,
    attempt: u32,
    start: Millis,
    end: Millis,
    how: AttemptEnd,
) -> EndedSpan {
    let call = call_def(workflow, key);
    let mut attributes = attrs([
        ("node.id", json!(key.node)),
        ("attempt", json!(attempt)),
        ("outcome", json!(how.outcome)),
    ]);
    if let Some(call) = call {
        attributes.insert("agent.name".into(), json!(call.target.agent_name()));
        attributes.insert(
            "agent.target".into(),
            json!(match call.target {
                crate::definition::CallTarget::Agent(_) => "agent",
                crate::definition::CallTarget::Workflow(_) => "workflow",
            }),
        );
    }
    if let Some(kind) = &how.kind {
        attributes.insert("error.kind".into(), json!(kind));
    }
    slot_attributes(key, &mut attributes);
    let error = match how.outcome {
        "success" | "cancelled" => None,
        _ => Some(how.message.unwrap_or_else(|| how.outcome.into())),
    };
    EndedSpan {
        key: SpanKey::Attempt {
            task: key.clone(),
            attempt,
        },
        parent: Some(SpanKey::attempt_parent(key)),
        start,
        end: end.max(start),
        attributes,
        error,
    }
}

fn slot_span(
    workflow: &Workflow,
    key: &TaskKey,
    start: Millis,
    end: Millis,
    outcome: &str,
) -> EndedSpan {
    let owner = workflow
        .graph
        .index
        .get(&key.node)
        .and_then(|&i| match workflow.graph.roles[i] {
            NodeRole::Inner { owner } => Some(workflow.nodes[owner].id.clone()),
            _ => None,
        })
        .unwrap_or_else(|| key.node.clone());
    let status = match outcome {
        "success" => "success",
        "cancelled" => "cancelled",
        _ => "failure",
    };
    let node_type = workflow
        .node(&key.node)
        .map_or("agent", |n| n.kind.type_name());
    let mut attributes = attrs([
        ("node.id", json!(key.node)),
        ("node.type", json!(node_type)),
        ("node.status", json!(status)),
        ("node.owner", json!(owner)),
    ]);
    slot_attributes(key, &mut attributes);
    EndedSpan {
        key: SpanKey::Slot { task: key.clone() },
        parent: Some(SpanKey::Node { node: owner }),
        start,
        end: end.max(start),
        attributes,
        error: (status == "failure").then(|| format!("the call ended: {outcome}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{apply, ExecutionId, Failure, FailureClass};
    use serde_json::json;

    const WORKFLOW: &str = r#"
name: Traced
workflow:
  description: a call, a map with a retried item, and a loop
  nodes:
    - {id: a, type: agent, agent_name: A, input: {x: 1}, retry_strategy: {limit: 1, backoff: {duration: 0s}}}
    - {id: m, type: map, depends_on: [a], withItems: [1, 2], node: inner}
    - {id: inner, type: agent, agent_name: B, input: {v: "{{_map_item}}"}}
  output_mapping: {r: "{{m.output.results}}"}
"#;

    struct Run {
        wf: Workflow,
        st: Execution,
        times: BTreeMap<TaskKey, CallTimes>,
        spans: Vec<EndedSpan>,
    }

    impl Run {
        fn new() -> Run {
            let wf = crate::definition::parse_str(WORKFLOW, "t.yaml").expect("valid");
            let st = Execution::new(ExecutionId("e1".into()), "Traced");
            Run {
                wf,
                st,
                times: BTreeMap::new(),
                spans: Vec::new(),
            }
        }

        fn event(&mut self, event: Event, now: u64) {
            let before = self.st.clone();
            apply(&self.wf, &mut self.st, event.clone(), Millis(now));
            let ended = ended(
                &self.wf,
                &before,
                &self.st,
                std::slice::from_ref(&event),
                &mut self.times,
                Millis(now),
            );
            self.spans.extend(ended);
        }

        fn span(&self, key: &SpanKey) -> &EndedSpan {
            self.spans
                .iter()
                .find(|s| &s.key == key)
                .unwrap_or_else(|| panic!("no span {key:?} in {:#?}", self.spans))
        }
    }

    fn ok(task: TaskKey, attempt: u32, output: Value) -> Event {
        Event::CallSucceeded {
            task,
            attempt,
            output,
        }
    }

    #[test]
    fn every_run_node_item_and_attempt_ends_once_with_its_times_and_parent() {
        let mut r = Run::new();
        r.event(Event::Started { input: json!({}) }, 100);
        let a = TaskKey::single("a");
        assert_eq!(r.times[&a].started, Millis(100));
        r.event(
            Event::CallFailed {
                task: a.clone(),
                attempt: 1,
                failure: Failure {
                    class: FailureClass::Failed,
                    message: "no".into(),
                    kind: Some("flaky".into()),
                },
            },
            150,
        );
        // The retry's backoff timer fires: attempt 2 starts.
        r.event(
            Event::TimerFired {
                timer: TimerId::Retry {
                    task: a.clone(),
                    attempt: 2,
                },
            },
            160,
        );
        r.event(ok(a.clone(), 2, json!({})), 200);
        let first = r.span(&SpanKey::Attempt {
            task: a.clone(),
            attempt: 1,
        });
        assert_eq!((first.start, first.end), (Millis(100), Millis(150)));
        assert_eq!(first.attributes["outcome"], json!("failure"));
        assert_eq!(first.attributes["error.kind"], json!("flaky"));
        assert_eq!(first.error.as_deref(), Some("no"));
        assert_eq!(first.parent, Some(SpanKey::Node { node: "a".into() }));
        let second = r.span(&SpanKey::Attempt {
            task: a.clone(),
            attempt: 2,
        });
        assert_eq!((second.start, second.end), (Millis(160), Millis(200)));
        assert!(second.error.is_none());
        let node = r.span(&SpanKey::Node { node: "a".into() });
        assert_eq!((node.start, node.end), (Millis(100), Millis(200)));
        assert_eq!(node.parent, Some(SpanKey::Run));
        // The map's items.
        let items: Vec<TaskKey> = r.st.calls.keys().cloned().collect();
        assert_eq!(items.len(), 2);
        r.event(ok(items[0].clone(), 1, json!(1)), 300);
        r.event(ok(items[1].clone(), 1, json!(2)), 400);
        let item = r.span(&SpanKey::Slot {
            task: items[1].clone(),
        });
        assert_eq!((item.start, item.end), (Millis(200), Millis(400)));
        assert_eq!(item.parent, Some(SpanKey::Node { node: "m".into() }));
        assert_eq!(item.attributes["map.index"], json!(1));
        let attempt = r.span(&SpanKey::Attempt {
            task: items[1].clone(),
            attempt: 1,
        });
        assert_eq!(
            attempt.parent,
            Some(SpanKey::Slot {
                task: items[1].clone()
            })
        );
        let run = r.span(&SpanKey::Run);
        assert_eq!((run.start, run.end), (Millis(100), Millis(400)));
        assert_eq!(run.attributes["workflow.status"], json!("success"));
        assert!(run.parent.is_none());
        // Once each, and nothing for the inner node itself.
        let mut keys: Vec<&SpanKey> = r.spans.iter().map(|s| &s.key).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "a span ended twice: {:#?}", r.spans);
        assert!(!keys.contains(&&SpanKey::Node {
            node: "inner".into()
        }));
        assert_eq!(n, 2 + 1 + 2 * 2 + 1 + 1, "{:#?}", r.spans);
        assert!(r.times.is_empty());
    }

    #[test]
    fn an_outbox_entry_keeps_parents_first_and_a_bounded_number() {
        let leaf = |i: u32| EndedSpan {
            key: SpanKey::Attempt {
                task: TaskKey {
                    node: "n".into(),
                    slot: Slot::Item(i),
                },
                attempt: 1,
            },
            parent: None,
            start: Millis(0),
            end: Millis(1),
            attributes: BTreeMap::new(),
            error: None,
        };
        let mut spans: Vec<EndedSpan> = (0..200).map(leaf).collect();
        spans.push(EndedSpan {
            key: SpanKey::Run,
            ..leaf(0)
        });
        let kept = for_outbox(&spans);
        assert_eq!(kept.len(), OUTBOX_SPANS);
        assert_eq!(kept[0].key, SpanKey::Run);
        assert_eq!(for_outbox(&spans[..3]), spans[..3].to_vec());
        assert_eq!(clip(&"é".repeat(1000)).chars().count(), 513);
    }

    #[test]
    fn a_cancel_ends_the_attempts_in_flight_as_cancelled() {
        let mut r = Run::new();
        r.event(Event::Started { input: json!({}) }, 10);
        r.event(Event::CancelRequested { reason: None }, 20);
        let attempt = r.span(&SpanKey::Attempt {
            task: TaskKey::single("a"),
            attempt: 1,
        });
        assert_eq!(attempt.attributes["outcome"], json!("cancelled"));
        assert_eq!((attempt.start, attempt.end), (Millis(10), Millis(20)));
        let run = r.span(&SpanKey::Run);
        assert_eq!(run.attributes["workflow.status"], json!("cancelled"));
    }
}
