//! Carrying out the core's commands: dispatching agent calls, cancelling them, arming
//! timers, telling the run's callers its progress and approval requests, and the final
//! reply, once to each caller.

use std::sync::Arc;

use std::time::Duration;

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::HeaderMap;
use messages::a2a::{Message, Part, Role, TaskState};
use messages::jsonrpc::Request;
use messages::payload::{wrap, JSON_MIME};
use messages::workflow::{WorkflowApprovalRequest, WorkflowNodeRequest};
use messages::{call_proof, headers, msg_id, subjects};
use serde_json::{json, Value};

use crate::core::{
    Command, Dispatch, Event, ExecutionId, Failure, FailureClass, RunError, RunStatus, Slot,
};
use crate::definition::Workflow;
use crate::shell::context::now;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Result};
use crate::shell::run::envelope::Caller;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::names;
use crate::shell::run::reply::{self, Ending};
use crate::shell::run::wake::WakeWrite;
use crate::shell::store::events::publish_event;
use crate::shell::store::runs;
use crate::shell::telemetry::traces::RunTrace;
use crate::shell::worker::final_claim::{Claimant, Markers};
use crate::shell::worker::flow::{Change, FlowRun};
use crate::shell::worker::slots;
use crate::shell::worker::wakes::WakeEntry;

/// Everything a command needs to know about its run.
pub(in crate::shell) struct RunContext<'a> {
    pub(in crate::shell) shared: &'a Arc<Shared>,
    pub(in crate::shell) workflow: &'a Workflow,
    pub(in crate::shell) execution: &'a ExecutionId,
    /// Who hears of the run: its caller first, then callers attached by a resent request.
    pub(in crate::shell) callers: &'a [Caller],
}

impl RunContext<'_> {
    /// Carries out `commands` in order, and fails on the first that cannot be: every
    /// command is safe to carry out again, and the outbox does so when the event comes
    /// back. Disarming a timer is the exception: one left armed only costs a no-op event.
    ///
    /// Timers are the run's wake (`wake`), written by [`write_wake`](Self::write_wake):
    /// `StartTimer` and `CancelTimer` write nothing here, except for an outbox entry
    /// committed before wakes existed (`legacy_timers`), whose timers have entries of
    /// their own. Those writes are pipelined: sent in order, their acks awaited together
    /// at the end.
    pub(in crate::shell) async fn carry_out(
        &self,
        commands: &[Command],
        legacy_timers: bool,
    ) -> Result<()> {
        let mut timer_acks = Vec::new();
        let mut disarm_acks = Vec::new();
        // An event's progress (a node ended, the next started) goes to each caller as one
        // status update, before anything else tells them more.
        let mut progress = Vec::new();
        for command in commands {
            if matches!(
                command,
                Command::RequestApproval { .. } | Command::Finish { .. }
            ) {
                self.tell_callers(std::mem::take(&mut progress)).await?;
            }
            match command {
                Command::CancelTimer { .. } | Command::StartTimer { .. } if !legacy_timers => {}
                Command::CancelTimer { timer } => {
                    disarm_acks.push(self.disarm(&timer.key()).await?);
                }
                Command::StartTimer { timer, at } => {
                    let rec = WakeEntry {
                        workflow: self.workflow.name.clone(),
                        execution: self.execution.clone(),
                        timer: timer.clone(),
                        at: *at,
                        wake: None,
                    };
                    timer_acks.push(self.arm(&timer.key(), &rec).await?);
                }
                Command::Dispatch(d) => self.dispatch(d).await?,
                Command::Admit { key } => self.flow_run().change(Change::Admit, key).await?,
                Command::Release { key } => self.flow_run().change(Change::Release, key).await?,
                Command::CancelCall {
                    sub_task_id, agent, ..
                } => {
                    // A called workflow takes this on its cancel subject too, and cancels
                    // the run it started for this sub-task (see `cancels`): the run is
                    // named by our sub-task id, scoped by us, its caller.
                    // It proves itself with the call's token: only the caller can stop it.
                    let req = Request::tasks_cancel(sub_task_id.as_str(), sub_task_id.as_str());
                    let subject = subjects::agent_cancel(&self.shared.ns, agent);
                    let payload = serde_json::to_vec(&req)?;
                    let token = self
                        .shared
                        .seal
                        .call_token(&self.workflow.name, sub_task_id);
                    let mac = call_proof::mac(&token, &subject, &payload);
                    let mut h = HeaderMap::new();
                    h.insert(headers::CALLER, self.workflow.name.as_str());
                    h.insert(call_proof::CALL_MAC, mac.as_str());
                    // The token too: a cancel that overtakes the called workflow's start is
                    // kept, and holds only with the token the start brings (the cancel
                    // subject, like the request subject, is heard only by its server).
                    h.insert(call_proof::CALL_TOKEN, token.as_str());
                    self.shared
                        .client
                        .publish_with_headers(subject, h, payload.into())
                        .await
                        .context(|| format!("cancelling call {sub_task_id}"))?;
                }
                Command::ReleaseSlot { agent, sub_task_id } => {
                    slots::release(self.shared, agent, sub_task_id).await?;
                }
                Command::Progress(p) => {
                    progress.push(reply::progress_part(self.workflow, self.execution, p));
                }
                Command::RequestApproval {
                    node,
                    approvers,
                    message,
                    ..
                } => {
                    let request = WorkflowApprovalRequest {
                        workflow_name: self.workflow.name.clone(),
                        execution_id: self.execution.0.clone(),
                        node_id: node.clone(),
                        approvers: approvers.clone(),
                        message: message.clone().unwrap_or_default(),
                    };
                    let part = Part::data_part(&request);
                    let subject = subjects::approvals(&self.shared.ns, &self.workflow.name);
                    let bytes = serde_json::to_vec(&part)?;
                    self.shared
                        .client
                        .publish(subject, bytes.into())
                        .await
                        .context(|| format!("asking for approval of {node}"))?;
                    self.tell_callers(vec![part]).await?;
                }
                Command::Finish {
                    status,
                    output,
                    error,
                } => {
                    self.finish(*status, output.as_ref(), error.as_ref())
                        .await?
                }
            }
        }
        self.tell_callers(progress).await?;
        for ack in timer_acks {
            ack.await
                .context(|| format!("arming a timer of run {}", self.execution))?;
        }
        for ack in disarm_acks {
            if let Err(e) = ack.await {
                tracing::debug!("disarming a timer of run {} failed: {e}", self.execution);
            }
        }
        Ok(())
    }

    /// The run as its flow control's gate sees it (see `worker::flow`).
    fn flow_run(&self) -> FlowRun<'_> {
        FlowRun {
            shared: self.shared,
            workflow: self.workflow,
            execution: self.execution,
            priority: self.primary().priority,
        }
    }

    /// The caller whose call depth and trace context the run's calls carry on.
    fn primary(&self) -> &Caller {
        static NOBODY: std::sync::OnceLock<Caller> = std::sync::OnceLock::new();
        self.callers
            .first()
            .unwrap_or_else(|| NOBODY.get_or_init(Caller::default))
    }

    /// Starts the writes of the run's wake entry: the new wake armed (its ack, to await
    /// before the event is acked) and the old one removed (a failure only costs a wake
    /// that fires for nothing).
    pub(in crate::shell) async fn write_wake(
        &self,
        write: &WakeWrite,
    ) -> Result<Option<PublishAckFuture>> {
        if let Some(old) = &write.drop {
            match self.disarm(&old.key()).await {
                Ok(ack) => drop(ack),
                Err(e) => tracing::debug!("dropping wake {} failed: {e}", old.key()),
            }
        }
        let Some((wake, timer)) = &write.arm else {
            return Ok(None);
        };
        let rec = WakeEntry {
            workflow: self.workflow.name.clone(),
            execution: self.execution.clone(),
            timer: timer.clone(),
            at: wake.at,
            wake: Some(wake.n),
        };
        self.arm(&wake.key(), &rec).await.map(Some)
    }

    /// Starts writing a timer's entry; the returned ack says it is stored.
    async fn arm(&self, timer: &str, rec: &WakeEntry) -> Result<PublishAckFuture> {
        let key = names::timer_key(&self.workflow.name, self.execution, timer);
        let subject = subjects::kv_key(&names::wakes_bucket(&self.shared.ns), &key);
        // A timer nobody disarms (its run's end was lost with a replica) still goes.
        let ttl =
            Duration::from_millis(rec.at.0.saturating_sub(now().0)) + self.shared.config.retention;
        let mut h = HeaderMap::new();
        h.insert(
            async_nats::header::NATS_MESSAGE_TTL,
            ttl.as_secs().max(1).to_string().as_str(),
        );
        self.shared
            .js
            .publish_with_headers(subject, h, serde_json::to_vec(rec)?.into())
            .await
            .context(|| format!("arming timer {key}"))
    }

    /// Starts purging a timer's entry with a marker that expires (per-message TTL), so
    /// disarmed timers leave nothing behind in the bucket.
    async fn disarm(&self, timer: &str) -> Result<PublishAckFuture> {
        let key = names::timer_key(&self.workflow.name, self.execution, timer);
        let subject = subjects::kv_key(&names::wakes_bucket(&self.shared.ns), &key);
        let mut h = HeaderMap::new();
        h.insert("KV-Operation", "PURGE");
        h.insert(async_nats::header::NATS_ROLLUP, "sub");
        h.insert(async_nats::header::NATS_MESSAGE_TTL, "1");
        self.shared
            .js
            .publish_with_headers(subject, h, "".into())
            .await
            .context(|| format!("disarming timer {key}"))
    }

    async fn dispatch(&self, d: &Dispatch) -> Result<()> {
        let shared = self.shared;
        let agent = d.target.agent_name();
        let registry = &shared.registry;
        let wait = shared.config.card_wait;
        let Some(card) = crate::shell::mesh::registry::wait_for(
            registry,
            &shared.client,
            &shared.ns,
            agent,
            wait,
        )
        .await
        else {
            let failure = Failure {
                class: FailureClass::Unreachable,
                message: format!(
                    "agent '{agent}' has no card on the mesh (namespace '{}'; agents seen: {})",
                    shared.ns,
                    shared.registry.names().join(", ")
                ),
                kind: None,
            };
            let event = Event::CallFailed {
                task: d.task.clone(),
                attempt: d.attempt,
                failure,
            };
            let envelope = Envelope::event(event);
            let msg_id = msg_id::no_card(&d.sub_task_id);
            return publish_event(
                shared,
                &self.workflow.name,
                self.execution,
                &msg_id,
                &envelope,
            )
            .await
            .map(drop);
        };
        // A limited agent's call goes only once its gate admits it; else its run hears
        // that it waits, and a grant dispatches it again. Asked once the card is at hand,
        // so the gate's clock (its rate's window) is the send's.
        if shared.gates.limits(agent).is_some()
            && !slots::admit(shared, &self.workflow.name, self.execution, d).await?
        {
            return Ok(());
        }
        // Only the call's receiver learns its token, which its reply and status updates
        // must be proven with; the sub-task id, seen by many, is no secret.
        let wire_id = &d.sub_task_id;
        let token = shared.seal.call_token(&self.workflow.name, &d.sub_task_id);
        let (card_in, card_out) = card.schemas();
        let (map_index, loop_iteration) = match d.task.slot {
            Slot::Item(i) => (Some(u64::from(i)), None),
            Slot::Iteration(i) => (None, Some(u64::from(i))),
            _ => (None, None),
        };
        let request = WorkflowNodeRequest {
            workflow_name: self.workflow.name.clone(),
            node_id: d.node_id.clone(),
            input_schema: d.input_schema.clone().or(card_in),
            output_schema: d.output_schema.clone().or(card_out),
            suggested_output_filename: Some(format!("{}.json", d.sub_task_id)),
            execution_id: Some(self.execution.0.clone()),
            sub_task_id: Some(wire_id.to_owned()),
            map_index,
            loop_iteration,
            attempt: Some(d.attempt),
        };
        let mut parts = vec![shared
            .config
            .dialect
            .rewrite_part(Part::data_part(&request))];
        if let Some(text) = d.instruction.as_ref().filter(|t| !t.is_empty()) {
            parts.push(Part::text(text.clone()));
        }
        let input = serde_json::to_vec(&d.input)?;
        if input.len() > shared.config.inline_limit {
            let name = shared.seal.object_name(&d.sub_task_id, ".input.json");
            let uri = shared
                .artifacts
                .put(&name, input)
                .await
                .context(|| format!("storing the input of call {}", d.sub_task_id))?;
            parts.push(Part::file_uri(uri, Some(name), Some(JSON_MIME.into())));
        } else {
            parts.push(wrap(d.input.clone()));
        }
        let mut message = Message::new(wire_id.to_owned(), Role::User, parts);
        message.task_id = Some(wire_id.to_owned());
        message.context_id = Some(self.execution.0.clone());
        let mut req = Request::message_send(wire_id.as_str(), message);
        if let messages::jsonrpc::Method::MessageSend(p) = &mut req.method {
            let meta = json!({
                "workflow_name": self.workflow.name,
                "node_id": d.node_id,
                "execution_id": self.execution.0,
                "sub_task_id": wire_id,
            });
            p.metadata = meta.as_object().cloned();
        }
        let mut h = HeaderMap::new();
        let status_to = subjects::agent_status(&shared.ns, &self.workflow.name, wire_id);
        h.insert(headers::STATUS_TO, status_to.as_str());
        h.insert(headers::CALLER, self.workflow.name.as_str());
        h.insert(call_proof::CALL_TOKEN, token.as_str());
        h.insert(
            headers::CALL_DEPTH,
            (self.primary().call_depth + 1).to_string().as_str(),
        );
        // The attempt's span (emitted when it ends) is the agent's parent; without traces,
        // the caller's context passes through.
        let caller_tp = self.primary().traceparent.as_deref();
        if agent_sdk::telemetry::active() {
            let tp =
                RunTrace::new(self.execution, caller_tp).attempt_traceparent(&d.task, d.attempt);
            h.insert(headers::TRACEPARENT, tp.as_str());
        } else if let Some(tp) = caller_tp {
            h.insert(headers::TRACEPARENT, tp);
        }
        let reply = subjects::agent_response(&shared.ns, &self.workflow.name, wire_id);
        let subject = subjects::agent_request(&shared.ns, agent);
        shared
            .client
            .publish_with_reply_and_headers(subject, reply, h, serde_json::to_vec(&req)?.into())
            .await
            .context(|| format!("sending call {} to {agent}", d.sub_task_id))
    }

    /// Tells every caller `parts` in one status update (nothing for no parts).
    pub(in crate::shell) async fn tell_callers(&self, parts: Vec<Part>) -> Result<()> {
        if parts.is_empty() {
            return Ok(());
        }
        for caller in self.callers {
            self.tell(caller, parts.clone()).await?;
        }
        Ok(())
    }

    async fn tell(&self, caller: &Caller, parts: Vec<Part>) -> Result<()> {
        let Some(status_to) = &caller.status_to else {
            return Ok(());
        };
        let dialect = self.shared.config.dialect;
        let parts = parts.into_iter().map(|p| dialect.rewrite_part(p)).collect();
        let bytes = reply::status_update(caller, self.execution, TaskState::Working, parts);
        let token = self.shared.seal.token_of(caller);
        let h = self
            .shared
            .seal
            .answer_headers(token.as_deref(), status_to, &bytes);
        self.shared
            .client
            .publish_with_headers(status_to.clone(), h, bytes.into())
            .await
            .context(|| format!("telling a caller of run {} its progress", self.execution))
    }

    /// Tells every caller how the run ended, and sends each its final reply once.
    async fn finish(
        &self,
        status: RunStatus,
        output: Option<&Value>,
        error: Option<&RunError>,
    ) -> Result<()> {
        // The commit that ended the run stored an output over the inline limit as its
        // artifact (see `apart`), by the limit this reply is made with.
        let ending = ending(self.shared, self.execution, status, output, false, error)?;
        let result = reply::execution_result_part(self.workflow, self.execution, &ending);
        for caller in self.callers {
            self.tell(caller, vec![result.clone()]).await?;
            self.final_reply(caller, &ending).await?;
        }
        Ok(())
    }

    /// Sends `caller` the final reply, unless another replica has the right to
    /// ([`crate::shell::worker::final_claim`]): no caller gets two final replies for one request, and one whose
    /// reply was lost with a dying replica resends its request (same task id) and is
    /// answered from the ended run's record.
    async fn final_reply(&self, caller: &Caller, ending: &Ending) -> Result<()> {
        let Some(reply_to) = &caller.reply_to else {
            return Ok(());
        };
        let marker = names::final_marker(&self.workflow.name, self.execution, caller);
        // Built before the right to send is taken: once taken, the reply leaves at once.
        let dialect = self.shared.config.dialect;
        let reply = reply::final_reply(self.workflow, self.execution, caller, ending, dialect);
        let markers = Markers::of(self.shared);
        // The claim's age is judged by other replicas: by the servers' clock.
        let now = crate::shell::clock::system_now();
        let claimed = markers.claim(&marker, Claimant::Finisher, now).await?;
        let Some(claim) = claimed else {
            return Ok(()); // another replica's to send, or sent
        };
        let token = self.shared.seal.token_of(caller);
        markers
            .send(
                &marker,
                claim,
                reply_to,
                reply,
                ending.status,
                token.as_deref(),
            )
            .await
            .context(|| format!("sending the final reply of run {}", self.execution))?;
        Ok(())
    }
}

/// How run `execution` ended, as its callers are told: an output larger than the inline
/// limit is named by the run's output artifact ([`runs::output_artifact`]), which the
/// commit ending the run stored (`stored`: the record says so; its output is then not
/// read). Nothing is stored here: every answer, from any replica, names that one object.
pub(in crate::shell) fn ending(
    shared: &Shared,
    execution: &ExecutionId,
    status: RunStatus,
    output: Option<&Value>,
    stored: bool,
    error: Option<&RunError>,
) -> Result<Ending> {
    let mut ending = Ending {
        status,
        output: output.cloned(),
        artifact: None,
        error: error.cloned(),
    };
    let large = match output {
        _ if stored => true,
        Some(out) => serde_json::to_vec(out)?.len() > shared.config.inline_limit,
        None => false,
    };
    if large {
        ending.output = None;
        ending.artifact = Some(runs::output_artifact(shared, &execution.0));
    }
    Ok(ending)
}
