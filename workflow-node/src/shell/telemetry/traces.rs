//! A run's trace: its ids, derived alike by every replica, and the emission of the spans
//! `spans` says an event ended.
//!
//! - The trace id is the caller's (from the request's `traceparent`), or else derived
//!   from the execution id.
//! - Each span's id is a hash of the execution id and what it covers ([`SpanKey::seed`]),
//!   so the context of an attempt sent to its agent in `traceparent`, and the parent of
//!   every span, are known before the span itself is emitted, by any replica.
//! - Whether the run is sampled is decided as for its run span (the sampler, with the
//!   caller's flags), and its children carry that decision in their parent's flags.
//!
//! Nothing here does anything unless the process exports traces
//! (`agent_sdk::telemetry::active`).

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_sdk::telemetry::opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use agent_sdk::telemetry::opentelemetry::{self, KeyValue};
use agent_sdk::telemetry::{self, EndedSpan as OtelSpan};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::core::{ExecutionId, Millis, TaskKey};
use crate::shell::run::spans::{EndedSpan, SpanKey};

/// The ids of one run's trace.
pub(in crate::shell) struct RunTrace<'a> {
    execution: &'a ExecutionId,
    trace_id: TraceId,
    /// The caller's span, when its request carried a valid `traceparent`.
    caller: Option<SpanContext>,
    /// Whether the run's spans are sampled.
    sampled: bool,
}

impl<'a> RunTrace<'a> {
    /// The trace of run `execution`, started by a request with `traceparent`.
    pub(in crate::shell) fn new(
        execution: &'a ExecutionId,
        traceparent: Option<&str>,
    ) -> RunTrace<'a> {
        let caller = traceparent.and_then(telemetry::parse_traceparent);
        let trace_id = caller
            .as_ref()
            .map_or_else(|| trace_id_of(execution), |c| c.trace_id());
        let run = span_id_of(execution, &SpanKey::Run);
        let sampled = telemetry::sampled(trace_id, run, caller.as_ref(), SpanKey::Run.name());
        RunTrace {
            execution,
            trace_id,
            caller,
            sampled,
        }
    }

    /// The context of the span `key` (remote: emitted by whichever replica ends it).
    pub(in crate::shell) fn context(&self, key: &SpanKey) -> SpanContext {
        let flags = if self.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanContext::new(
            self.trace_id,
            span_id_of(self.execution, key),
            flags,
            true,
            TraceState::default(),
        )
    }

    /// The `traceparent` an attempt's request carries: the attempt's span.
    pub(in crate::shell) fn attempt_traceparent(&self, task: &TaskKey, attempt: u32) -> String {
        let key = SpanKey::Attempt {
            task: task.clone(),
            attempt,
        };
        telemetry::traceparent(&self.context(&key))
    }

    /// Emits `spans` (a no-op when the run is not sampled).
    pub(in crate::shell) fn emit(&self, spans: &[EndedSpan]) {
        if !self.sampled || spans.is_empty() {
            return;
        }
        telemetry::emit(spans.iter().map(|s| self.otel_span(s)));
    }

    fn otel_span(&self, s: &EndedSpan) -> OtelSpan {
        let parent = match &s.parent {
            Some(p) => Some(self.context(p)),
            None => self.caller.clone(),
        };
        let kind = match s.key {
            SpanKey::Run => SpanKind::Server,
            SpanKey::Attempt { .. } => SpanKind::Client,
            _ => SpanKind::Internal,
        };
        let mut attributes: Vec<KeyValue> = s
            .attributes
            .iter()
            .filter_map(|(k, v)| Some(KeyValue::new(k.clone(), value(v)?)))
            .collect();
        if let SpanKey::Attempt { task, attempt } = &s.key {
            attributes.push(KeyValue::new(
                "sub_task.id",
                task.sub_task_id(self.execution, *attempt),
            ));
        }
        if let SpanKey::Run = s.key {
            attributes.push(KeyValue::new("workflow.task_id", self.execution.0.clone()));
        }
        OtelSpan {
            name: Cow::Borrowed(s.key.name()),
            trace_id: self.trace_id,
            span_id: span_id_of(self.execution, &s.key),
            parent,
            kind,
            start: time(s.start),
            end: time(s.end),
            attributes,
            status: match &s.error {
                Some(e) => Status::error(e.clone()),
                None => Status::Unset,
            },
        }
    }
}

fn value(v: &Value) -> Option<opentelemetry::Value> {
    Some(match v {
        Value::String(s) => s.clone().into(),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        Value::Null => return None,
        other => other.to_string().into(),
    })
}

fn time(ms: Millis) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.0)
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

/// The trace id of a run whose caller sent no trace context.
fn trace_id_of(execution: &ExecutionId) -> TraceId {
    let d = digest(&["trace", &execution.0]);
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    if b == [0; 16] {
        b[15] = 1;
    }
    TraceId::from_bytes(b)
}

/// The id of span `key` of run `execution`.
fn span_id_of(execution: &ExecutionId, key: &SpanKey) -> SpanId {
    let d = digest(&["span", &execution.0, &key.seed()]);
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    if b == [0; 8] {
        b[7] = 1;
    }
    SpanId::from_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_same_everywhere_and_differ_per_span() {
        let e = ExecutionId("abc".into());
        let t = TaskKey::single("n");
        let one = SpanKey::Attempt {
            task: t.clone(),
            attempt: 1,
        };
        let two = SpanKey::Attempt {
            task: t,
            attempt: 2,
        };
        assert_eq!(span_id_of(&e, &one), span_id_of(&e, &one));
        assert_ne!(span_id_of(&e, &one), span_id_of(&e, &two));
        assert_ne!(
            span_id_of(&e, &one),
            span_id_of(&ExecutionId("abd".into()), &one)
        );
        assert_eq!(trace_id_of(&e), trace_id_of(&ExecutionId("abc".into())));
    }

    #[test]
    fn the_callers_trace_is_kept() {
        let e = ExecutionId("abc".into());
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let run = RunTrace::new(&e, Some(tp));
        assert_eq!(
            run.trace_id,
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap()
        );
        let tp = run.attempt_traceparent(&TaskKey::single("n"), 1);
        assert!(
            tp.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{tp}"
        );
        let bad = RunTrace::new(&e, Some("garbage"));
        assert_eq!(bad.trace_id, trace_id_of(&e));
    }
}
