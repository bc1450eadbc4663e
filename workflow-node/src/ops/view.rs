//! A run as data: the JSON a face shows of it (`runs list --json`, `runs show --json`, the
//! web view's API) and the rows of its nodes. One copy, so that the CLI and the web view
//! show the same fields.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::core::{Millis, NodeStatus};
use crate::definition::{CallTarget, NodeKind, Workflow};
use crate::shell::{Apart, FoundRun};

/// `2026-11-26T10:42:03.123Z` (RFC 3339, UTC), for JSON; `None` for none.
pub fn rfc3339(at: Option<Millis>) -> Option<String> {
    at.filter(|m| m.0 > 0).map(Millis::rfc3339)
}

/// `2026-11-26 10:42:03Z`: a time in UTC to the second; `-` for none.
pub fn time(at: Option<Millis>) -> String {
    match at.filter(|m| m.0 > 0) {
        Some(m) => {
            let (date, clock) = m.civil();
            format!("{date} {clock}Z")
        }
        None => "-".into(),
    }
}

/// Who started a run: its `Mesh-Caller`, else the calling workflow's sub-task.
pub fn caller(run: &FoundRun) -> Option<&str> {
    let c = &run.record.caller;
    c.name.as_deref().or(c.sub_task_id.as_deref())
}

/// A run's line in a list.
pub fn summary(run: &FoundRun, now: Millis) -> Value {
    let s = &run.record.state;
    let duration = (s.started_at.0 > 0).then(|| {
        run.record
            .ended_at
            .unwrap_or(now)
            .0
            .saturating_sub(s.started_at.0)
    });
    json!({
        "execution_id": run.execution.0,
        "workflow": run.workflow,
        "status": s.shown_status(),
        "started_at": rfc3339(Some(s.started_at)),
        "ended_at": rfc3339(run.record.ended_at),
        "duration_ms": duration,
        "caller": caller(run),
        "retry_of": s.retry_of.as_ref().map(|r| &r.0),
        "paused_since": s
            .paused
            .as_ref()
            .filter(|_| s.is_paused())
            .map(|p| rfc3339(Some(p.since))),
        "queue": queue_line(s),
    })
}

/// Where the run stands under its workflow's flow control, for people: `queued since …,
/// key …` while it waits, `waited … for its slot` once admitted; `None` for a run that
/// never queued.
pub fn queue_line(s: &crate::core::Execution) -> Option<String> {
    let t = s.flow.as_ref()?;
    let key = if t.key.is_empty() {
        String::new()
    } else {
        format!(", concurrency key '{}'", t.key)
    };
    Some(match t.admitted_at {
        None if s.status == crate::core::RunStatus::Queued => {
            format!("queued since {}{key}", time(Some(t.queued_at)))
        }
        None => format!("ended while queued{key}"),
        Some(at) => format!(
            "waited {} ms for its slot{key}",
            at.0.saturating_sub(t.queued_at.0)
        ),
    })
}

/// One node of a run, as shown.
#[derive(Debug, Clone)]
pub struct NodeRow {
    /// The node's id.
    pub id: String,
    /// Its `type` as written in files (`-` without a definition at hand).
    pub kind: String,
    /// Its status.
    pub status: NodeStatus,
    /// How many calls it made.
    pub attempts: u32,
    /// When it started.
    pub started: Option<Millis>,
    /// When it ended.
    pub ended: Option<Millis>,
    /// Why it failed.
    pub error: Option<String>,
}

/// The nodes of `run`: the definition's (pending unless reached), else those reached.
pub fn rows(run: &FoundRun, def: Option<&Workflow>) -> Vec<NodeRow> {
    let state = &run.record.state;
    let ids: Vec<(String, String)> = match def {
        Some(def) => def
            .nodes
            .iter()
            .map(|n| (n.id.clone(), kind(&n.kind).to_string()))
            .collect(),
        None => state
            .nodes
            .keys()
            .map(|id| (id.clone(), "-".to_string()))
            .collect(),
    };
    ids.into_iter()
        .map(|(id, kind)| {
            let n = state.nodes.get(&id);
            NodeRow {
                status: state.node_status(&id),
                attempts: run.record.attempts.get(&id).copied().unwrap_or(0),
                started: n.and_then(|n| n.started_at),
                ended: n.and_then(|n| n.ended_at),
                error: n.and_then(|n| n.error.clone()),
                id,
                kind,
            }
        })
        .collect()
}

/// A node's `type` as written in files.
fn kind(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::Call(c) => match c.target {
            CallTarget::Agent(_) => "agent",
            CallTarget::Workflow(_) => "workflow",
        },
        NodeKind::Conditional { .. } => "conditional",
        NodeKind::Switch { .. } => "switch",
        NodeKind::Map(_) => "map",
        NodeKind::Fork { .. } => "fork",
        NodeKind::Join { .. } => "join",
        NodeKind::Loop(_) => "loop",
        NodeKind::Approval(_) => "approval",
        NodeKind::Wait(_) => "wait",
    }
}

/// Every node of definition `def` with its status in `run` (pending unless reached).
pub fn statuses_of(run: &FoundRun, def: &Workflow) -> BTreeMap<String, NodeStatus> {
    let state = &run.record.state;
    def.nodes
        .iter()
        .map(|n| (n.id.clone(), state.node_status(&n.id)))
        .collect()
}

/// The whole run: its summary, nodes, input, output, error, waiting gates and maps.
pub fn view(run: &FoundRun, apart: &Apart, def: Option<&Workflow>, now: Millis) -> Value {
    let r = &run.record;
    let s = &r.state;
    let nodes: Vec<Value> = rows(run, def)
        .into_iter()
        .map(|row| {
            let duration = row
                .started
                .map(|st| row.ended.unwrap_or(now).0.saturating_sub(st.0));
            json!({
                "id": row.id,
                "type": row.kind,
                "status": row.status.as_str(),
                "attempts": row.attempts,
                "started_at": rfc3339(row.started),
                "ended_at": rfc3339(row.ended),
                "duration_ms": duration,
                "error": row.error,
            })
        })
        .collect();
    let mut v = summary(run, now);
    v["nodes"] = Value::Array(nodes);
    v["input"] = apart.input.clone().unwrap_or_else(|| s.input.clone());
    v["output"] = apart
        .output
        .clone()
        .or_else(|| s.output.clone())
        .unwrap_or(Value::Null);
    v["error"] = serde_json::to_value(&s.error).unwrap_or(Value::Null);
    v["waiting"] = serde_json::to_value(&r.asks).unwrap_or(Value::Null);
    v["waits_for"] = Value::Array(super::waits::of(run));
    v["signals"] = json!({
        "waiting": super::signals::waiting(s),
        "kept": s.signals.kept.iter().map(|k| json!({"signal": k.name, "id": k.id})).collect::<Vec<_>>(),
    });
    v["maps"] = json!(r
        .maps
        .iter()
        .map(|(id, m)| (id.clone(), m.total))
        .collect::<BTreeMap<_, _>>());
    v["definition"] = json!(r.definition);
    v["version"] = json!(def
        .filter(|d| r.definition.as_ref() == Some(&d.hash))
        .map(|d| &d.version));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_json_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(Some(Millis(0))), None);
        assert_eq!(
            rfc3339(Some(Millis(951_782_400_123))).as_deref(),
            Some("2000-02-29T00:00:00.123Z")
        );
    }
}
