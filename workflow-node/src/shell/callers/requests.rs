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

use std::sync::Arc;
use std::time::SystemTime;

use async_nats::HeaderMap;
use futures::StreamExt;
use messages::a2a::{Message, Part, TaskState};
use messages::control::{
    WorkflowRetry, WorkflowRunControl, WorkflowScheduleControl, WorkflowTriggerReplay,
};
use messages::jsonrpc::{codes, ErrorObject, Method, Request};
use messages::signal::WorkflowSignal;
use messages::workflow::{Decision, WorkflowApprovalDecision, WorkflowNodeRequest, PIN_VERSION};
use messages::{call_proof, headers, inbound, msg_id, subjects};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::core::{Event, ExecutionId, NodeStatus};
use crate::definition::{NodeKind, Workflow};
use crate::shell::callers::cancels;
use crate::shell::callers::dead_letters;
use crate::shell::callers::identity::{self, caller_name};
use crate::shell::callers::nonces;
use crate::shell::callers::schedules;
use crate::shell::callers::signals::{self, Sender};
use crate::shell::callers::start::{check_input, publish_start};
use crate::shell::callers::steer;
use crate::shell::context::Shared;
use crate::shell::error::{Error, Result};
use crate::shell::run::envelope::Caller;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::names;
use crate::shell::run::record::RunRecord;
use crate::shell::run::reply;
use crate::shell::run::wire::{self, InputSource};
use crate::shell::store::events::{publish_event, store_unreachable};
use crate::shell::store::runs;
use crate::shell::worker::effects;
use crate::shell::worker::final_claim::{Claimant, Markers};

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
/// [`inbound::check_value`]): the first refusal, and where it may be answered (the
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
            Some(run_state(shared, workflow, &execution, &record, &params.id, &id).await)
        }
        Method::TasksCancel(params) => {
            let reason = cancels::reason(&params);
            cancels::cancel(shared, workflow, msg, request.id, &params.id, reason).await
        }
        Method::MessageSend(params) => {
            let message = params.message;
            if let Some(decision) = message.find_data::<WorkflowApprovalDecision>() {
                let text = match decision {
                    Ok(d) => approve(shared, workflow, msg, d).await,
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
            start(shared, workflow, msg, message, id, (reply_to, received)).await
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

/// Records decision `d` on an approval node if it is signed by one of the node's approvers
/// (see `identity`), whose name it is recorded as; else says why not (the run goes on
/// waiting).
async fn approve(
    shared: &Shared,
    served: &Arc<Workflow>,
    msg: &async_nats::Message,
    d: WorkflowApprovalDecision,
) -> Result<String, String> {
    let (execution, record) = find_run(shared, served, None, &d.execution_id)
        .await
        .ok_or_else(|| format!("no run of {} with id '{}'", served.name, d.execution_id))?;
    // The gate is the one of the run's own definition (the version it started with), not
    // the one this replica serves: its approvers may differ.
    let workflow = shared
        .versions
        .for_run(served, record.definition.as_deref())
        .await
        .map_err(|e| format!("the definition of run {execution} cannot be read: {e}"))?;
    let Some(NodeKind::Approval(def)) = workflow.node(&d.node_id).map(|n| &n.kind) else {
        return Err(format!(
            "'{}' is not an approval node of {}",
            d.node_id, workflow.name
        ));
    };
    let status = record.state.node_status(&d.node_id);
    if status != NodeStatus::Waiting {
        return Err(format!(
            "node '{}' is not waiting for a decision (it is {})",
            d.node_id,
            status.as_str()
        ));
    }
    let reply = msg.reply.as_ref().map(|r| r.as_str());
    let signed = (
        msg.headers.as_ref(),
        msg.subject.as_str(),
        reply,
        &msg.payload[..],
    );
    let by = identity::approver(&shared.config, &d.node_id, def, signed, d.by.as_deref())?;
    nonces::first_use(shared, msg.headers.as_ref())
        .await
        .map_err(|e| format!("the decision on '{}' is refused: {e}", d.node_id))?;
    let approved = d.decision == Decision::Approve;
    let event = Event::ApprovalDecided {
        node: d.node_id.clone(),
        approved,
        by: Some(by),
        comment: d.comment,
    };
    let msg_id = msg_id::approval_decision(&execution.0, &d.node_id);
    let stored = publish_event(
        shared,
        &workflow.name,
        &execution,
        &msg_id,
        &Envelope::event(event),
    )
    .await
    .map_err(|e| format!("could not record the decision: {e}"))?;
    if !stored {
        // Only a replica makes the id: another decision on the node came first.
        return Err(format!(
            "a decision on '{}' of run {execution} was already recorded: this one is not \
             (the first decision counts)",
            d.node_id
        ));
    }
    Ok(format!(
        "decision on '{}' of run {execution} recorded",
        d.node_id
    ))
}

/// Starts a run for a `message/send`, or, for a request sent again, answers it from the
/// ended run or attaches its caller to the running one. `Some`: the answer to send now.
async fn start(
    shared: &Shared,
    workflow: &Arc<Workflow>,
    msg: &async_nats::Message,
    message: Message,
    id: Value,
    (reply_to, received): (Option<String>, SystemTime),
) -> Option<Vec<u8>> {
    let task_key = message
        .task_id
        .clone()
        .unwrap_or_else(|| message.message_id.clone());
    let execution =
        names::caller_execution_id(&workflow.name, caller_name(msg).as_deref(), &task_key);
    let refuse = |text: String| {
        Some(wire::response(
            &id,
            wire::task(
                &execution.0,
                &execution.0,
                TaskState::Failed,
                vec![Part::text(text)],
            ),
        ))
    };
    let h = msg.headers.as_ref();
    // A depth that is not a number is refused: read as 0, it would reset the count.
    let depth = header(h, headers::CALL_DEPTH);
    let depth: u32 = match depth.as_deref().map(|d| d.trim().parse()) {
        None => 0,
        Some(Ok(depth)) => depth,
        Some(Err(_)) => {
            let text = depth.unwrap_or_default();
            return refuse(format!(
                "{} '{text}' is not a call depth",
                headers::CALL_DEPTH
            ));
        }
    };
    if depth > workflow.max_call_depth {
        return refuse(format!(
            "call depth {depth} exceeds max_call_depth ({}) of {}",
            workflow.max_call_depth, workflow.name
        ));
    }
    // The definition the run is to use: a version the caller pins, or the one served here.
    let pinned = message
        .metadata
        .as_ref()
        .and_then(|m| m.get(PIN_VERSION))
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        });
    // The key that signed the start owns the run: only it (or an operator) may cancel it.
    // Checked once: a signature's nonce is accepted once.
    let signer = match identity::signer(shared, msg).await {
        Ok(signer) => signer,
        Err(e) => return refuse(format!("the request's signature is refused: {e}")),
    };
    // A retry runs with the definition and the input of the run it retries.
    let retried = match message.find_data::<WorkflowRetry>() {
        None => None,
        Some(Err(e)) => return refuse(format!("malformed workflow_retry: {e}")),
        Some(Ok(r)) => {
            match steer::retry_source(shared, workflow, msg, signer.as_deref(), &r).await {
                Ok(found) => Some(found),
                Err(text) => return refuse(text),
            }
        }
    };
    let pinned_workflow;
    let workflow = match (pinned, &retried) {
        (_, Some((old_workflow, _))) => &**old_workflow,
        (None, None) => &**workflow,
        (Some(version), None) => match shared.versions.pinned(workflow, &version).await {
            Ok(Some(found)) => {
                pinned_workflow = found;
                &*pinned_workflow
            }
            Ok(None) => workflow,
            Err(e) => return refuse(e.to_string()),
        },
    };
    let input = match &retried {
        Some((_, old)) => Ok(old.state.input.clone()),
        None => input_of(shared, workflow, &message).await,
    };
    let input = match input {
        Ok(input) => input,
        Err(text) => return refuse(text),
    };
    let token = match call_token(h) {
        Ok(token) => token,
        Err(e) => return refuse(e),
    };
    let priority = match crate::definition::priority_of(message.metadata.as_ref()) {
        Ok(priority) => priority,
        Err(text) => return refuse(text),
    };
    let workflow_caller = message.find_data::<WorkflowNodeRequest>().is_some();
    let caller = Caller {
        reply_to,
        status_to: header(h, headers::STATUS_TO),
        request_id: id.clone(),
        context_id: message.context_id.clone(),
        call_depth: depth,
        traceparent: header(h, headers::TRACEPARENT)
            .filter(|tp| inbound::traceparent(tp).is_some()),
        workflow_caller,
        sub_task_id: workflow_caller.then(|| task_key.clone()),
        attached: false,
        name: caller_name(msg),
        signer,
        call_token: token.as_deref().map(|t| shared.seal.wrap_token(t)),
        token_id: token.as_deref().map(|t| shared.seal.token_id(t)),
        priority,
    };
    // A plain start goes into the stream before the run is looked up, so that a worker
    // takes it while this replica looks: the look-up decides only what the caller is told.
    // A start that finds its run already started is ignored by the worker (see
    // `plan::plan`): a request sent again joins the run here, after the owner check.
    let published = match &retried {
        Some(_) => None,
        None => match publish_start(shared, workflow, &execution, &caller, input.clone()).await {
            Ok(published) => Some(published),
            // A request sent again for a run whose start is stored joins it below, whatever
            // refused this copy (a full store): only a run that does not exist is refused.
            Err(e) => match read_run(shared, workflow, &execution).await {
                Some(record) if record.state.started => None,
                _ => return unanswered_or_refused(&execution, e, refuse),
            },
        },
    };
    let found = read_run(shared, workflow, &execution).await;
    if let Some(record) = found.as_ref().filter(|r| r.state.started) {
        // A request sent again joins the run, and gets its final reply: the owner's.
        let owner = identity::may_see(
            &shared.config,
            &execution,
            &record.caller,
            caller.signer.as_deref(),
        );
        if let Err(why) = owner {
            return refuse(why);
        }
        // A run started with a call token is that call's alone: a request naming it by its
        // task id without the token (a forger that learned the id) neither joins it nor is
        // answered from it, and a call whose task id a forger took first is refused, not
        // answered with the forger's run.
        if shared.seal.token_of(&record.caller) != token {
            return refuse(format!(
                "task '{task_key}' names a run started by another call (its {} differs)",
                call_proof::CALL_TOKEN
            ));
        }
    }
    let outcome = match found {
        Some(record) if record.state.status.is_terminal() => {
            answer_ended(shared, workflow, &execution, &record, &caller, received).await
        }
        // A record that has not started holds a cancel that overtook the start: the
        // start goes into the stream, and the cancel ends the run as it starts (if the
        // same identity sent both: see `run::identity::kept_cancel_holds`).
        Some(record) if record.state.started => {
            join(shared, workflow, &execution, &record, caller, input).await
        }
        _ => {
            let published = match (published, &retried) {
                (Some(published), _) => Ok(published),
                // A retry's run is seeded with what succeeded before it starts.
                (None, Some((_, old))) => {
                    if let Err(e) = steer::seed(shared, workflow, &execution, old, &caller).await {
                        return refuse(format!("could not start the retry: {e}"));
                    }
                    publish_start(shared, workflow, &execution, &caller, input).await
                }
                (None, None) => unreachable!("a plain start is published above"),
            };
            match published {
                Ok(published) => begun(shared, workflow, &execution, &caller, published).await,
                Err(e) => Err(e),
            }
        }
    };
    outcome.unwrap_or_else(|e| unanswered_or_refused(&execution, e, refuse))
}

/// What a start that could not be stored answers. A store out of reach (no quorum on this
/// side of a partition, an election outlasting the retries) answers nothing: the event
/// may yet be stored (a publish "in process" on a leader that lost its quorum), so a
/// `failed` could contradict the run's real end, and the protocol has callers resend a
/// request that gets no answer, which joins the run or starts it once the store is back.
/// Any other cause (a full store, a limit) is told at once.
fn unanswered_or_refused(
    execution: &ExecutionId,
    error: Error,
    refuse: impl FnOnce(String) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    if store_unreachable(&error) {
        tracing::warn!("run {execution} not started yet, left to the caller's resend: {error}");
        return None;
    }
    refuse(start_refused(&error))
}

/// What a caller whose start could not be stored is told: a full store is named as such
/// (the deployment must make space; see `docs/faults.md`).
fn start_refused(e: &crate::shell::error::Error) -> String {
    if e.is_store_full() {
        format!("could not start the run: the mesh's JetStream store is full ({e})")
    } else {
        format!("could not start the run: {e}")
    }
}

/// The workflow input of a start request, checked against the input schema; the error
/// says what is wrong with it.
async fn input_of(
    shared: &Shared,
    workflow: &Workflow,
    message: &Message,
) -> std::result::Result<Value, String> {
    let bucket = subjects::artifact_bucket(&shared.ns);
    let input = match wire::request_input(message, &bucket) {
        Ok(InputSource::Inline(v)) => v,
        Ok(InputSource::Object(bucket, name)) => {
            shared.artifacts.get_in(&bucket, &name).await.map_err(|e| {
                format!("input artifact '{name}' in bucket '{bucket}' could not be read: {e}")
            })?
        }
        Err(e) => return Err(format!("invalid input: {e}")),
    };
    check_input(workflow, &input)?;
    Ok(input)
}

/// Once a new run's `Started` event is stored, tells the caller its request was accepted.
/// A request sent again before its run's record exists finds its `Started` already stored
/// (`stored` false): its caller is then attached, in case it comes from another reply
/// address.
async fn begun(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    caller: &Caller,
    (stored, envelope): (bool, Envelope),
) -> Result<Option<Vec<u8>>> {
    if !stored {
        return attach(shared, workflow, execution, envelope).await;
    }
    accept(shared, workflow, execution, caller).await;
    Ok(None)
}

/// A request sent again while its run goes on: a caller from another reply address joins
/// the run; one from the address the run will answer needs nothing.
async fn join(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    record: &RunRecord,
    caller: Caller,
    input: Value,
) -> Result<Option<Vec<u8>>> {
    if record
        .callers()
        .iter()
        .any(|c| c.reply_to == caller.reply_to)
    {
        accept(shared, workflow, execution, &caller).await;
        return Ok(None);
    }
    // A joining caller's copy of the input is not used: a large one is left out.
    let large = serde_json::to_vec(&input).map_or(true, |b| b.len() > shared.config.inline_limit);
    let input = if large { Value::Null } else { input };
    let envelope = Envelope {
        event: Event::Started { input },
        caller: Some(caller),
        attach: true,
        definition: None,
        wake: None,
    };
    attach(shared, workflow, execution, envelope).await
}

async fn attach(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    envelope: Envelope,
) -> Result<Option<Vec<u8>>> {
    let Some(caller) = envelope.caller.as_ref().filter(|c| c.reply_to.is_some()) else {
        return Ok(None);
    };
    let key = names::final_marker(&workflow.name, execution, caller);
    let msg_id = msg_id::run_attach(&key);
    publish_event(shared, &workflow.name, execution, &msg_id, &envelope).await?;
    accept(shared, workflow, execution, caller).await;
    Ok(None)
}

/// Tells the caller its request is in the run's stream (a `submitted` status update), so
/// that a caller that hears nothing knows to send it again.
async fn accept(shared: &Shared, workflow: &Workflow, execution: &ExecutionId, caller: &Caller) {
    let Some(status_to) = &caller.status_to else {
        return;
    };
    let text = Part::text(format!("accepted as run {execution} of {}", workflow.name));
    let bytes = reply::status_update(caller, execution, TaskState::Submitted, vec![text]);
    let token = shared.seal.token_of(caller);
    let h = shared
        .seal
        .answer_headers(token.as_deref(), status_to, &bytes);
    if let Err(e) = shared
        .client
        .publish_with_headers(status_to.clone(), h, bytes.into())
        .await
    {
        tracing::debug!("telling a caller that run {execution} was accepted failed: {e}");
    }
}

/// The final reply of an ended run, for a caller that asked again (its request `received`
/// then): sent only with the right to send it ([`crate::shell::worker::final_claim`]),
/// which the replica ending the run may hold (its reply is on its way, or the run's outbox
/// has yet to send it), so that no caller gets two.
async fn answer_ended(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    record: &RunRecord,
    caller: &Caller,
    received: SystemTime,
) -> Result<Option<Vec<u8>>> {
    let Some(address) = &caller.reply_to else {
        return Ok(None);
    };
    // The starting caller's reply is claimed once per run; another address's per address.
    let marker = if record.caller.reply_to.as_ref() == Some(address) {
        names::final_marker(&workflow.name, execution, &record.caller)
    } else {
        let attached = Caller {
            attached: true,
            ..caller.clone()
        };
        names::final_marker(&workflow.name, execution, &attached)
    };
    // Built before the right to send is taken: once taken, the reply leaves at once.
    let ending = ended_run(shared, execution, record)?;
    let dialect = shared.config.dialect;
    let reply = reply::final_reply(workflow, execution, caller, &ending, dialect);
    let markers = Markers::of(shared);
    let sent = match markers.claim(&marker, Claimant::Answerer, received).await? {
        Some(claim) => {
            let token = shared.seal.token_of(caller);
            let (to, status) = (address, ending.status);
            let token = token.as_deref();
            markers
                .send(&marker, claim, to, reply, status, token)
                .await?;
            true
        }
        None => false,
    };
    if !sent {
        // A sign of life, so that the caller waits for the reply on its way.
        if let Some(status_to) = &caller.status_to {
            let text = Part::text(format!(
                "run {execution} has ended: its final reply is on its way to this address"
            ));
            let bytes = reply::status_update(caller, execution, TaskState::Working, vec![text]);
            let token = shared.seal.token_of(caller);
            let h = shared
                .seal
                .answer_headers(token.as_deref(), status_to, &bytes);
            let _ = shared
                .client
                .publish_with_headers(status_to.clone(), h, bytes.into())
                .await;
        }
    }
    // Sent (and marked so) here, not returned: the mark must follow the reply.
    Ok(None)
}

/// How the ended run of `record` ended, as its callers are told: a large output is named
/// by the artifact the commit ending the run stored, never stored again here.
fn ended_run(
    shared: &Shared,
    execution: &ExecutionId,
    record: &RunRecord,
) -> Result<reply::Ending> {
    let state = &record.state;
    effects::ending(
        shared,
        execution,
        state.status,
        state.output.as_ref(),
        record.output_artifact,
        state.error.as_ref(),
    )
}

/// The answer to `tasks/get` of run `execution`, asked for by `task_id` (see
/// `reply::run_state`); an ended run's large output is named by its artifact.
async fn run_state(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    record: &RunRecord,
    task_id: &str,
    request_id: &Value,
) -> Vec<u8> {
    let state = &record.state;
    let ending = if state.status.is_terminal() {
        let ending = ended_run(shared, execution, record);
        match ending {
            Ok(ending) => Some(ending),
            Err(e) => {
                let e = ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    format!("reading how run {execution} ended: {e}"),
                );
                let id = serde_json::from_value(request_id.clone()).ok();
                return wire::error_response(id, e);
            }
        }
    } else {
        None
    };
    let context = record.caller.context_id.as_deref().unwrap_or(&execution.0);
    let task = reply::run_state(
        workflow,
        execution,
        task_id,
        context,
        state,
        ending.as_ref(),
    );
    wire::response(request_id, task)
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
