//! Carrying out the core's commands: dispatching agent calls, cancelling them, arming
//! timers, publishing progress and approval requests, and the one final reply.

use std::sync::Arc;

use async_nats::jetstream::kv::CreateErrorKind;
use async_nats::HeaderMap;
use messages::a2a::{
    AgentReply, Message, Part, Role, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use messages::jsonrpc::Request;
use messages::payload::{wrap, JSON_MIME};
use messages::workflow::{
    MapStatus, NodeOutcome, ResultStatus, RunOutcome, SwitchCaseInfo, WorkflowApprovalRequest,
    WorkflowExecutionResult, WorkflowExecutionStart, WorkflowMapProgress,
    WorkflowNodeExecutionResult, WorkflowNodeExecutionStart, WorkflowNodeRequest,
    WorkflowNodeResult,
};
use messages::{headers, msg_id, subjects};
use serde_json::{json, Value};

use super::record::Caller;
use super::timers::TimerRecord;
use super::wire;
use super::{names, now, publish_event, Envelope, Shared};
use crate::core::{
    Command, Dispatch, Event, ExecutionId, Failure, FailureClass, NodeStatus, Progress, RunStatus,
    Slot,
};
use crate::definition::{JoinStrategy, NodeKind, Workflow};

/// Everything a command needs to know about its run.
pub(super) struct RunContext<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) workflow: &'a Workflow,
    pub(super) execution: &'a ExecutionId,
    pub(super) caller: &'a Caller,
}

impl RunContext<'_> {
    /// Carries out `commands` in order. Failures to publish are logged: every command is
    /// safe to carry out again, and the outbox does so when the event is redelivered.
    ///
    /// Timer writes are pipelined: each is sent in order, and their acks are awaited
    /// together at the end, so a dispatch does not wait behind a KV round trip, while the
    /// event is still acked only once every timer is stored.
    pub(super) async fn carry_out(&self, commands: &[Command]) -> Result<(), async_nats::Error> {
        let mut timer_acks = Vec::new();
        let mut disarm_acks = Vec::new();
        for command in commands {
            match command {
                Command::CancelTimer { timer } => {
                    // A purge whose marker expires (per-message TTL), so disarmed timers
                    // leave nothing behind in the bucket.
                    let key = names::timer_key(&self.workflow.name, self.execution, &timer.key());
                    let subject = subjects::kv_key(&names::timers_bucket(&self.shared.ns), &key);
                    let mut h = HeaderMap::new();
                    h.insert("KV-Operation", "PURGE");
                    h.insert(async_nats::header::NATS_ROLLUP, "sub");
                    h.insert(async_nats::header::NATS_MESSAGE_TTL, "1");
                    disarm_acks.push(
                        self.shared
                            .js
                            .publish_with_headers(subject, h, "".into())
                            .await?,
                    );
                }
                Command::Dispatch(d) => self.dispatch(d).await?,
                Command::CancelCall {
                    sub_task_id, agent, ..
                } => {
                    let req = Request::tasks_cancel(sub_task_id.as_str(), sub_task_id.as_str());
                    let subject = subjects::agent_cancel(&self.shared.ns, agent);
                    self.shared
                        .client
                        .publish(subject, serde_json::to_vec(&req)?.into())
                        .await?;
                }
                Command::StartTimer { timer, at } => {
                    let key = names::timer_key(&self.workflow.name, self.execution, &timer.key());
                    let rec = TimerRecord {
                        workflow: self.workflow.name.clone(),
                        execution: self.execution.clone(),
                        timer: timer.clone(),
                        at: *at,
                    };
                    let subject = subjects::kv_key(&names::timers_bucket(&self.shared.ns), &key);
                    timer_acks.push(
                        self.shared
                            .js
                            .publish(subject, serde_json::to_vec(&rec)?.into())
                            .await?,
                    );
                }
                Command::Progress(p) => self.progress(p).await?,
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
                    self.shared.client.publish(subject, bytes.into()).await?;
                    self.status(part).await?;
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
        for ack in timer_acks {
            ack.await?;
        }
        // A timer that stays armed only costs a no-op event later: never fail for this.
        for ack in disarm_acks {
            if let Err(e) = ack.await {
                tracing::debug!("disarming a timer of run {} failed: {e}", self.execution);
            }
        }
        Ok(())
    }

    async fn dispatch(&self, d: &Dispatch) -> Result<(), async_nats::Error> {
        let shared = self.shared;
        let agent = d.target.agent_name();
        let Some(card) = shared
            .registry
            .wait_for(shared, agent, shared.config.card_wait)
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
            let envelope = Envelope {
                event,
                caller: None,
            };
            let msg_id = msg_id::no_card(&d.sub_task_id);
            return publish_event(
                shared,
                &self.workflow.name,
                self.execution,
                &msg_id,
                &envelope,
            )
            .await;
        };
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
            sub_task_id: Some(d.sub_task_id.clone()),
            map_index,
            loop_iteration,
            attempt: Some(d.attempt),
        };
        let mut parts = vec![Part::data_part(&request)];
        if let Some(text) = d.instruction.as_ref().filter(|t| !t.is_empty()) {
            parts.push(Part::text(text.clone()));
        }
        let input = serde_json::to_vec(&d.input)?;
        if input.len() > shared.config.inline_limit {
            let name = format!("{}.input.json", d.sub_task_id);
            let uri = shared.put_artifact(&name, input).await?;
            parts.push(Part::file_uri(uri, Some(name), Some(JSON_MIME.into())));
        } else {
            parts.push(wrap(d.input.clone()));
        }
        let mut message = Message::new(d.sub_task_id.clone(), Role::User, parts);
        message.task_id = Some(d.sub_task_id.clone());
        message.context_id = Some(self.execution.0.clone());
        let mut req = Request::message_send(d.sub_task_id.as_str(), message);
        if let messages::jsonrpc::Method::MessageSend(p) = &mut req.method {
            let meta = json!({
                "workflow_name": self.workflow.name,
                "node_id": d.node_id,
                "execution_id": self.execution.0,
                "sub_task_id": d.sub_task_id,
            });
            p.metadata = meta.as_object().cloned();
        }
        let mut h = HeaderMap::new();
        let status_to = subjects::agent_status(&shared.ns, &self.workflow.name, &d.sub_task_id);
        h.insert(headers::STATUS_TO, status_to.as_str());
        h.insert(
            headers::CALL_DEPTH,
            (self.caller.call_depth + 1).to_string().as_str(),
        );
        if let Some(tp) = &self.caller.traceparent {
            h.insert(headers::TRACEPARENT, tp.as_str());
        }
        let reply = subjects::agent_response(&shared.ns, &self.workflow.name, &d.sub_task_id);
        let subject = subjects::agent_request(&shared.ns, agent);
        shared
            .client
            .publish_with_reply_and_headers(subject, reply, h, serde_json::to_vec(&req)?.into())
            .await?;
        Ok(())
    }

    async fn progress(&self, p: &Progress) -> Result<(), async_nats::Error> {
        if self.caller.status_to.is_none() {
            return Ok(());
        }
        let part = match p {
            Progress::RunStarted { input } => Part::data_part(&WorkflowExecutionStart {
                workflow_name: self.workflow.name.clone(),
                execution_id: self.execution.0.clone(),
                input_artifact_ref: None,
                workflow_input: Some(input.clone()),
            }),
            Progress::NodeStarted {
                node_id,
                node_type,
                agent,
                sub_task_id,
                iteration_index,
                parent_node_id,
                attempt,
            } => {
                let mut start = WorkflowNodeExecutionStart {
                    node_id: node_id.clone(),
                    node_type: node_type.clone(),
                    agent_name: agent.clone(),
                    sub_task_id: sub_task_id.clone(),
                    iteration_index: iteration_index.map(u64::from),
                    parent_node_id: parent_node_id.clone(),
                    attempt: *attempt,
                    ..Default::default()
                };
                describe_node(self.workflow, &mut start);
                Part::data_part(&start)
            }
            Progress::NodeFinished {
                node_id,
                status,
                output,
                error,
                condition_result,
                selected_branch,
            } => Part::data_part(&WorkflowNodeExecutionResult {
                node_id: node_id.clone(),
                status: match status {
                    NodeStatus::Success => NodeOutcome::Success,
                    NodeStatus::Skipped => NodeOutcome::Skipped,
                    NodeStatus::Cancelled => NodeOutcome::Cancelled,
                    _ => NodeOutcome::Failure,
                },
                output_artifact_ref: None,
                output: output.clone(),
                error_message: error.clone(),
                condition_result: *condition_result,
                selected_branch: selected_branch.clone(),
                iteration_index: None,
                metadata: None,
            }),
            Progress::MapProgress {
                node_id,
                total_items,
                completed_items,
            } => Part::data_part(&WorkflowMapProgress {
                node_id: node_id.clone(),
                total_items: u64::from(*total_items),
                completed_items: u64::from(*completed_items),
                status: if completed_items == total_items {
                    MapStatus::Completed
                } else {
                    MapStatus::InProgress
                },
            }),
        };
        self.status(part).await
    }

    /// Publishes one status update to the caller.
    async fn status(&self, part: Part) -> Result<(), async_nats::Error> {
        let Some(status_to) = &self.caller.status_to else {
            return Ok(());
        };
        let context = self
            .caller
            .context_id
            .clone()
            .unwrap_or_else(|| self.execution.0.clone());
        let mut message = Message::new(
            format!("{}-status", self.execution),
            Role::Agent,
            vec![part],
        );
        message.task_id = Some(self.execution.0.clone());
        message.context_id = Some(context.clone());
        let update = TaskStatusUpdateEvent {
            task_id: self.execution.0.clone(),
            context_id: context,
            status: TaskStatus {
                state: TaskState::Working,
                message: Some(message),
                timestamp: None,
            },
            is_final: false,
            metadata: None,
        };
        let bytes = wire::response(&self.caller.request_id, AgentReply::StatusUpdate(update));
        self.shared
            .client
            .publish(status_to.clone(), bytes.into())
            .await?;
        Ok(())
    }

    async fn finish(
        &self,
        status: RunStatus,
        output: Option<&Value>,
        error: Option<&crate::core::RunError>,
    ) -> Result<(), async_nats::Error> {
        let shared = self.shared;
        let outcome = match status {
            RunStatus::Success => RunOutcome::Success,
            RunStatus::Cancelled => RunOutcome::Cancelled,
            _ => RunOutcome::Failure,
        };
        let error_message = error.map(|e| e.message.clone());
        let mut artifact = None;
        if let Some(out) = output {
            let bytes = serde_json::to_vec(out)?;
            if bytes.len() > shared.config.inline_limit {
                let name = format!("{}.output.json", self.execution);
                artifact = Some((name.clone(), shared.put_artifact(&name, bytes).await?));
            }
        }
        let inline_output = if artifact.is_some() {
            None
        } else {
            output.cloned()
        };
        self.status(Part::data_part(&WorkflowExecutionResult {
            workflow_name: self.workflow.name.clone(),
            execution_id: self.execution.0.clone(),
            status: outcome,
            output_artifact_ref: None,
            workflow_output: inline_output.clone(),
            error_message: error_message.clone(),
            error_node_id: error.and_then(|e| e.node_id.clone()),
        }))
        .await?;
        let Some(reply_to) = &self.caller.reply_to else {
            return Ok(());
        };
        // One final reply per run: a redelivered Finish (its replica died after replying,
        // before the ack) finds the marker and stays quiet. Only a death between the
        // publish and the marker's write can still duplicate it.
        let marker = names::final_marker(&self.workflow.name, self.execution);
        let Some(claim) = self.claim_final(&marker).await? else {
            return Ok(());
        };
        let mut parts = Vec::new();
        if self.caller.workflow_caller {
            parts.push(Part::data_part(&WorkflowNodeResult {
                status: if status == RunStatus::Success {
                    ResultStatus::Success
                } else {
                    ResultStatus::Failure
                },
                output: inline_output.clone(),
                artifact_name: artifact.as_ref().map(|(n, _)| n.clone()),
                artifact_version: None,
                error_message: error_message.clone(),
                error_kind: (status == RunStatus::Cancelled).then(|| "cancelled".to_string()),
                validation_errors: None,
                retry_count: 0,
            }));
        }
        match (&inline_output, &artifact) {
            (Some(out), _) => parts.push(wrap(out.clone())),
            (None, Some((name, uri))) => parts.push(Part::file_uri(
                uri.clone(),
                Some(name.clone()),
                Some(JSON_MIME.into()),
            )),
            _ => {}
        }
        let (state, summary) = match status {
            RunStatus::Success => (
                TaskState::Completed,
                format!("Workflow {} completed", self.workflow.name),
            ),
            RunStatus::Cancelled => (
                TaskState::Canceled,
                format!("Workflow {} was cancelled", self.workflow.name),
            ),
            _ => (
                TaskState::Failed,
                format!(
                    "Workflow {} failed: {}",
                    self.workflow.name,
                    error_message.unwrap_or_default()
                ),
            ),
        };
        parts.push(Part::text(summary));
        let task_id = self
            .caller
            .sub_task_id
            .clone()
            .unwrap_or_else(|| self.execution.0.clone());
        let context = self
            .caller
            .context_id
            .clone()
            .unwrap_or_else(|| self.execution.0.clone());
        let reply = wire::task(&task_id, &context, state, parts);
        let bytes = wire::response(&self.caller.request_id, reply);
        let mut h = HeaderMap::new();
        h.insert(headers::MSG_ID, msg_id::final_reply(&task_id).as_str());
        // The marker's write is queued right behind the reply, with no wait in between, so a
        // replica killed after the reply left has almost surely sent the marker too; its
        // ack also says the server took the reply first (one connection keeps order).
        let mut cas = HeaderMap::new();
        cas.insert(
            async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            claim.to_string().as_str(),
        );
        let marker_subject = subjects::kv_key(&names::runs_bucket(&shared.ns), &marker);
        shared
            .client
            .publish_with_headers(reply_to.clone(), h, bytes.into())
            .await?;
        let marked = shared
            .js
            .publish_with_headers(marker_subject, cas, state_name(status).into())
            .await;
        if let Err(e) = async { marked?.await.map(drop) }.await {
            tracing::warn!(
                "the final reply of run {} went out, but its marker could not say so: {e}",
                self.execution
            );
        }
        Ok(())
    }

    /// Claims the sending of the final reply with a `create` on its marker, so that two
    /// replicas holding the same Finish (one slow, one given the redelivery) cannot both
    /// send it. `None`: it was sent. A claim younger than [`FINAL_CLAIM_TTL_MS`] is
    /// another replica's, sending now: an error, so the event is retried later. An older
    /// one's replica died before marking the reply sent: it is taken over (the reply may
    /// then go out twice, which is the at-least-once end of the promise).
    async fn claim_final(&self, marker: &str) -> Result<Option<u64>, async_nats::Error> {
        let runs = &self.shared.runs;
        let at = now().0;
        let claim = format!("{FINAL_CLAIM}{at}");
        match runs.create(marker, claim.clone().into()).await {
            Ok(rev) => return Ok(Some(rev)),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        let Some(entry) = runs.entry(marker).await? else {
            return Err(
                format!("the final-reply marker of run {} vanished", self.execution).into(),
            );
        };
        let value = String::from_utf8_lossy(&entry.value);
        let Some(claimed_at) = value
            .strip_prefix(FINAL_CLAIM)
            .and_then(|t| t.parse::<u64>().ok())
        else {
            return Ok(None); // sent: the marker holds the run's status
        };
        if at.saturating_sub(claimed_at) < FINAL_CLAIM_TTL_MS {
            return Err(format!(
                "another replica is sending the final reply of run {}",
                self.execution
            )
            .into());
        }
        Ok(Some(
            runs.update(marker, claim.into(), entry.revision).await?,
        ))
    }
}

/// A final-reply marker holding this prefix (and the claim's time) is a claim: a replica is
/// sending the reply. Once sent, the marker holds the run's status.
const FINAL_CLAIM: &str = "claimed@";

/// How long a claim on the final reply holds before another replica takes it over: longer
/// than a live replica takes to publish and flush, even through a NATS reconnect.
const FINAL_CLAIM_TTL_MS: u64 = 10_000;

fn state_name(status: RunStatus) -> &'static str {
    status.as_str()
}

/// Fills the kind-specific fields of a node start from the definition.
fn describe_node(workflow: &Workflow, start: &mut WorkflowNodeExecutionStart) {
    let Some(node) = workflow.node(&start.node_id) else {
        return;
    };
    match &node.kind {
        NodeKind::Conditional {
            condition,
            true_branch,
            false_branch,
        } => {
            start.condition = Some(condition.source().to_string());
            start.true_branch = Some(true_branch.clone());
            start.false_branch = false_branch.clone();
        }
        NodeKind::Switch { cases, default } => {
            start.cases = Some(
                cases
                    .iter()
                    .map(|c| SwitchCaseInfo {
                        condition: c.condition.source().to_string(),
                        node: c.target.clone(),
                    })
                    .collect(),
            );
            start.default_branch = default.clone();
        }
        NodeKind::Join { wait_for, strategy } => {
            start.wait_for = Some(wait_for.clone());
            let (name, n) = match strategy {
                JoinStrategy::All => ("all", None),
                JoinStrategy::Any => ("any", None),
                JoinStrategy::NOfM(n) => ("n_of_m", Some(*n as u64)),
            };
            start.join_strategy = Some(name.into());
            start.join_n = n;
        }
        NodeKind::Loop(l) => {
            start.max_iterations = Some(u64::from(l.max_iterations));
            start.loop_delay = l.delay.map(|d| format!("{}s", d.as_secs_f64()));
        }
        _ => {}
    }
}
