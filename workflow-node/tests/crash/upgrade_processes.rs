//! Rolling upgrades with real processes: `workflow-node serve` processes serving
//! version 1 or version 2 of one workflow over a real nats-server, agents in the test
//! process, callers that resend as the crash tests' do. Version 1 is `a` then `b`; version 2
//! renames `b` to `c` and adds `d`, which adds 1000 to the value: a run's output says which
//! version ran it (`{"version": "one", "n": i}` or `{"version": "two", "n": i + 1000}`), its
//! record names that version's hash, and its history names the processes that applied its
//! events.
//!
//! `b` and `c` call `Gate`, which holds run `i` until the test lets runs below some number
//! pass: that is how runs are caught mid-way while processes are stopped and started.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Range;
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, AgentError, NodeRequest};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use workflow_node::definition::parse_str;
use workflow_node::shell::Inspector;
use workflow_node::shell::{run::names, RunRecord};

use crate::support;
use crate::support::crash::load::{drive, request_id, Outcome, Plan};
use crate::support::crash::replicas::{write_file, Logs, Replica, Spawner};
use crate::support::crash::{assert_clean, reply_output};

const NAME: &str = "Upgrade";

const V1: &str = r#"
name: Upgrade
workflow:
  description: version 1, a then b
  version: "1"
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
    - {id: b, type: agent, agent_name: Gate, depends_on: [a], input: {n: "{{a.output.n}}"}}
  output_mapping: {version: "one", n: "{{b.output.n}}"}
"#;

const V2: &str = r#"
name: Upgrade
workflow:
  description: version 2, b renamed c, and d added
  version: "2"
  nodes:
    - {id: a, type: agent, agent_name: Echo, input: {n: "{{workflow.input.n}}"}}
    - {id: c, type: agent, agent_name: Gate, depends_on: [a], input: {n: "{{a.output.n}}"}}
    - {id: d, type: agent, agent_name: Add, depends_on: [c], input: {n: "{{c.output.n}}"}}
  output_mapping: {version: "two", n: "{{d.output.n}}"}
"#;

/// A bound on anything the test waits for (a process to serve, runs to reach the gate).
const WAIT: Duration = Duration::from_secs(30);

/// Which version of the workflow a run used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Version {
    One,
    Two,
}

impl Version {
    /// The output run `i` ends with under this version.
    fn output(self, i: usize) -> Value {
        match self {
            Version::One => json!({"version": "one", "n": i}),
            Version::Two => json!({"version": "two", "n": i + 1000}),
        }
    }

    /// The version whose output for run `i` is exactly `output`, if any.
    fn of(output: &Value, i: usize) -> Option<Version> {
        [Version::One, Version::Two]
            .into_iter()
            .find(|v| v.output(i) == *output)
    }

    fn text(self) -> &'static str {
        match self {
            Version::One => V1,
            Version::Two => V2,
        }
    }

    fn hash(self) -> String {
        parse_str(self.text(), "upgrade.yaml")
            .expect("the test's workflow is valid")
            .hash
    }
}

/// The agents, in the test process: `Echo`, `Add` (adds 1000 to `n`) and `Gate`, which
/// reports each call's `n` and answers once `n` is below the number the test sets.
struct Agents {
    _handles: Vec<agent_sdk::AgentHandle>,
    calls: mpsc::UnboundedReceiver<u64>,
    at_gate: HashSet<u64>,
    pass_below: watch::Sender<u64>,
}

impl Agents {
    async fn serve(client: &async_nats::Client) -> Agents {
        let echo = AgentBuilder::new("Echo")
            .max_in_flight(256)
            .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }))
            .serve(client.clone())
            .await
            .expect("Echo");
        let add = AgentBuilder::new("Add")
            .max_in_flight(256)
            .handler(handler_fn(|req: NodeRequest| async move {
                let n = req.input["n"]
                    .as_u64()
                    .ok_or_else(|| AgentError::new(format!("no number n in {}", req.input)))?;
                Ok(json!({"n": n + 1000}))
            }))
            .serve(client.clone())
            .await
            .expect("Add");
        let (called, calls) = mpsc::unbounded_channel();
        let (pass_below, gate) = watch::channel(0u64);
        let gate = AgentBuilder::new("Gate")
            .max_in_flight(256)
            .handler(handler_fn(move |req: NodeRequest| {
                let (called, mut gate) = (called.clone(), gate.clone());
                async move {
                    let n = req.input["n"]
                        .as_u64()
                        .ok_or_else(|| AgentError::new(format!("no number n in {}", req.input)))?;
                    let _ = called.send(n);
                    let _ = gate.wait_for(|below| n < *below).await;
                    Ok(req.input)
                }
            }))
            .serve(client.clone())
            .await
            .expect("Gate");
        Agents {
            _handles: vec![echo, add, gate],
            calls,
            at_gate: HashSet::new(),
            pass_below,
        }
    }

    /// Waits until every run of `runs` has called `Gate` (at most [`WAIT`]).
    async fn wait_at_gate(&mut self, runs: Range<u64>) {
        let all = async {
            while !runs.clone().all(|n| self.at_gate.contains(&n)) {
                let n = self.calls.recv().await.expect("Gate is served");
                self.at_gate.insert(n);
            }
        };
        if tokio::time::timeout(WAIT, all).await.is_err() {
            let missing: Vec<u64> = runs.filter(|n| !self.at_gate.contains(n)).collect();
            panic!("runs {missing:?} did not reach the gate within {WAIT:?}");
        }
    }

    /// Lets runs below `n` through the gate, now and from now on.
    fn pass_below(&self, n: u64) {
        self.pass_below.send_replace(n);
    }
}

/// What each test starts with: a server, the agents, and how to start either version.
struct Setup {
    server: test_harness::NatsServer,
    _dir: tempfile::TempDir,
    client: async_nats::Client,
    agents: Agents,
    logs: Logs,
    v1: Spawner,
    v2: Spawner,
}

impl Setup {
    async fn new() -> Setup {
        let server = test_harness::nats();
        let dir = tempfile::tempdir().expect("tempdir");
        let client = async_nats::connect(server.url()).await.expect("connect");
        let agents = Agents::serve(&client).await;
        let logs = Logs::default();
        let spawner = |file: &str, text: &str| Spawner {
            workflow_file: write_file(dir.path(), file, text),
            ack_wait: 1.0,
            stream_replicas: 1,
            logs: logs.clone(),
        };
        let (v1, v2) = (spawner("v1.yaml", V1), spawner("v2.yaml", V2));
        Setup {
            server,
            _dir: dir,
            client,
            agents,
            logs,
            v1,
            v2,
        }
    }

    /// Starts process `id` serving `version`, and waits until it serves.
    async fn start(&self, id: usize, version: Version) -> Process {
        let spawner = match version {
            Version::One => &self.v1,
            Version::Two => &self.v2,
        };
        let mut replica = spawner.spawn(id, &self.server.url());
        replica.wait_ready(WAIT).await;
        Process {
            pid: replica.pid(),
            version,
            replica,
        }
    }

    /// Sends `runs` runs (`concurrency` at a time) in the background.
    fn drive(
        &self,
        runs: usize,
        concurrency: usize,
    ) -> (tokio::task::JoinHandle<Outcome>, watch::Receiver<usize>) {
        let plan = Plan {
            ns: "mesh".into(),
            workflow: NAME.into(),
            first: 0,
            runs,
            concurrency,
            input: |i| json!({"n": i}),
            deadline: Duration::from_secs(60),
            quiet: Duration::from_secs(2),
            resend_after: Duration::from_secs(3),
        };
        let (completed, progress) = watch::channel(0);
        let client = self.client.clone();
        let driver = tokio::spawn(async move { drive(&client, &plan, completed).await });
        (driver, progress)
    }
}

/// A `serve` process and the version it serves.
struct Process {
    pid: u32,
    version: Version,
    replica: Replica,
}

/// What the checks found.
#[derive(Default)]
struct Findings {
    problems: Vec<String>,
    /// Per run, the version its output and record name (when they agree).
    versions: Vec<Option<Version>>,
    /// Per run, the pids of the processes that applied its events.
    appliers: Vec<BTreeSet<u32>>,
}

/// Checks every run got exactly one final reply, completed, with the output of exactly one
/// version (`must(i)` when it says which), and that its record names that version.
async fn check(
    client: &async_nats::Client,
    outcome: &Outcome,
    runs: usize,
    must: impl Fn(usize) -> Option<Version>,
) -> Findings {
    let mut found = Findings::default();
    if !outcome.missing.is_empty() {
        found
            .problems
            .push(format!("runs {:?} never replied", outcome.missing));
    }
    let records = Records::open(client).await;
    for i in 0..runs {
        let version = check_reply(outcome, i, &must, &mut found.problems);
        let (named, appliers) = records.check(i, &mut found.problems).await;
        if version.is_some() && named != version {
            found.problems.push(format!(
                "run {i} ended with the output of {version:?} but its record names {named:?}"
            ));
        }
        found.versions.push(version.filter(|_| named == version));
        found.appliers.push(appliers);
    }
    found
}

/// The version of run `i`'s only final reply; problems with it go to `problems`.
fn check_reply(
    outcome: &Outcome,
    i: usize,
    must: &impl Fn(usize) -> Option<Version>,
    problems: &mut Vec<String>,
) -> Option<Version> {
    let replies = outcome.replies.get(&i)?;
    if replies.len() != 1 {
        problems.push(format!("run {i} got {} final replies", replies.len()));
    }
    let (state, output) = reply_output(&replies[0]);
    let version = output.as_ref().and_then(|o| Version::of(o, i));
    let expected = must(i);
    if state != "completed" || version.is_none() || (expected.is_some() && version != expected) {
        problems.push(format!(
            "run {i}: {state}, output {output:?} (expected {}); reply {}",
            expected.map_or("either version's".to_string(), |v| format!("{v:?}'s")),
            replies[0]
        ));
    }
    version
}

/// The runs' records and histories.
struct Records {
    kv: async_nats::jetstream::kv::Store,
    inspector: Inspector,
    hashes: BTreeMap<String, Version>,
}

impl Records {
    async fn open(client: &async_nats::Client) -> Records {
        let js = async_nats::jetstream::new(client.clone());
        let kv = js
            .get_key_value(names::runs_bucket("mesh"))
            .await
            .expect("runs bucket");
        let inspector = Inspector::open(client.clone(), "mesh")
            .await
            .expect("runs bucket");
        let hashes = [Version::One, Version::Two]
            .into_iter()
            .map(|v| (v.hash(), v))
            .collect();
        Records {
            kv,
            inspector,
            hashes,
        }
    }

    /// Checks run `i`'s record is terminal and its history complete; the version its record
    /// names, and the pids of the processes that applied its events.
    async fn check(
        &self,
        i: usize,
        problems: &mut Vec<String>,
    ) -> (Option<Version>, BTreeSet<u32>) {
        let execution = names::execution_id(NAME, &request_id(i));
        let key = names::run_key(NAME, &execution);
        let record = match self.kv.get(&key).await {
            Ok(Some(bytes)) => RunRecord::from_entry(&bytes),
            other => {
                problems.push(format!("run {i} ({execution}): no record ({other:?})"));
                return (None, BTreeSet::new());
            }
        };
        let record = match record {
            Ok(record) => record,
            Err(e) => {
                problems.push(format!("run {i}: unreadable record: {e}"));
                return (None, BTreeSet::new());
            }
        };
        if !record.state.status.is_terminal() {
            problems.push(format!("run {i} is left {}", record.state.status.as_str()));
        }
        let named = record
            .definition
            .as_ref()
            .and_then(|h| self.hashes.get(h).copied());
        if named.is_none() {
            problems.push(format!(
                "run {i} names definition {:?}, neither version's",
                record.definition
            ));
        }
        // A history entry is published after its event's commit, beside the final reply:
        // the last one may land a moment after the reply.
        let mut history = Vec::new();
        let complete = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match self.inspector.history(NAME, &execution).await {
                    Ok(h) if h.len() as u64 >= record.applied => return h,
                    Ok(h) => history = h,
                    Err(e) => panic!("reading the history of run {i}: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let history = complete.unwrap_or(history);
        let ns: Vec<u64> = history.iter().map(|e| e.n).collect();
        if ns != (1..=record.applied).collect::<Vec<_>>() {
            problems.push(format!(
                "run {i} applied {} events, its history has {ns:?}",
                record.applied
            ));
        }
        let appliers = history
            .iter()
            .filter_map(|e| e.replica.rsplit('-').next()?.parse().ok())
            .collect();
        (named, appliers)
    }
}

/// Prints how runs split between versions and between processes.
fn report(what: &str, found: &Findings, processes: &[(u32, Version)]) {
    let count = |v: Version| found.versions.iter().filter(|x| **x == Some(v)).count();
    let by_both = found.appliers.iter().filter(|a| a.len() > 1).count();
    let version_of = |pid: &u32| processes.iter().find(|(p, _)| p == pid).map(|(_, v)| *v);
    let crossed = found
        .versions
        .iter()
        .zip(&found.appliers)
        .filter(|(v, a)| v.is_some() && a.iter().any(|pid| version_of(pid) != **v))
        .count();
    eprintln!(
        "{what}: {} runs of version 1, {} of version 2; {by_both} runs had events applied by \
         more than one process, {crossed} by a process serving the other version",
        count(Version::One),
        count(Version::Two),
    );
}

/// How the version 1 process is stopped.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Term,
    Kill,
}

/// Twenty runs wait in `b` under version 1 when its only process is stopped and one
/// serving version 2 starts; then the gate opens. Those twenty end with version 1's output,
/// the ten sent after them (only once one of them ended) with version 2's.
async fn replaced_mid_run(stop: Stop) {
    const RUNS: usize = 30;
    const CAUGHT: usize = 20;
    let mut s = Setup::new().await;
    let v1 = s.start(0, Version::One).await;
    // Only `CAUGHT` runs are sent at first; the rest once a run has ended.
    let (driver, _) = s.drive(RUNS, CAUGHT);
    s.agents.wait_at_gate(0..CAUGHT as u64).await;
    let v1_pid = v1.pid;
    let mut problems = Vec::new();
    match stop {
        Stop::Term => {
            v1.replica.terminate();
            match v1.replica.wait_exit(WAIT).await {
                Some((status, _)) if status.success() => {}
                other => problems.push(format!("the version 1 process on SIGTERM: {other:?}")),
            }
        }
        Stop::Kill => {
            let mut replica = v1.replica;
            replica.kill();
        }
    }
    let v2 = s.start(1, Version::Two).await;
    s.agents.pass_below(u64::MAX);
    let outcome = driver.await.expect("the caller");

    let must = |i| {
        Some(if i < CAUGHT {
            Version::One
        } else {
            Version::Two
        })
    };
    let mut found = check(&s.client, &outcome, RUNS, must).await;
    for (i, appliers) in found.appliers.iter().enumerate() {
        // Caught runs started on the version 1 process and ended on the version 2 one; the
        // others never met version 1's.
        let expected: BTreeSet<u32> = if i < CAUGHT {
            [v1_pid, v2.pid].into()
        } else {
            [v2.pid].into()
        };
        if *appliers != expected {
            problems.push(format!(
                "run {i}: events applied by {appliers:?}, expected {expected:?}"
            ));
        }
    }
    report(
        &format!("replaced ({stop:?}) mid-run"),
        &found,
        &[(v1_pid, Version::One), (v2.pid, v2.version)],
    );
    found.problems.extend(problems);
    assert_clean(&found.problems, &s.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_keep_version_1_when_its_process_is_terminated_and_version_2_takes_over() {
    let _machine = support::process::shared().await;
    replaced_mid_run(Stop::Term).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_keep_version_1_when_its_process_is_killed_and_version_2_takes_over() {
    let _machine = support::process::shared().await;
    replaced_mid_run(Stop::Kill).await;
}

/// Runs in each side-by-side test, and how many are in flight at once.
const SIDE_BY_SIDE_RUNS: usize = 100;
const IN_FLIGHT: usize = 30;

/// The first thirty runs start (and wait in `b`) while only the version 1 process serves;
/// then a version 2 process joins it, the gate opens, and the other seventy runs go to
/// either. Every run ends with one version's output, the first thirty with version 1's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_end_with_their_own_version_while_both_versions_serve() {
    let _machine = support::process::shared().await;
    let mut s = Setup::new().await;
    let v1 = s.start(0, Version::One).await;
    let (driver, _) = s.drive(SIDE_BY_SIDE_RUNS, IN_FLIGHT);
    s.agents.wait_at_gate(0..IN_FLIGHT as u64).await;
    let v2 = s.start(1, Version::Two).await;
    s.agents.pass_below(u64::MAX);
    let outcome = driver.await.expect("the caller");

    let must = |i| (i < IN_FLIGHT).then_some(Version::One);
    let mut found = check(&s.client, &outcome, SIDE_BY_SIDE_RUNS, must).await;
    for (i, appliers) in found.appliers.iter().enumerate().take(IN_FLIGHT) {
        if !appliers.contains(&v1.pid) {
            found.problems.push(format!(
                "run {i} started on the version 1 process, yet its events were applied by \
                 {appliers:?} only"
            ));
        }
    }
    report(
        "both versions at once",
        &found,
        &[(v1.pid, v1.version), (v2.pid, v2.version)],
    );
    assert_clean(&found.problems, &s.logs);
}

/// Both versions serve while runs are in flight, and the version 1 process is killed
/// (SIGKILL) in the middle, then started again. The gate paces the runs so that which
/// version some of them use is known:
/// 1. runs 0–29 start (and wait in `b`) while only the version 1 process serves;
/// 2. a version 2 process joins, runs below 30 pass; once fifteen have ended (runs 30–44
///    are being started by either process), the version 1 process is killed;
/// 3. once runs 30–59 wait at the gate, they pass on the version 2 process alone, and runs
///    60–89 start there;
/// 4. once those wait at the gate, a version 1 process starts again, and everything passes.
///
/// Runs 0–29 end with version 1's output, runs 60–89 with version 2's, the others with
/// either, and each with exactly one version's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_end_with_their_own_version_when_a_process_is_killed_and_restarted() {
    let _machine = support::process::shared().await;
    const STEP: u64 = IN_FLIGHT as u64;
    let mut s = Setup::new().await;
    let v1 = s.start(0, Version::One).await;
    let (driver, mut completed) = s.drive(SIDE_BY_SIDE_RUNS, IN_FLIGHT);
    s.agents.wait_at_gate(0..STEP).await;
    let v2 = s.start(1, Version::Two).await;
    s.agents.pass_below(STEP);
    // (The guard `wait_for` returns is dropped at once: it blocks the caller's updates.)
    let fifteen = tokio::time::timeout(WAIT, completed.wait_for(|n| *n >= 15))
        .await
        .is_ok_and(|r| r.is_ok());
    assert!(fifteen, "15 runs did not end in {WAIT:?}");
    let (v1_pid, mut killed) = (v1.pid, v1.replica);
    killed.kill();

    s.agents.wait_at_gate(STEP..2 * STEP).await;
    s.agents.pass_below(2 * STEP);
    s.agents.wait_at_gate(2 * STEP..3 * STEP).await;
    let v1_again = s.start(2, Version::One).await;
    s.agents.pass_below(u64::MAX);
    let outcome = driver.await.expect("the caller");

    let must = |i: usize| match i / IN_FLIGHT {
        0 => Some(Version::One),
        2 => Some(Version::Two),
        _ => None,
    };
    let mut found = check(&s.client, &outcome, SIDE_BY_SIDE_RUNS, must).await;
    for i in IN_FLIGHT..2 * IN_FLIGHT {
        // Runs 30-59 passed the gate with the version 2 process alone.
        let appliers = &found.appliers[i];
        if found.versions[i] == Some(Version::One) && !appliers.contains(&v2.pid) {
            found.problems.push(format!(
                "run {i} of version 1 passed the gate on the version 2 process, yet its events \
                 were applied by {appliers:?}"
            ));
        }
    }
    report(
        "both versions at once, version 1 killed and restarted",
        &found,
        &[
            (v1_pid, Version::One),
            (v2.pid, v2.version),
            (v1_again.pid, v1_again.version),
        ],
    );
    assert_clean(&found.problems, &s.logs);
}
