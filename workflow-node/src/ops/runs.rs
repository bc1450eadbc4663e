//! The runs of a namespace, read straight from the runs bucket and the history stream
//! ([`crate::shell::inspect`]): listing them with a filter, finding the one a face names,
//! and reading its history. Nothing here writes; steering goes to the workflow's nodes
//! ([`super::steer`]), which check who asks.

use std::time::Duration;

use crate::core::{Millis, RunStatus};
use crate::shell::run::history::HistoryEntry;
use crate::shell::{now, Error as ShellError};
use crate::shell::{Apart, FoundRun, Inspector};

use super::refusal::Refusal;

/// The runs of one namespace, on one connection.
#[derive(Clone)]
pub struct Runs {
    client: async_nats::Client,
    ns: String,
    inspector: Option<Inspector>,
}

/// Which run a face names.
#[derive(Debug, Clone, Copy)]
pub struct RunRef<'a> {
    /// The run's execution id (or, with `workflow`, the task id it was started with).
    pub id: &'a str,
    /// The run's workflow: a run of another one is refused.
    pub workflow: Option<&'a str>,
    /// The caller name (`Mesh-Caller`) a task id was started with.
    pub caller: Option<&'a str>,
}

impl<'a> RunRef<'a> {
    /// The run execution id `id` names, of any workflow.
    pub fn id(id: &'a str) -> RunRef<'a> {
        RunRef {
            id,
            workflow: None,
            caller: None,
        }
    }
}

/// A run status, as a list filter takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFilter {
    /// It waits for a slot under its workflow's flow control.
    Queued,
    /// The main DAG is running.
    Running,
    /// Exit handlers are running.
    Finishing,
    /// It succeeded.
    Success,
    /// It failed.
    Failure,
    /// It was cancelled.
    Cancelled,
    /// It hit its deadline.
    #[value(name = "timed_out", alias = "timed-out")]
    TimedOut,
    /// It is paused.
    Paused,
}

impl StatusFilter {
    /// Whether `run` has this status (`Paused`: it is paused, whatever is below).
    pub fn matches(self, run: &crate::core::Execution) -> bool {
        if self == StatusFilter::Paused || run.is_paused() {
            return self == StatusFilter::Paused && run.is_paused();
        }
        let want = match self {
            StatusFilter::Paused => return false,
            StatusFilter::Queued => RunStatus::Queued,
            StatusFilter::Running => RunStatus::Running,
            StatusFilter::Finishing => RunStatus::Finishing,
            StatusFilter::Success => RunStatus::Success,
            StatusFilter::Failure => RunStatus::Failure,
            StatusFilter::Cancelled => RunStatus::Cancelled,
            StatusFilter::TimedOut => RunStatus::TimedOut,
        };
        run.status == want
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    /// Only runs of this workflow.
    pub workflow: Option<&'a str>,
    /// Only runs in this status.
    pub status: Option<StatusFilter>,
    /// Only runs started within this long.
    pub since: Option<Duration>,
    /// At most this many runs, the newest (0: all).
    pub limit: usize,
}

/// The runs a filter kept, newest first.
#[derive(Debug)]
pub struct Listed {
    /// The runs, at most the filter's limit.
    pub runs: Vec<FoundRun>,
    /// How many matched before the limit.
    pub total: usize,
    /// The time the list was made at (durations of running runs are counted to it).
    pub now: Millis,
}

impl Runs {
    /// Opens the runs bucket of namespace `ns` on `client`; a namespace where no workflow
    /// node ever ran has no runs.
    pub async fn open(client: async_nats::Client, ns: &str) -> Result<Runs, Refusal> {
        let inspector = match Inspector::open(client.clone(), ns).await {
            Ok(i) => Some(i),
            Err(ShellError::Missing(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Runs {
            client,
            ns: ns.to_owned(),
            inspector,
        })
    }

    /// The connection.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The reader of the runs bucket; `None` when no workflow node ever ran here.
    pub fn inspector(&self) -> Option<&Inspector> {
        self.inspector.as_ref()
    }

    /// Every run (of `workflow`, when given), unsorted.
    pub async fn all(&self, workflow: Option<&str>) -> Result<Vec<FoundRun>, Refusal> {
        match &self.inspector {
            Some(i) => Ok(i.list(workflow).await?),
            None => Ok(Vec::new()),
        }
    }

    /// The runs `filter` keeps, newest first.
    pub async fn list(&self, filter: &Filter<'_>) -> Result<Listed, Refusal> {
        let mut runs = self.all(filter.workflow).await?;
        let now = now();
        let after = filter.since.map(|d| now.0.saturating_sub(duration_ms(d)));
        runs.retain(|r| {
            let s = &r.record.state;
            filter.status.is_none_or(|want| want.matches(s))
                && after.is_none_or(|a| s.started_at.0 >= a)
        });
        runs.sort_by(|a, b| {
            let key = |r: &FoundRun| (r.record.state.started_at, r.execution.0.clone());
            key(b).cmp(&key(a))
        });
        let total = runs.len();
        if filter.limit > 0 {
            runs.truncate(filter.limit);
        }
        Ok(Listed { runs, total, now })
    }

    /// The run `which` names: [`RefusalKind::NotFound`](super::refusal::RefusalKind) when
    /// there is none, or it is of another workflow than the one named.
    pub async fn find(&self, which: RunRef<'_>) -> Result<FoundRun, Refusal> {
        let not_found = || {
            let of = which
                .workflow
                .map(|w| format!(" of {w}"))
                .unwrap_or_default();
            Refusal::not_found(format!(
                "no run '{}'{of} in namespace '{}'",
                which.id, self.ns
            ))
        };
        let Some(inspector) = &self.inspector else {
            return Err(not_found());
        };
        let found = inspector
            .find(which.id, which.workflow, which.caller)
            .await?
            .ok_or_else(not_found)?;
        match which.workflow {
            Some(w) if w != found.workflow => Err(Refusal::not_found(format!(
                "run {} is a run of {}, not of {w}",
                found.execution, found.workflow
            ))),
            _ => Ok(found),
        }
    }

    /// The run `which` names, as [`Runs::find`], waiting up to `within` for a run whose
    /// start is stored but whose record is not written yet: a door hands out a task id as
    /// soon as the mesh has stored the start, and its caller may name it at once.
    pub async fn find_soon(
        &self,
        which: RunRef<'_>,
        within: Duration,
    ) -> Result<FoundRun, Refusal> {
        let first = self.find(which).await;
        let (Err(refusal), Some(inspector), Some(workflow)) =
            (&first, &self.inspector, which.workflow)
        else {
            return first;
        };
        let Ok(execution) = crate::core::ExecutionId::parse(which.id) else {
            return first;
        };
        if refusal.kind != super::refusal::RefusalKind::NotFound {
            return first;
        }
        let Ok(mut watch) = inspector.watch(workflow, &execution).await else {
            return first;
        };
        use futures::StreamExt;
        match tokio::time::timeout(within, watch.next()).await {
            Ok(Some(Ok(_))) => self.find(which).await,
            _ => first,
        }
    }

    /// What `run` keeps apart (a large input or output), read back.
    pub async fn apart(&self, run: &FoundRun) -> Result<Apart, Refusal> {
        Ok(self.reader()?.apart(run).await?)
    }

    /// The events applied to `run`, in order.
    pub async fn history(&self, run: &FoundRun) -> Result<Vec<HistoryEntry>, Refusal> {
        Ok(self
            .reader()?
            .history(&run.workflow, &run.execution)
            .await?)
    }

    /// The reader, for a run found in it.
    fn reader(&self) -> Result<&Inspector, Refusal> {
        self.inspector.as_ref().ok_or_else(|| {
            Refusal::not_found(format!("namespace '{}' has no runs bucket", self.ns))
        })
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
