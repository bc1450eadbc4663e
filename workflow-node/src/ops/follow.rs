//! Following a run live: one stream of its changes, which the CLI's `runs watch` prints
//! and the web view's event feed sends. The agents' status subject is subscribed and the
//! run's key watched before the record is read again, so no change after the first read
//! is missed; the stream ends after the run's record shows it ended.

use futures::StreamExt;
use messages::subjects;

use crate::shell::callers::statuses::{self, AgentUpdate};
use crate::shell::{FoundRun, Inspector};

use super::refusal::Refusal;
use super::runs::Runs;

/// One change of a followed run.
#[derive(Debug, Clone)]
pub enum Change {
    /// A newer record of the run (the last one shows it ended).
    Run(Box<FoundRun>),
    /// A status update one of its agents sent.
    Status(Box<AgentUpdate>),
}

/// The changes of one run, from [`Follow::start`], read with [`Follow::next`].
pub struct Follow {
    inspector: Inspector,
    run: FoundRun,
    watching: Option<(async_nats::Subscriber, async_nats::jetstream::kv::Watch)>,
    pending: Option<FoundRun>,
}

impl Follow {
    /// Starts following `run` (as found in `runs`); a run that ended has no changes.
    pub async fn start(runs: &Runs, run: FoundRun) -> Result<Follow, Refusal> {
        let inspector = runs
            .inspector()
            .ok_or_else(|| Refusal::not_found(format!("no run {}", run.execution)))?
            .clone();
        let mut follow = Follow {
            inspector,
            run,
            watching: None,
            pending: None,
        };
        if follow.ended() {
            return Ok(follow);
        }
        let subject = subjects::agent_status_all(runs.namespace(), &follow.run.workflow);
        let updates = runs
            .client()
            .subscribe(subject)
            .await
            .map_err(|e| Refusal::unavailable(format!("subscribing to status updates: {e}")))?;
        let changes = follow
            .inspector
            .watch(&follow.run.workflow, &follow.run.execution)
            .await?;
        follow.watching = Some((updates, changes));
        // The record may have changed between the first read and the watch.
        let (workflow, execution) = (&follow.run.workflow, &follow.run.execution);
        if let Some(now) = follow.inspector.read_run(workflow, execution).await? {
            if now.revision > follow.run.revision {
                follow.pending = Some(now);
            }
        }
        Ok(follow)
    }

    /// The run as last seen.
    pub fn run(&self) -> &FoundRun {
        &self.run
    }

    /// Whether the run as last seen has ended.
    pub fn ended(&self) -> bool {
        self.run.record.state.status.is_terminal()
    }

    /// The next change; `None` once the run has ended. A run whose record is gone (its
    /// retention passed) is [`RefusalKind::NotFound`](super::refusal::RefusalKind).
    /// Cancel-safe between changes: it may race other futures in a `select!`.
    pub async fn next(&mut self) -> Result<Option<Change>, Refusal> {
        if let Some(run) = self.pending.take() {
            self.run = run.clone();
            return Ok(Some(Change::Run(Box::new(run))));
        }
        if self.ended() {
            return Ok(None);
        }
        let Some((updates, changes)) = &mut self.watching else {
            return Ok(None);
        };
        loop {
            tokio::select! {
                changed = Inspector::changed(changes, &self.run) => {
                    changed?;
                    let (workflow, execution) = (&self.run.workflow, &self.run.execution);
                    let Some(next) = self.inspector.read_run(workflow, execution).await? else {
                        return Err(Refusal::not_found(format!(
                            "run {} is gone (its retention passed)",
                            self.run.execution
                        )));
                    };
                    self.run = next.clone();
                    return Ok(Some(Change::Run(Box::new(next))));
                }
                Some(msg) = updates.next() => {
                    let Some(u) = statuses::interpret(&msg.subject, &msg.payload) else {
                        continue;
                    };
                    if u.execution == self.run.execution {
                        return Ok(Some(Change::Status(Box::new(u))));
                    }
                }
            }
        }
    }
}
