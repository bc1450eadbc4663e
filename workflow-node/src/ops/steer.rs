//! Steering a run through its workflow's nodes: cancel, pause, resume and retry. The
//! checks a face can make from the run's record (it ended, it is already paused, it cannot
//! be retried) are made here, once, before asking; the nodes check who asks. A node
//! refuses a cancel with a JSON-RPC error (its code kept); it refuses a pause or resume
//! with a failed task and no code, so once the record's checks pass, such a refusal is
//! about who asks.

use agent_sdk::workflow::{start_retry, StartAs, Started};
use agent_sdk::Timing;
use messages::a2a::{Message, Part, Role, TaskState};
use messages::control::{RunControl, WorkflowRunControl};
use messages::jsonrpc::{Method, Outcome, Request, TaskIdParams};
use messages::AgentReply;
use serde_json::json;

use crate::core::ExecutionId;
use crate::shell::FoundRun;

use super::ask::{ask, completed, task_text};
use super::refusal::{Refusal, RefusalKind};
use super::runs::Runs;

/// Refuses to steer `run` once it has ended, saying so the node's way.
fn not_ended(run: &FoundRun, what: Option<&str>) -> Result<(), Refusal> {
    let status = run.record.state.status;
    if !status.is_terminal() {
        return Ok(());
    }
    let cannot = what.map(|w| format!(": it cannot {w}")).unwrap_or_default();
    Err(Refusal::conflict(format!(
        "run {} already ended ({}){cannot}",
        run.execution,
        status.as_str()
    )))
}

/// The `tasks/cancel` (request id `id`) of the run `run_id` names (its execution id, or the
/// task id it was started with), with `reason` in its metadata.
pub fn cancel_request(id: &str, run_id: &str, reason: Option<&str>) -> Request {
    let mut metadata = serde_json::Map::new();
    if let Some(r) = reason {
        metadata.insert("reason".into(), json!(r));
    }
    Request {
        id: id.to_owned().into(),
        method: Method::TasksCancel(TaskIdParams {
            id: run_id.to_owned(),
            metadata: (!metadata.is_empty()).then_some(metadata),
        }),
    }
}

/// Asks the workflow's nodes to cancel `run` (`tasks/cancel` by execution id, with
/// `reason` in its metadata, signed by `signer`); the node's answer.
pub async fn cancel(
    runs: &Runs,
    run: &FoundRun,
    reason: Option<&str>,
    signer: Option<&agent_sdk::Signer>,
) -> Result<String, Refusal> {
    not_ended(run, None)?;
    let id = format!("cancel-{}", uuid::Uuid::new_v4().simple());
    let request = cancel_request(&id, &run.execution.0, reason);
    let (client, ns) = (runs.client(), runs.namespace());
    let requested = || format!("cancel of run {} requested", run.execution);
    match ask(client, ns, &run.workflow, &request, signer).await? {
        Outcome::Error(e) => Err(Refusal::from_node(&e)),
        Outcome::Result(r) => match *r {
            // A cancel the node could not record is answered as a failed task.
            AgentReply::Task(t) if t.status.state == TaskState::Failed => {
                Err(Refusal::failed(task_text(&t).unwrap_or_else(requested)))
            }
            AgentReply::Task(t) => Ok(task_text(&t).unwrap_or_else(requested)),
            _ => Ok(requested()),
        },
    }
}

/// Why `run` cannot take `action` now, from its record (the node's words), if it cannot.
fn may_control(run: &FoundRun, action: RunControl) -> Result<(), Refusal> {
    not_ended(run, Some(action.as_str()))?;
    let state = &run.record.state;
    let execution = &run.execution;
    // Nothing of a queued run runs yet: a pause would not be kept (cancel it instead).
    if state.status == crate::core::RunStatus::Queued {
        return Err(Refusal::conflict(format!(
            "run {execution} is queued for a slot: it cannot {} until it starts",
            action.as_str()
        )));
    }
    let paused = state.paused.is_some();
    let stopping = state.cancel_requested || state.deadline_passed;
    let why = match action {
        RunControl::Pause if stopping => {
            format!("run {execution} is stopping (cancelled or past its deadline): it cannot pause")
        }
        RunControl::Pause if paused => format!("run {execution} is already paused"),
        RunControl::Resume if !paused => format!("run {execution} is not paused"),
        _ => return Ok(()),
    };
    Err(Refusal::conflict(why))
}

/// The `message/send` carrying a `workflow_run_control` of run `execution`.
pub fn control_request(execution: &str, action: RunControl, reason: Option<String>) -> Request {
    let control = WorkflowRunControl {
        execution_id: execution.to_owned(),
        action,
        reason,
    };
    let message_id = format!("{}-{}", action.as_str(), uuid::Uuid::new_v4().simple());
    let message = Message::new(
        message_id.clone(),
        Role::User,
        vec![Part::data_part(&control)],
    );
    Request::message_send(message_id.as_str(), message)
}

/// Asks the workflow's nodes to pause or resume `run` (a `workflow_run_control` signed by
/// `signer`); the node's answer.
pub async fn control(
    runs: &Runs,
    run: &FoundRun,
    action: RunControl,
    reason: Option<&str>,
    signer: Option<&agent_sdk::Signer>,
) -> Result<String, Refusal> {
    may_control(run, action)?;
    let request = control_request(&run.execution.0, action, reason.map(str::to_string));
    let (client, ns) = (runs.client(), runs.namespace());
    let answer = ask(client, ns, &run.workflow, &request, signer).await?;
    completed(answer, RefusalKind::NotPermitted, || {
        format!("{} gave an answer that is not a task", run.workflow)
    })
}

/// Refuses to retry `run` unless it ended without success.
pub fn retryable(run: &FoundRun) -> Result<(), Refusal> {
    if run.record.state.retryable() {
        return Ok(());
    }
    Err(Refusal::conflict(format!(
        "run {} is {}: only a run that ended without success can be retried",
        run.execution,
        run.record.state.shown_status()
    )))
}

/// Retries `run` as a new run with task id `task_id` and returns its execution id once
/// the workflow accepted it.
pub async fn retry(
    runs: &Runs,
    run: &FoundRun,
    task_id: &str,
    signer: Option<agent_sdk::Signer>,
    timing: Timing,
) -> Result<ExecutionId, Refusal> {
    retryable(run)?;
    let execution = crate::shell::run::names::execution_id(&run.workflow, task_id);
    let start = StartAs {
        task_id: task_id.to_string(),
        version: None,
        signer,
        priority: None,
    };
    let ns = runs.namespace();
    let started = start_retry(
        runs.client(),
        ns,
        &run.workflow,
        &run.execution.0,
        timing,
        start,
    )
    .await
    .map_err(|e| Refusal::unavailable(format!("sending the retry: {e}")))?;
    match started {
        Started::Accepted => Ok(execution),
        // A final reply before the start was stored: the record's checks passed, so the
        // node refused who asks.
        Started::Ended { text, .. } if text.is_empty() => Err(Refusal::new(
            RefusalKind::NotPermitted,
            "the retry was refused",
        )),
        Started::Ended { text, .. } => Err(Refusal::new(RefusalKind::NotPermitted, text)),
    }
}
