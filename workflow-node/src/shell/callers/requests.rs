//! Requests to a workflow on `{ns}.a2a.v1.agent.request.{workflow}` (queue group: any
//! replica takes any request): start a run, tell a run's state (`tasks/get`), cancel one,
//! record an approval decision, or take a signal for a run's wait nodes. At most
//! `Config::max_concurrent_requests` are handled at once; the rest wait unread.
//!
//! A start is validated here (call depth, input schema) and answered at once when invalid,
//! creating no run. A valid one becomes a `Started` event in the workflow's stream, with a
//! message id derived from the caller's task id, so the same request delivered twice makes
//! one run; once the stream holds it, the caller is told the request was accepted (a
//! `submitted` status update). The final reply comes later, from whichever replica ends
//! the run.
//!
//! A caller that hears nothing sends its request again, with the same task id. The run it
//! names is then found: if it has ended, the request is answered at once from its record;
//! if it is still going, a caller from another reply address is attached to it (an
//! `attach` event), and one from the same address waits for the reply already promised.
//!
//! Task ids are the caller's, so they are scoped by the caller's name (`Mesh-Caller`) when
//! the request carries one: two callers with the same task id make two runs. A caller's
//! `tasks/get` and `tasks/cancel` name its task id with the same header.
//!
//! This file takes the requests and sends each to its handler; `starts` starts a run or
//! joins a caller to one, `approve` records an approval decision, and `answers` answers
//! from a run's record (a resend of an ended run, `tasks/get`).

mod answers;
mod approve;
mod starts;

use std::sync::Arc;
use std::time::SystemTime;

use async_nats::HeaderMap;
use futures::StreamExt;
use messages::a2a::{Part, TaskState};
use messages::control::{WorkflowRunControl, WorkflowScheduleControl, WorkflowTriggerReplay};
use messages::jsonrpc::{codes, ErrorObject, Method, Request};
use messages::signal::WorkflowSignal;
use messages::workflow::WorkflowApprovalDecision;
use messages::{call_proof, headers, subjects};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::core::ExecutionId;
use crate::definition::Workflow;
use crate::shell::callers::cancels;
use crate::shell::callers::dead_letters;
use crate::shell::callers::identity::{self, caller_name};
use crate::shell::callers::schedules;
use crate::shell::callers::signals::{self, Sender};
use crate::shell::callers::steer;
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::names;
use crate::shell::run::record::RunRecord;
use crate::shell::run::wire;
use crate::shell::store::runs;

/// Subscribes to the workflow's request subject (in its queue group).
pub(in crate::shell) async fn subscribe(
    shared: &Shared,
    workflow: &Workflow,
) -> Result<async_nats::Subscriber> {
    let subject = subjects::agent_request(&shared.ns, &workflow.name);
    shared.queue_subscribe(subject, &workflow.name).await
}

/// Serves the workflow's request subscription until it ends.
pub(in crate::shell) async fn serve(
    shared: Arc<Shared>,
    workflow: Arc<Workflow>,
    mut sub: async_nats::Subscriber,
) -> Result<()> {
    let slots = Arc::new(Semaphore::new(shared.config.max_concurrent_requests.max(1)));
    while let Some(msg) = sub.next().await {
        // When the request reached this replica: a resend answered late (this replica's
        // reads waiting on a store without quorum) is judged as of then.
        let received = crate::shell::clock::system_now();
        // Waiting for a slot before taking the next message keeps the rest unread.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break; // never closed
        };
        let shared = shared.clone();
        let workflow = workflow.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err((refusal, answer_to)) = screen(&shared.ns, &msg) {
                tracing::warn!(workflow = %workflow.name, "refusing a request: {refusal}");
                if let Some(to) = answer_to {
                    let _ = shared
                        .client
                        .publish(to, refused(&msg, &refusal).into())
                        .await;
                }
                return;
            }
            let reply_to = msg
                .reply
                .as_ref()
                .map(|r| r.to_string())
                .or_else(|| header(msg.headers.as_ref(), headers::REPLY_TO));
            let answer = handle(&shared, &workflow, &msg, reply_to.clone(), received).await;
            if let Some(answer) = answer {
                if let Some(to) = reply_to {
                    // A caller that sent a call token drops answers not proven with it.
                    let token = call_token(msg.headers.as_ref()).ok().flatten();
                    let h = shared.seal.answer_headers(token.as_deref(), &to, &answer);
                    let _ = shared
                        .client
                        .publish_with_headers(to, h, answer.into())
                        .await;
                }
            }
        });
    }
    Ok(())
}

/// Checks every subject a request asks to be answered on (see
/// [`subjects::AnswerTo::screen`]) and the mesh headers it carries (see
/// [`messages::inbound::check_value`]): the first refusal, and where it may be answered (the
/// request's NATS reply, when that one is allowed).
fn screen(
    ns: &str,
    msg: &async_nats::Message,
) -> std::result::Result<(), (String, Option<String>)> {
    let reply_to = header(msg.headers.as_ref(), headers::REPLY_TO);
    let status_to = header(msg.headers.as_ref(), headers::STATUS_TO);
    let asked = subjects::AnswerTo {
        nats_reply: msg.reply.as_deref(),
        reply_to: reply_to.as_deref(),
        status_to: status_to.as_deref(),
    };
    asked
        .screen(ns)
        .map_err(|(refusal, to)| (refusal.to_string(), to.map(str::to_owned)))?;
    identity::check_headers(msg.headers.as_ref()).map_err(|refusal| {
        let to = msg.reply.as_ref().map(|r| r.to_string());
        (refusal.to_string(), to)
    })
}

/// The JSON-RPC error answering a request refused before it is read.
fn refused(msg: &async_nats::Message, refusal: &str) -> Vec<u8> {
    let id = Request::from_slice(&msg.payload).ok().map(|r| r.id);
    let e = ErrorObject::new(codes::INVALID_PARAMS, refusal);
    wire::error_response(id, e)
}

/// The request's `Mesh-Call-Token`, when it carries one; an error when it is malformed.
fn call_token(h: Option<&HeaderMap>) -> std::result::Result<Option<String>, String> {
    match header(h, call_proof::CALL_TOKEN) {
        None => Ok(None),
        Some(token) => match call_proof::check_token(&token) {
            Ok(()) => Ok(Some(token)),
            Err(e) => Err(e.to_string()),
        },
    }
}

fn header(h: Option<&HeaderMap>, name: &str) -> Option<String> {
    h?.get(name).map(|v| v.as_str().to_string())
}

/// Handles one request, `received` when it reached this replica; returns the immediate
/// answer, if any (a started run answers at its end instead).
async fn handle(
    shared: &Shared,
    workflow: &Arc<Workflow>,
    msg: &async_nats::Message,
    reply_to: Option<String>,
    received: SystemTime,
) -> Option<Vec<u8>> {
    if let Err(e) = shared.config.limits.check_request(&msg.payload) {
        let e = ErrorObject::new(codes::INVALID_REQUEST, e.to_string());
        return Some(wire::error_response(None, e));
    }
    let request = match Request::from_slice(&msg.payload) {
        Ok(r) => r,
        Err(response) => return Some(wire::encode(&response)),
    };
    let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
    let answer = |state: TaskState, task: &str, text: String| {
        Some(wire::response(
            &id,
            wire::task(task, task, state, vec![Part::text(text)]),
        ))
    };
    match request.method {
        Method::TasksGet(params) => {
            let caller = caller_name(msg);
            let Some((execution, record)) =
                find_run(shared, workflow, caller.as_deref(), &params.id).await
            else {
                let e = ErrorObject::new(
                    codes::TASK_NOT_FOUND,
                    format!("no run of {} with task id '{}'", workflow.name, params.id),
                );
                return Some(wire::error_response(Some(request.id), e));
            };
            let signer = identity::signer(shared, msg)
                .await
                .map_err(|e| format!("the request's signature is refused: {e}"))
                .and_then(|signer| {
                    identity::may_see(
                        &shared.config,
                        &execution,
                        &record.caller,
                        signer.as_deref(),
                    )
                });
            if let Err(why) = signer {
                let e = ErrorObject::new(codes::NOT_PERMITTED, why);
                return Some(wire::error_response(Some(request.id), e));
            }
            Some(answers::run_state(shared, workflow, &execution, &record, &params.id, &id).await)
        }
        Method::TasksCancel(params) => {
            let reason = cancels::reason(&params);
            cancels::cancel(shared, workflow, msg, request.id, &params.id, reason).await
        }
        Method::MessageSend(params) => {
            let message = params.message;
            if let Some(decision) = message.find_data::<WorkflowApprovalDecision>() {
                let text = match decision {
                    Ok(d) => approve::approve(shared, workflow, msg, d).await,
                    Err(e) => Err(format!("malformed workflow_approval_decision: {e}")),
                };
                return match text {
                    Ok(t) => answer(TaskState::Completed, &message.message_id, t),
                    Err(t) => answer(TaskState::Failed, &message.message_id, t),
                };
            }
            if let Some(control) = message.find_data::<WorkflowRunControl>() {
                let text = match control {
                    Ok(c) => steer::control(shared, workflow, msg, &message.message_id, c).await,
                    Err(e) => Err(format!("malformed workflow_run_control: {e}")),
                };
                return match text {
                    Ok(t) => answer(TaskState::Completed, &message.message_id, t),
                    Err(t) => answer(TaskState::Failed, &message.message_id, t),
                };
            }
            if let Some(signal) = message.find_data::<WorkflowSignal>() {
                let text = match signal {
                    Ok(s) => signals::deliver(shared, workflow, Sender::Request(msg), s).await,
                    Err(e) => Err(ErrorObject::new(
                        codes::INVALID_PARAMS,
                        format!("malformed workflow_signal: {e}"),
                    )),
                };
                return match text {
                    Ok(t) => answer(TaskState::Completed, &message.message_id, t),
                    Err(e) => Some(wire::error_response(Some(request.id), e)),
                };
            }
            if let Some(r) = message.find_data::<WorkflowTriggerReplay>() {
                let text = match r {
                    Ok(r) => dead_letters::replay(shared, workflow, msg, r).await,
                    Err(e) => Err(format!("malformed workflow_trigger_replay: {e}")),
                };
                return match text {
                    Ok(t) => answer(TaskState::Completed, &message.message_id, t),
                    Err(t) => answer(TaskState::Failed, &message.message_id, t),
                };
            }
            if let Some(control) = message.find_data::<WorkflowScheduleControl>() {
                let now = crate::shell::clock::now().0;
                let text = match control {
                    Ok(c) => schedules::control(shared, workflow, msg, c, now).await,
                    Err(e) => Err(format!("malformed workflow_schedule_control: {e}")),
                };
                return match text {
                    Ok(t) => answer(TaskState::Completed, &message.message_id, t),
                    Err(t) => answer(TaskState::Failed, &message.message_id, t),
                };
            }
            starts::start(shared, workflow, msg, message, id, (reply_to, received)).await
        }
    }
}

/// Finds a run by its execution id, or by the task id `caller` (its `Mesh-Caller`, if any)
/// started it with (for a run started by a workflow node, the caller's sub-task id).
pub(in crate::shell) async fn find_run(
    shared: &Shared,
    workflow: &Workflow,
    caller: Option<&str>,
    id: &str,
) -> Option<(ExecutionId, RunRecord)> {
    let mut candidates = vec![names::caller_execution_id(&workflow.name, caller, id)];
    if let Ok(direct) = ExecutionId::parse(id) {
        candidates.insert(0, direct);
    }
    for execution in candidates {
        if let Some(record) = read_run(shared, workflow, &execution).await {
            return Some((execution, record));
        }
    }
    None
}

/// The record of run `execution`, if it has one that can be read: its entry, and for an
/// ended run its output when kept apart, but not as its artifact (see
/// [`runs::load_answer`]). What else it keeps apart (its input, large maps and node
/// outputs) is not read: a request needs the run's status, callers and ending only.
async fn read_run(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
) -> Option<RunRecord> {
    let key = names::run_key(&workflow.name, execution);
    let read = async {
        let Some((_, mut record)) = crate::shell::store::runs::read_record(shared, &key).await?
        else {
            return Ok(None);
        };
        if record.state.status.is_terminal() {
            runs::load_answer(shared, &key, &mut record).await?;
        }
        Ok::<_, crate::shell::Error>(Some(record))
    };
    match read.await {
        Ok(record) => record,
        Err(e) => {
            tracing::debug!("reading run {key} for a request failed: {e}");
            None
        }
    }
}
