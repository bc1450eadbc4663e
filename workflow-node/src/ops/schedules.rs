//! A mesh's schedules, for every face: listing them with their next fire time (read from
//! the schedules bucket, nothing written), and changing one (add, pause, resume, delete,
//! trigger) by asking the workflow's nodes, which check that an operator asks.

use messages::a2a::{Message, Part, Role};
use messages::control::{ScheduleControl, WorkflowScheduleControl};
use messages::jsonrpc::Request;
use serde::Serialize;
use serde_json::Value;

use crate::definition::{parse_schedule, slot_time};
use crate::shell::run::names;
use crate::shell::run::schedule::{Counts, ScheduleState};
use crate::shell::store::schedules::read_all;

use super::ask::{ask, completed};
use super::refusal::{Refusal, RefusalKind};

/// One schedule as every face shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleView {
    /// Its workflow.
    pub workflow: String,
    /// Its name.
    pub name: String,
    /// `file` (declared in the workflow file) or `added` (by an operator).
    pub origin: &'static str,
    /// The key that added it, for an added one signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_by: Option<String>,
    /// When: the cron expression and its zone, or the interval.
    pub when: String,
    /// The overlap policy.
    pub overlap: String,
    /// Whether it is paused.
    pub paused: bool,
    /// The pause's (or resume's) note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Its next slot (RFC 3339, UTC), unless paused or it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Its next slots (up to [`NEXT_SHOWN`]), in its time zone (RFC 3339 with the zone's
    /// offset; UTC for an interval), unless paused.
    pub next_local: Vec<String>,
    /// The last slot dealt with (RFC 3339, UTC).
    pub last_slot: String,
    /// The execution id of its last run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// Runs started, slots skipped, kept slots dropped, slots missed.
    pub counts: Counts,
    /// Why its last start failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// How many next fire times a view shows.
pub const NEXT_SHOWN: usize = 3;

/// The next [`NEXT_SHOWN`] slots of `schedule` after `after` (Unix milliseconds), in its zone.
fn next_local(schedule: &crate::definition::Schedule, after: u64) -> Vec<String> {
    let zone = match &schedule.when {
        crate::definition::When::Cron { zone, .. } => *zone,
        crate::definition::When::Every(_) => chrono_tz::UTC,
    };
    let mut times = Vec::new();
    let mut at = after;
    while times.len() < NEXT_SHOWN {
        let Some(slot) = schedule.next_slot(at) else {
            break;
        };
        let Some(t) = i64::try_from(slot)
            .ok()
            .and_then(chrono::DateTime::from_timestamp_millis)
        else {
            break;
        };
        let local = t.with_timezone(&zone);
        times.push(local.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        at = slot;
    }
    times
}

/// The view of one entry at `now` (Unix milliseconds).
pub fn view(workflow: &str, name: &str, state: &ScheduleState, now: u64) -> ScheduleView {
    let spec = state.spec().cloned().unwrap_or(Value::Null);
    let parsed = parse_schedule(&spec).ok();
    let field = |k: &str| spec.get(k).and_then(Value::as_str).map(str::to_string);
    let when = match (field("cron"), spec.get("every")) {
        (Some(cron), _) => {
            let zone = field("timezone").unwrap_or_else(|| "UTC".into());
            format!("cron '{cron}' ({zone})")
        }
        (None, Some(every)) => format!("every {}", workflow_expr::to_text(every)),
        (None, None) => "?".into(),
    };
    let next = parsed
        .as_ref()
        .filter(|_| !state.paused)
        .and_then(|s| s.next_slot(state.last_slot.max(now)))
        .map(slot_time);
    let next_times = parsed
        .as_ref()
        .filter(|_| !state.paused)
        .map(|s| next_local(s, state.last_slot.max(now)))
        .unwrap_or_default();
    ScheduleView {
        workflow: workflow.to_string(),
        name: name.to_string(),
        origin: if state.added.is_some() {
            "added"
        } else {
            "file"
        },
        added_by: state.added.as_ref().and_then(|a| a.by.clone()),
        when,
        overlap: parsed.map_or("?".into(), |s| s.overlap.as_str().to_string()),
        paused: state.paused,
        note: state.note.clone(),
        next,
        next_local: next_times,
        last_slot: slot_time(state.last_slot),
        last_run: state.running.clone(),
        counts: state.counts,
        last_error: state.last_error.clone(),
    }
}

/// Every schedule of namespace `ns` (of `workflow`, when given), at `now`.
pub async fn list(
    client: &async_nats::Client,
    ns: &str,
    workflow: Option<&str>,
    now: u64,
) -> Result<Vec<ScheduleView>, Refusal> {
    let js = async_nats::jetstream::new(client.clone());
    let bucket = match js.get_key_value(names::schedules_bucket(ns)).await {
        Ok(b) => b,
        // No node ever ran here: no schedules.
        Err(_) => return Ok(Vec::new()),
    };
    let all = read_all(&bucket)
        .await
        .map_err(|e| Refusal::unavailable(e.to_string()))?;
    Ok(all
        .iter()
        .filter(|(w, _, _)| workflow.is_none_or(|only| only == w))
        .map(|(w, name, state)| view(w, name, state, now))
        .collect())
}

/// The `message/send` carrying `control`.
pub fn control_request(control: &WorkflowScheduleControl) -> Request {
    let message_id = format!(
        "schedule-{}-{}",
        control.action.as_str(),
        uuid::Uuid::new_v4().simple()
    );
    let message = Message::new(
        message_id.clone(),
        Role::User,
        vec![Part::data_part(control)],
    );
    Request::message_send(message_id.as_str(), message)
}

/// Asks the nodes serving `workflow` to apply `control`, signed by `signer`; their answer.
pub async fn control(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    control: &WorkflowScheduleControl,
    signer: Option<&agent_sdk::Signer>,
) -> Result<String, Refusal> {
    let request = control_request(control);
    let answer = ask(client, ns, workflow, &request, signer).await?;
    let refused_as = match control.action {
        ScheduleControl::Add => RefusalKind::Invalid,
        _ => RefusalKind::Conflict,
    };
    completed(answer, refused_as, || {
        format!("{workflow} gave an answer that is not a task")
    })
}
