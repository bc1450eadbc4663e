//! Carrying out `Admit` and `Release`: one compare-and-swap of the run's gate entry in
//! `{ns}_wf_flow` (what changes is decided by `run/flow.rs`), then `Admitted` published to
//! every run holding a slot there. Both come from the outbox of a committed event, so a
//! replica that dies before or after the swap leaves them to whichever replica takes the
//! event next; both are safe to carry out again (see `run/flow.rs`).

use messages::msg_id;

use crate::core::{Event, ExecutionId};
use crate::definition::Workflow;
use crate::shell::context::Shared;
use crate::shell::error::Result;
use crate::shell::run::envelope::Envelope;
use crate::shell::run::flow::{gate_key, Admission, Gate, Limits, MAX_WAITING};
use crate::shell::store::events::publish_event;
use crate::shell::store::runs::{put_in, read_from};

/// A run's request of a slot, or its giving one back.
pub(in crate::shell) enum Change {
    /// `Command::Admit`.
    Admit,
    /// `Command::Release`.
    Release,
}

/// The run a change is for: its workflow, its id, and the priority its request gave.
pub(in crate::shell) struct FlowRun<'a> {
    /// The node's handles.
    pub(in crate::shell) shared: &'a Shared,
    /// The run's definition.
    pub(in crate::shell) workflow: &'a Workflow,
    /// The run.
    pub(in crate::shell) execution: &'a ExecutionId,
    /// `metadata.priority` of its start request, if any.
    pub(in crate::shell) priority: Option<u8>,
}

impl FlowRun<'_> {
    /// Admits or releases this run at the gate of concurrency key `key`.
    pub(in crate::shell) async fn change(&self, change: Change, key: &str) -> Result<()> {
        let flow = &self.workflow.flow;
        let limits = Limits::of(flow);
        let gate_key = gate_key(&self.workflow.name, flow, key);
        let bucket = &self.shared.flow;
        let run = self.execution.0.as_str();
        // The request's own priority, else the workflow's.
        let priority = self.priority.unwrap_or(flow.priority);
        let (gate, admission) = loop {
            let read = read_from(bucket, &gate_key).await?;
            let (revision, mut gate) = match &read {
                Some((revision, bytes)) => (*revision, serde_json::from_slice::<Gate>(bytes)?),
                None => (0, Gate::default()),
            };
            let before = gate.clone();
            let admission = match change {
                Change::Admit => Some(gate.admit(run, key, priority, limits)),
                Change::Release => {
                    gate.release(run, limits);
                    None
                }
            };
            if gate == before {
                break (gate, admission);
            }
            let bytes = serde_json::to_vec(&gate)?;
            let js = &self.shared.js;
            if put_in(js, bucket, &gate_key, bytes, Some(revision), None)
                .await?
                .is_some()
            {
                break (gate, admission);
            }
            // Another replica changed the gate first: read it again.
        };
        if admission == Some(Admission::Full) {
            return self.refuse(key).await;
        }
        self.admit_holders(&gate).await
    }

    /// Publishes `Admitted` to every run holding a slot at `gate`: the ones admitted now,
    /// and any whose admission was lost with a replica. A run that runs already ignores
    /// it, and the stream keeps one per run within its duplicate window.
    async fn admit_holders(&self, gate: &Gate) -> Result<()> {
        for holder in &gate.holders {
            let Ok(execution) = ExecutionId::parse(&holder.run) else {
                continue;
            };
            let envelope = Envelope::event(Event::Admitted);
            let id = msg_id::run_admitted(&holder.run);
            publish_event(self.shared, &self.workflow.name, &execution, &id, &envelope).await?;
        }
        Ok(())
    }

    /// Ends this run failed: too many runs wait at its gate.
    async fn refuse(&self, key: &str) -> Result<()> {
        let shown = if key.is_empty() {
            String::new()
        } else {
            format!(" for concurrency key '{key}'")
        };
        let reason = format!(
            "{MAX_WAITING} runs of workflow '{}' already wait{shown}: this one is refused",
            self.workflow.name
        );
        let envelope = Envelope::event(Event::Abandoned { reason });
        let id = msg_id::run_refused(&self.execution.0);
        publish_event(
            self.shared,
            &self.workflow.name,
            self.execution,
            &id,
            &envelope,
        )
        .await
        .map(drop)
    }
}
