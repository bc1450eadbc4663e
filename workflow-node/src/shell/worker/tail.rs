//! The tail of an event: what is left once its commit held and its commands are out. The
//! writes that went out beside the commands (results kept apart, the run's wake, history
//! entries) are confirmed, a replay's tidy commit made, an ended run's keys set to expire,
//! and the spans the event ended emitted. Only then is the event acked: a tail that fails
//! leaves the event to come back, and its outbox entry (still in the run's entry, since the
//! run's next event waits for this tail) carries the work out again.
//!
//! A worker does not wait for a tail before taking the next event of another run (see
//! `worker`); the next event of the same run waits for it.

use std::sync::Arc;

use async_nats::jetstream::context::PublishAckFuture;

use crate::core::ExecutionId;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Result};
use crate::shell::run::plan::{Commit, Ending};
use crate::shell::run::spans::EndedSpan;
use crate::shell::store;
use crate::shell::store::runs;
use crate::shell::telemetry::traces::RunTrace;

/// What is left of an event once its commands are out (see the module doc).
pub(in crate::shell) struct Tail {
    pub(in crate::shell) shared: Arc<Shared>,
    pub(in crate::shell) execution: ExecutionId,
    /// The run's key, for the tidy commit.
    pub(in crate::shell) key: String,
    /// Puts that went out after the commit (item results, outputs kept apart).
    pub(in crate::shell) after: runs::Pending,
    /// The ack of the run's wake entry, when one was written.
    pub(in crate::shell) wake: Option<PublishAckFuture>,
    /// The history entries the commit published, if it published any.
    pub(in crate::shell) history: Option<store::history::Pending>,
    /// A replay's second commit, dropping the entry it carried out.
    pub(in crate::shell) tidy: Option<Commit>,
    pub(in crate::shell) ending: Option<Ending>,
    pub(in crate::shell) spans: Vec<EndedSpan>,
    /// The caller's trace, the parent of the run's spans.
    pub(in crate::shell) traceparent: Option<String>,
}

impl Tail {
    /// Carries the tail out; the revision of the tidy commit when one was made and held.
    pub(in crate::shell) async fn finish(self) -> Result<Option<u64>> {
        let (shared, execution) = (&*self.shared, &self.execution);
        self.after.stored().await?;
        if let Some(ack) = self.wake {
            ack.await
                .context(|| format!("arming the wake of run {execution}"))?;
        }
        if let Some(pending) = self.history {
            pending.stored(shared).await?;
        }
        let mut revision = None;
        if let Some(tidy) = self.tidy {
            // A failure is harmless: the next commit drops the entry.
            revision = runs::cas(shared, execution, &self.key, tidy)
                .await
                .ok()
                .flatten();
        }
        if let Some(ending) = self.ending {
            runs::end(shared, ending).await?;
        }
        // Last: the commit held and the commands are carried out. A replica that dies before
        // this leaves the event to come back, and the spans are emitted with its replay.
        if !self.spans.is_empty() {
            RunTrace::new(execution, self.traceparent.as_deref()).emit(&self.spans);
        }
        Ok(revision)
    }
}
