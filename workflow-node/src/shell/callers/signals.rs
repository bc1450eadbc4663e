//! Signals into a running run (`workflow_signal`), for its `wait` nodes: checked here,
//! against the run's record and its own definition, so that the sender hears at once why
//! a signal is refused (unknown run or key, run ended, no wait node for it, a payload the
//! node's schema refuses, a sender who may not send it, too many kept); an accepted one
//! becomes a `SignalReceived` event in the run's stream, de-duplicated by its id, and the
//! core delivers it to the waiting node or keeps it until one waits.
//!
//! Who may send: the node's `signers` when it lists any (checked as approvers are, see
//! `identity`); otherwise whoever may steer the run (`identity::may_cancel`): a signal
//! that names the run by its caller's task id under the caller's `Mesh-Caller`, or one
//! signed by the key that started it or an operator's. A signal found by key names no run,
//! so without signers it takes that key or an operator's, as naming an execution id does.
//! An event trigger's signal ([`deliver`] called by the node itself) was checked by the
//! trigger's subject permissions and skips this.
//!
//! A signal by key finds the run by reading the workflow's runs: the one whose wait node
//! for this signal waits under this key. Two runs waiting under one key are refused (the
//! sender then names the run).

use std::sync::Arc;

use messages::jsonrpc::{codes, ErrorObject};
use messages::msg_id;
use messages::signal::{valid_signal_id, WorkflowSignal, MAX_SIGNAL_KEY};

use crate::core::{self, Detail, Event, ExecutionId, NodeStatus, Signal};
use crate::definition::{valid_signal_name, NodeKind, WaitNode, Workflow};
use crate::shell::callers::{cancels, identity};
use crate::shell::context::Shared;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::record::RunRecord;
use crate::shell::store::events::publish_event;
use crate::shell::store::inspect::Inspector;

/// The sender of a signal, as far as the checks go.
pub(in crate::shell) enum Sender<'a> {
    /// A request on the workflow's subject: its identity is checked.
    Request(&'a async_nats::Message),
    /// The node itself (an event trigger routing its event): trusted.
    Node,
}

/// Checks and records signal `s` sent to a run of `served`; the answer's text, or why not.
pub(in crate::shell) async fn deliver(
    shared: &Shared,
    served: &Arc<Workflow>,
    sender: Sender<'_>,
    s: WorkflowSignal,
) -> Result<String, ErrorObject> {
    check_shape(&s).map_err(invalid)?;
    let (execution, record, named) = find(shared, served, &sender, &s).await?;
    // A copy of a signal already taken (a producer's retry, a redelivery) changes nothing,
    // whether or not its node still waits.
    if let Some(id) = s
        .signal_id
        .as_ref()
        .filter(|id| record.state.signals.taken.contains(id))
    {
        return Ok(format!(
            "signal '{}' (id {id}) was already recorded for run {execution}: this copy changes \
             nothing",
            s.signal
        ));
    }
    let workflow = shared
        .versions
        .for_run(served, record.definition.as_deref())
        .await
        .map_err(|e| {
            internal(format!(
                "the definition of run {execution} cannot be read: {e}"
            ))
        })?;
    let (node, def) = target(&workflow, &record, &execution, &s.signal)?;
    if let Some(why) = core::refused_payload(def, &s.data) {
        return Err(invalid(why));
    }
    let by = match sender {
        Sender::Node => None,
        Sender::Request(msg) => who(shared, msg, &execution, &record, named, node, def, &s)
            .await
            .map_err(|why| ErrorObject::new(codes::NOT_PERMITTED, why))?,
    };
    let waiting = record.state.node_status(node) == NodeStatus::Waiting;
    let taken_now = waiting && !record.state.is_paused();
    if !taken_now && record.state.signals.kept.len() >= core::MAX_KEPT_SIGNALS {
        return Err(conflict(format!(
            "run {execution} already keeps {} signals for nodes that do not wait yet: signal \
             '{}' is not kept (send it once node '{node}' waits)",
            core::MAX_KEPT_SIGNALS,
            s.signal
        )));
    }
    if !taken_now && !core::keepable(&s.data) {
        return Err(conflict(format!(
            "node '{node}' of run {execution} does not wait yet, and a payload kept until it \
             does is at most {} bytes: send signal '{}' once it waits",
            core::MAX_KEPT_SIGNAL_BYTES,
            s.signal
        )));
    }
    let id = s
        .signal_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    if record.state.signals.taken.contains(&id) {
        return Ok(format!(
            "signal '{}' (id {id}) was already recorded for run {execution}: this copy changes \
             nothing",
            s.signal
        ));
    }
    let event = Event::SignalReceived {
        signal: Signal {
            name: s.signal.clone(),
            id: id.clone(),
            data: s.data,
            by,
            at: core::Millis(0),
        },
    };
    let fact = msg_id::signal(&execution.0, &id);
    let stored = publish_event(
        shared,
        &workflow.name,
        &execution,
        &fact,
        &Envelope::event(event),
    )
    .await
    .map_err(|e| internal(format!("could not record the signal: {e}")))?;
    let how = if !stored {
        "was already recorded: this copy changes nothing"
    } else if waiting {
        "recorded for the node waiting for it"
    } else {
        "kept until the node waits for it"
    };
    Ok(format!(
        "signal '{}' (id {id}) to node '{node}' of run {execution} {how}",
        s.signal
    ))
}

/// Refuses a signal whose fields are malformed, before anything is read.
fn check_shape(s: &WorkflowSignal) -> Result<(), String> {
    if !valid_signal_name(&s.signal) {
        return Err(format!(
            "'{}' is not a signal name: letters, digits, '_' and '-', at most {}",
            s.signal.chars().take(80).collect::<String>(),
            crate::definition::MAX_SIGNAL_NAME
        ));
    }
    if let Some(id) = &s.signal_id {
        if !valid_signal_id(id) {
            return Err(format!(
                "signal_id: letters, digits, '_' and '-', at most {} (got {} bytes)",
                messages::signal::MAX_SIGNAL_ID,
                id.len()
            ));
        }
    }
    match (&s.execution_id, &s.key) {
        (Some(_), Some(_)) => Err("give execution_id or key, not both".into()),
        (None, None) => Err("give the run (execution_id) or a key".into()),
        (_, Some(k)) if k.is_empty() || k.len() > MAX_SIGNAL_KEY => Err(format!(
            "key: 1 to {MAX_SIGNAL_KEY} bytes (got {})",
            k.len()
        )),
        _ => Ok(()),
    }
}

/// The run a signal names (by id or key), with how it was named.
async fn find(
    shared: &Shared,
    served: &Workflow,
    sender: &Sender<'_>,
    s: &WorkflowSignal,
) -> Result<(ExecutionId, RunRecord, identity::Named), ErrorObject> {
    if let Some(id) = &s.execution_id {
        let caller = match sender {
            Sender::Request(msg) => identity::caller_name(msg),
            Sender::Node => None,
        };
        let found = cancels::find(shared, served, caller.as_deref(), id)
            .await
            .map_err(|e| internal(format!("finding the run: {e}")))?;
        return found.ok_or_else(|| not_found(format!("no run of {} with id '{id}'", served.name)));
    }
    let key = s.key.as_deref().unwrap_or_default();
    let inspector = Inspector::open(shared.client.clone(), &shared.ns)
        .await
        .map_err(|e| internal(format!("reading the runs: {e}")))?;
    let runs = inspector
        .list(Some(&served.name))
        .await
        .map_err(|e| internal(format!("reading the runs: {e}")))?;
    let (mut waiting, runs_taken): (Vec<_>, Vec<_>) = runs
        .into_iter()
        .partition(|r| !r.record.state.status.is_terminal() && waited_under(&r.record, s, key));
    if waiting.is_empty() {
        // No run waits under the key: the one run that already took this very signal (by
        // its id; its wait node, finished, no longer shows the key) is the run it names,
        // and the copy is answered as such.
        if let Some(id) = &s.signal_id {
            let mut took: Vec<_> = runs_taken
                .into_iter()
                .filter(|r| r.record.state.signals.taken.contains(id))
                .collect();
            if took.len() == 1 {
                let run = took.remove(0);
                return Ok((run.execution, run.record, identity::Named::ExecutionId));
            }
        }
    }
    match waiting.len() {
        0 => Err(not_found(format!(
            "no run of {} waits for signal '{}' under key '{key}'",
            served.name, s.signal
        ))),
        1 => {
            let run = waiting.remove(0);
            Ok((run.execution, run.record, identity::Named::ExecutionId))
        }
        n => {
            let ids: Vec<String> = waiting.iter().map(|r| r.execution.0.clone()).collect();
            Err(conflict(format!(
                "{n} runs of {} wait for signal '{}' under key '{key}' ({}): name the run",
                served.name,
                s.signal,
                ids.join(", ")
            )))
        }
    }
}

/// The wait node of `workflow` that takes `signal` in this run: the one waiting, else the
/// first one not started; or why none will.
fn target<'w>(
    workflow: &'w Workflow,
    record: &RunRecord,
    execution: &ExecutionId,
    signal: &str,
) -> Result<(&'w str, &'w WaitNode), ErrorObject> {
    let state = &record.state;
    if state.status.is_terminal() {
        return Err(conflict(format!(
            "run {execution} already ended ({}): signal '{signal}' is not delivered",
            state.status.as_str()
        )));
    }
    let nodes: Vec<(&str, &WaitNode)> = workflow
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Wait(def) if def.signal == signal => Some((n.id.as_str(), def)),
            _ => None,
        })
        .collect();
    if nodes.is_empty() {
        return Err(invalid(format!(
            "{} has no wait node for signal '{signal}'",
            workflow.name
        )));
    }
    if state.stopping {
        return Err(conflict(format!(
            "run {execution} is stopping: signal '{signal}' is not delivered"
        )));
    }
    let status = |id: &str| state.node_status(id);
    let found = nodes
        .iter()
        .find(|(id, _)| status(id) == NodeStatus::Waiting)
        .or_else(|| {
            nodes
                .iter()
                .find(|(id, _)| status(id) == NodeStatus::Pending)
        });
    found.copied().ok_or_else(|| {
        let (id, _) = nodes[0];
        conflict(format!(
            "no node of run {execution} waits for signal '{signal}' any more (node '{id}' is {})",
            status(id).as_str()
        ))
    })
}

/// Who sends the signal, when the node lists signers; `None` when it does not (and the
/// sender may steer the run); or why the sender may not.
#[allow(clippy::too_many_arguments)]
async fn who(
    shared: &Shared,
    msg: &async_nats::Message,
    execution: &ExecutionId,
    record: &RunRecord,
    named: identity::Named,
    node: &str,
    def: &WaitNode,
    s: &WorkflowSignal,
) -> Result<Option<String>, String> {
    if def.signers.is_empty() {
        let signer = identity::signer(shared, msg)
            .await
            .map_err(|e| format!("the request's signature is refused: {e}"))?;
        identity::may_cancel(
            &shared.config,
            execution,
            &record.caller,
            named,
            signer.as_deref(),
        )?;
        return Ok(None);
    }
    let reply = msg.reply.as_ref().map(|r| r.as_str());
    let signed = (
        msg.headers.as_ref(),
        msg.subject.as_str(),
        reply,
        &msg.payload[..],
    );
    let by = identity::signal_sender(&shared.config, node, &def.signers, signed, s.by.as_deref())?;
    crate::shell::callers::nonces::first_use(shared, msg.headers.as_ref())
        .await
        .map_err(|e| format!("the signal to '{node}' is refused: {e}"))?;
    Ok(Some(by))
}

fn invalid(why: String) -> ErrorObject {
    ErrorObject::new(codes::INVALID_PARAMS, why)
}

/// Whether a wait node of `record` waits (or waited) for signal `s` under `key`.
fn waited_under(record: &RunRecord, s: &WorkflowSignal, key: &str) -> bool {
    record.state.nodes.values().any(|n| {
        matches!(&n.detail, Some(Detail::Wait(w))
            if w.signal == s.signal && w.key.as_deref() == Some(key))
    })
}

fn not_found(why: String) -> ErrorObject {
    ErrorObject::new(codes::TASK_NOT_FOUND, why)
}

fn conflict(why: String) -> ErrorObject {
    ErrorObject::new(codes::CONFLICT, why)
}

fn internal(why: String) -> ErrorObject {
    ErrorObject::new(codes::INTERNAL_ERROR, why)
}
