//! The set-up the single-server crash tests share, so that each test file says only what it
//! tests: the machine held alone, one nats-server, stub agents served in the test process
//! (never killed), a spawner of replicas serving one workflow file, a killer over a fleet
//! of them, a run started in the background, and the watch of a workflow's run records
//! with the checks made on them once the runs have ended.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::workflow::{invoke, InvokeError, RunResult};
use futures::{Stream, StreamExt};
use serde_json::json;
use tokio::sync::{watch, RwLockWriteGuard};
use tokio::task::JoinHandle;
use workflow_node::shell::{run::names, RunRecord};

use super::replicas::{write_file, Fleet, Logs, Spawner};
use crate::support;

/// One nats-server with stub agents on it, and a spawner of replicas serving one workflow
/// file against it. Replicas and fleets the test starts are its own locals, dropped (and
/// so killed) before the rig; the machine is held until the rig itself is dropped.
pub(crate) struct Rig {
    /// A connection of the test's own.
    pub(crate) client: async_nats::Client,
    /// The replicas' stderr tail.
    pub(crate) logs: Logs,
    /// Starts replicas serving the workflow file (acks waited 1 s, streams of 1 replica).
    pub(crate) spawner: Spawner,
    _stubs: Vec<agent_sdk::AgentHandle>,
    _dir: tempfile::TempDir,
    server: test_harness::NatsServer,
    _machine: RwLockWriteGuard<'static, ()>,
}

impl Rig {
    /// Holds the machine alone, starts a nats-server, serves the stub agents of `stubs` (a
    /// stub file's YAML) on it and writes `workflow` into `file` for the replicas.
    pub(crate) async fn start(stubs: &str, file: &str, workflow: &str) -> Rig {
        Rig::start_with(test_harness::Options::default(), stubs, file, workflow).await
    }

    /// [`Rig::start`] with a server started with `options`.
    pub(crate) async fn start_with(
        options: test_harness::Options,
        stubs: &str,
        file: &str,
        workflow: &str,
    ) -> Rig {
        let machine = support::process::alone().await;
        let server = test_harness::nats_with(options);
        let dir = tempfile::tempdir().expect("tempdir");
        let client = async_nats::connect(server.url()).await.expect("connect");
        let stubs = serve_stubs(&client, dir.path(), stubs).await;
        let logs = Logs::default();
        let spawner = Spawner {
            workflow_file: write_file(dir.path(), file, workflow),
            ack_wait: 1.0,
            stream_replicas: 1,
            logs: logs.clone(),
        };
        Rig {
            client,
            logs,
            spawner,
            _stubs: stubs,
            _dir: dir,
            server,
            _machine: machine,
        }
    }

    /// The server's client URL.
    pub(crate) fn url(&self) -> String {
        self.server.url()
    }

    /// Starts `n` replicas and waits until they all serve.
    pub(crate) async fn fleet(&self, n: usize) -> Arc<Fleet> {
        Fleet::start(self.spawner.clone(), vec![self.url()], n).await
    }

    /// Starts a run of `workflow` (input `{}`) in the background; its result, or the
    /// caller's error once `patience` has passed without one.
    pub(crate) fn invoke(
        &self,
        workflow: &'static str,
        patience: Duration,
    ) -> JoinHandle<Result<RunResult, InvokeError>> {
        let caller = self.client.clone();
        tokio::spawn(async move {
            invoke(&caller, "mesh", workflow, &json!({}), patience, |_| {}).await
        })
    }
}

/// Serves the stub agents of `stubs` (a stub file's YAML, written into `dir`) on `client`.
pub(crate) async fn serve_stubs(
    client: &async_nats::Client,
    dir: &std::path::Path,
    stubs: &str,
) -> Vec<agent_sdk::AgentHandle> {
    let path = write_file(dir, "stubs.yaml", stubs);
    let file = agent_sdk::stub::load_stub_file(&path).expect("stub file");
    agent_sdk::stub::serve_stubs(client.clone(), "mesh", file)
        .await
        .expect("stubs")
}

/// How often the killer strikes: a random pause in this range between kills (load, not
/// synchronisation).
const KILL_EVERY: (Duration, Duration) = (Duration::from_millis(300), Duration::from_millis(700));

/// A task that `kill -9`s a random replica of a fleet every 300–700 ms and starts a new
/// one in its place, until stopped.
pub(crate) struct Killer {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Killer {
    /// Starts killing replicas of `fleet`.
    pub(crate) fn start(fleet: &Arc<Fleet>) -> Killer {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(fleet.clone().run_killer(KILL_EVERY, stopped));
        Killer { stop, task }
    }

    /// Tells the killer to stop after its current kill, without waiting for it.
    pub(crate) fn halt(&self) {
        let _ = self.stop.send(true);
    }

    /// Stops the killer and waits until it has.
    pub(crate) async fn stop(self) {
        self.halt();
        let _ = self.task.await;
    }
}

/// The records of `workflow`'s runs as they change, from the first (execution id and
/// record; entries that are not a run's record are passed over).
pub(crate) async fn watch_runs(
    client: &async_nats::Client,
    workflow: &str,
) -> impl Stream<Item = (String, RunRecord)> {
    let js = async_nats::jetstream::new(client.clone());
    let runs = js.get_key_value(names::runs_bucket("mesh")).await.unwrap();
    let prefix = format!("{workflow}.");
    let watch = runs
        .watch_with_history(format!("{workflow}.*"))
        .await
        .expect("watch");
    // The watch ends at its first error, as a test's own loop over it did.
    watch
        .take_while(|entry| std::future::ready(entry.is_ok()))
        .filter_map(move |entry| {
            let seen = entry.ok().and_then(|entry| {
                let record = RunRecord::from_entry(&entry.value).ok()?;
                let execution = entry.key.trim_start_matches(&prefix).to_string();
                Some((execution, record))
            });
            std::future::ready(seen)
        })
}

/// Runs by what started them (a slot, an order), then by execution id: each one's latest
/// record.
pub(crate) type RunsBy<K> = BTreeMap<K, BTreeMap<String, RunRecord>>;

/// How many of `runs` have ended.
pub(crate) fn ended<K>(runs: &RunsBy<K>) -> usize {
    runs.values()
        .flat_map(|runs| runs.values())
        .filter(|r| r.state.status.is_terminal())
        .count()
}

/// Whether all of `runs` have ended.
pub(crate) fn all_ended<K>(runs: &RunsBy<K>) -> bool {
    runs.values()
        .flat_map(|runs| runs.values())
        .all(|r| r.state.status.is_terminal())
}

/// Asserts that each `what` (a slot, an order) of `runs` started exactly one run, and that
/// it succeeded (`report` tells the rest on a failure); the runs, for the test's own checks.
pub(crate) fn one_success_each<'a, K: Display>(
    runs: &'a RunsBy<K>,
    what: &str,
    report: impl Fn() -> String,
) -> Vec<(&'a K, &'a String, &'a RunRecord)> {
    let mut each = Vec::new();
    for (key, runs) in runs {
        assert_eq!(
            runs.len(),
            1,
            "{what} {key} started {} runs: {}",
            runs.len(),
            report()
        );
        for (execution, record) in runs {
            assert_eq!(
                record.state.status.as_str(),
                "success",
                "{what} {key}: {:?}",
                record.state
            );
            each.push((key, execution, record));
        }
    }
    each
}

/// Asserts that no trigger parked a message as a dead letter.
pub(crate) async fn assert_none_parked(client: &async_nats::Client) {
    let dead = workflow_node::ops::triggers::list(client, "mesh", None)
        .await
        .unwrap();
    assert!(dead.is_empty(), "parked: {dead:?}");
}
