//! The agents' gates in KV (`{ns}_wf_agent_gates`, one entry per limited agent, see
//! `run::gate`): a call to a limited agent is sent only once its gate admits it, and a
//! call that ends gives its slot back. Every change is a compare-and-swap of the agent's
//! entry, read from the stream leader, so the limits hold across replicas; agents without
//! limits never reach this file (no KV access on their path).
//!
//! What a waiting call hears is an event in its own run's stream: `SlotWaiting` (its
//! timeout stops) and later `SlotGranted` (it is sent, its timeout starts), each with a
//! message id of its sub-task id, so a release carried out twice grants once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use messages::msg_id;

use crate::core::{Dispatch, Event, ExecutionId, Millis};
use crate::definition::{AgentLimits, Workflow};
use crate::shell::context::{now, Shared};
use crate::shell::error::Result;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::gate::{Admit, Gate, Holder, FILL};
use crate::shell::store::events::publish_event;
use crate::shell::store::runs::put_in;
use crate::shell::store::schedules::read_json;

/// How many times a gate's compare-and-swap is tried before the operation fails (and its
/// event is tried again).
const MAX_CONFLICTS: usize = 64;

/// The limits of the agents this node's workflows limit, and their bucket.
#[derive(Default)]
pub(crate) struct Gates {
    /// By agent name: the tightest limits any hosted definition declares.
    limits: BTreeMap<String, AgentLimits>,
    /// The bucket; `None` when no workflow limits an agent.
    bucket: Option<kv::Store>,
    /// By agent, when this replica's timer next fills its gate: one timer per opening,
    /// however many calls found the rate's window full.
    fills: Mutex<BTreeMap<String, Millis>>,
}

impl Gates {
    /// The tightest limits the `workflows` declare, agent by agent.
    pub(in crate::shell) fn merged(workflows: &[Workflow]) -> BTreeMap<String, AgentLimits> {
        let mut out: BTreeMap<String, AgentLimits> = BTreeMap::new();
        for w in workflows {
            for (agent, l) in &w.agent_limits {
                let merged = out.get(agent).map_or(*l, |m| m.tightest(*l));
                out.insert(agent.clone(), merged);
            }
        }
        out
    }

    /// The gates of `limits`, kept in `bucket`.
    pub(in crate::shell) fn new(
        limits: BTreeMap<String, AgentLimits>,
        bucket: Option<kv::Store>,
    ) -> Gates {
        Gates {
            limits,
            bucket,
            fills: Mutex::default(),
        }
    }

    /// Whether any agent is limited.
    pub(in crate::shell) fn any(&self) -> bool {
        !self.limits.is_empty()
    }

    /// The limits of `agent`'s calls, if any.
    pub(in crate::shell) fn limits(&self, agent: &str) -> Option<&AgentLimits> {
        self.limits.get(agent)
    }
}

/// Whether the call may be sent now; when not, its run is told it waits.
pub(in crate::shell) async fn admit(
    shared: &Arc<Shared>,
    workflow: &str,
    execution: &ExecutionId,
    d: &Dispatch,
) -> Result<bool> {
    let agent = d.target.agent_name();
    let (Some(limits), Some(bucket)) = (shared.gates.limits(agent), &shared.gates.bucket) else {
        return Ok(true);
    };
    let now = now();
    let call = Holder {
        id: d.sub_task_id.clone(),
        workflow: workflow.to_string(),
        execution: execution.clone(),
        task: d.task.clone(),
        attempt: d.attempt,
        span_ms: d.deadline.0.saturating_sub(now.0).max(1),
        expires: Millis(0),
        granted_by: None,
        granted_at: None,
    };
    for _ in 0..MAX_CONFLICTS {
        let (revision, gate) = read_json::<Gate>(bucket, agent, "agent gate").await?;
        let mut gate = gate.unwrap_or_default();
        let admit = gate.admit(call.clone(), limits, now);
        let changed = match admit {
            Admit::Send { changed } | Admit::Wait { changed } => changed,
        };
        if changed && !write(shared, bucket, agent, &gate, revision).await? {
            continue;
        }
        shared
            .metrics
            .agent_gate(agent, gate.holders.len(), gate.waiters.len());
        return match admit {
            Admit::Send { .. } => Ok(true),
            Admit::Wait { .. } => {
                let event = Event::SlotWaiting {
                    task: d.task.clone(),
                    attempt: d.attempt,
                };
                let fact = msg_id::slot_waiting(&d.sub_task_id);
                publish_event(shared, workflow, execution, &fact, &Envelope::event(event)).await?;
                schedule_fill(shared, agent, &gate, limits);
                Ok(false)
            }
        };
    }
    Err(conflicts(agent))
}

/// The call `sub_task_id` to `agent` ended: its slot (or its place in line) is given
/// back, and the waiters it lets through are told.
pub(in crate::shell) async fn release(
    shared: &Arc<Shared>,
    agent: &str,
    sub_task_id: &str,
) -> Result<()> {
    let (Some(limits), Some(bucket)) = (shared.gates.limits(agent), &shared.gates.bucket) else {
        return Ok(());
    };
    let now = now();
    for _ in 0..MAX_CONFLICTS {
        let (revision, gate) = read_json::<Gate>(bucket, agent, "agent gate").await?;
        let Some(mut gate) = gate else {
            return Ok(());
        };
        if gate.release(sub_task_id, limits, now)
            && !write(shared, bucket, agent, &gate, revision).await?
        {
            continue;
        }
        shared
            .metrics
            .agent_gate(agent, gate.holders.len(), gate.waiters.len());
        tell_granted(shared, &gate, sub_task_id).await?;
        schedule_fill(shared, agent, &gate, limits);
        return Ok(());
    }
    Err(conflicts(agent))
}

/// Lets waiters through once the rate's window opens (and holders past their expiry go):
/// a task of this replica's. Were it to die first, the waiting runs' liveness checks
/// admit the first in line.
fn schedule_fill(shared: &Arc<Shared>, agent: &str, gate: &Gate, limits: &AgentLimits) {
    let Some(at) = gate.next_opening(limits) else {
        return;
    };
    {
        let mut fills = shared.gates.fills.lock().unwrap_or_else(|p| p.into_inner());
        let armed = fills.get(agent).is_some_and(|t| *t <= at && t.0 >= now().0);
        if armed {
            return;
        }
        fills.insert(agent.to_string(), at);
    }
    let shared = shared.clone();
    let agent = agent.to_string();
    tokio::spawn(async move {
        let wait = Duration::from_millis(at.0.saturating_sub(now().0));
        tokio::time::sleep(wait).await;
        if let Err(e) = fill(&shared, &agent).await {
            tracing::warn!(agent, error = %e, "letting waiting calls through failed");
        }
    });
}

async fn fill(shared: &Arc<Shared>, agent: &str) -> Result<()> {
    let (Some(limits), Some(bucket)) = (shared.gates.limits(agent), &shared.gates.bucket) else {
        return Ok(());
    };
    for _ in 0..MAX_CONFLICTS {
        let now = now();
        let (revision, gate) = read_json::<Gate>(bucket, agent, "agent gate").await?;
        let Some(mut gate) = gate else {
            return Ok(());
        };
        if gate.fill(limits, now) && !write(shared, bucket, agent, &gate, revision).await? {
            continue;
        }
        tell_granted(shared, &gate, FILL).await?;
        schedule_fill(shared, agent, &gate, limits);
        return Ok(());
    }
    Err(conflicts(agent))
}

/// Publishes `SlotGranted` to the run of every holder `by` let through.
async fn tell_granted(shared: &Arc<Shared>, gate: &Gate, by: &str) -> Result<()> {
    for h in gate.granted_by(by) {
        let event = Event::SlotGranted {
            task: h.task.clone(),
            attempt: h.attempt,
        };
        let fact = msg_id::slot_granted(&h.id);
        let envelope = Envelope::event(event);
        publish_event(shared, &h.workflow, &h.execution, &fact, &envelope).await?;
    }
    Ok(())
}

async fn write(
    shared: &Shared,
    bucket: &kv::Store,
    agent: &str,
    gate: &Gate,
    revision: u64,
) -> Result<bool> {
    let bytes = serde_json::to_vec(gate)?;
    Ok(
        put_in(&shared.js, bucket, agent, bytes, Some(revision), None)
            .await?
            .is_some(),
    )
}

fn conflicts(agent: &str) -> crate::shell::error::Error {
    crate::shell::error::Error::Connection {
        context: format!("writing agent {agent}'s gate"),
        source: format!("it changed under {MAX_CONFLICTS} writes in a row").into(),
    }
}
