//! Pausing, resuming and retrying runs as an operator does: the
//! real binary (`runs pause|resume|retry`) against a real nats-server, with the workflows
//! and agents served by this test.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sdk::workflow::{invoke_as, new_task_id, RunResult};
use agent_sdk::{handler_fn, AgentBuilder, AgentError, NodeRequest};
use messages::control::RunControl;
use messages::workflow::WorkflowDataPart;
use serde_json::{json, Value};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, Notify};
use workflow_node::core::{CallPhase, NodeStatus, TaskKey};
use workflow_node::shell::{run::names, Config, WorkflowNode};
use workflow_node::shell::{FoundRun, Inspector};

const TIMEOUT: Duration = Duration::from_secs(60);

/// `first` waits for the test to release it; `second` would start as soon as it ends.
const STEPS: &str = r#"
name: Steps
workflow:
  description: two calls in a row, the first held by the test
  nodes:
    - {id: first, type: agent, agent_name: Held, input: {}}
    - {id: second, type: agent, agent_name: Counted, depends_on: [first], input: {}}
  output_mapping: {done: "{{second.output.n}}"}
"#;

/// `flaky` fails its first call; a retry keeps `start` and runs `flaky` and `last`.
const FLAKY: &str = r#"
name: Flaky
workflow:
  description: a call that fails once between two that do not
  nodes:
    - {id: start, type: agent, agent_name: Counted, input: {}}
    - {id: flaky, type: agent, agent_name: FailsOnce, depends_on: [start], input: {}}
    - {id: last, type: agent, agent_name: Counted, depends_on: [flaky], input: {}}
  output_mapping: {start: "{{start.output.n}}", last: "{{last.output.n}}"}
"#;

struct Mesh {
    server: test_harness::NatsServer,
    rt: Runtime,
    client: async_nats::Client,
    /// The replica serving the workflows (replaced by [`Mesh::replace_replica`]).
    node: std::sync::Mutex<Option<WorkflowNode>>,
    config: Config,
    _agents: Vec<agent_sdk::AgentHandle>,
    /// Lets `Held` answer, once per notification.
    release: Arc<Notify>,
    /// Told each time `Held` is called.
    held: std::sync::Mutex<mpsc::UnboundedReceiver<()>>,
    /// Calls `Counted` answered, in all.
    counted: Arc<AtomicU32>,
    keys: tempfile::TempDir,
}

fn agents(
    release: Arc<Notify>,
    held: mpsc::UnboundedSender<()>,
    counted: Arc<AtomicU32>,
) -> Vec<AgentBuilder> {
    let hold = AgentBuilder::new("Held")
        .description("answers when the test releases it")
        .handler(handler_fn(move |_req: NodeRequest| {
            let (release, held) = (release.clone(), held.clone());
            async move {
                let _ = held.send(());
                release.notified().await;
                Ok(json!({"released": true}))
            }
        }));
    let count = AgentBuilder::new("Counted")
        .description("counts its calls")
        .handler(handler_fn(move |_req: NodeRequest| {
            let counted = counted.clone();
            async move { Ok(json!({"n": counted.fetch_add(1, Ordering::SeqCst) + 1})) }
        }));
    let failed = Arc::new(AtomicU32::new(0));
    let fails_once = AgentBuilder::new("FailsOnce")
        .description("fails its first call")
        .handler(handler_fn(move |_req: NodeRequest| {
            let failed = failed.clone();
            async move {
                if failed.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(AgentError::new("not ready yet"))
                } else {
                    Ok(json!({"ok": true}))
                }
            }
        }));
    vec![hold, count, fails_once]
}

fn mesh() -> Mesh {
    let server = test_harness::nats();
    let rt = Runtime::new().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    for name in ["owner", "operator"] {
        let signer = agent_sdk::Signer::generate();
        std::fs::write(keys.path().join(name), signer.seed()).unwrap();
        if name == "operator" {
            config.operators.push(signer.public_key().to_string());
        }
    }
    let release = Arc::new(Notify::new());
    let (held_tx, held_rx) = mpsc::unbounded_channel();
    let counted = Arc::new(AtomicU32::new(0));
    let (client, node, handles) = rt.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let mut handles = Vec::new();
        for a in agents(release.clone(), held_tx, counted.clone()) {
            handles.push(a.serve(client.clone()).await.unwrap());
        }
        let node = replica(&client, &config).await;
        (client, node, handles)
    });
    Mesh {
        server,
        rt,
        client,
        node: std::sync::Mutex::new(Some(node)),
        config,
        _agents: handles,
        release,
        held: std::sync::Mutex::new(held_rx),
        counted,
        keys,
    }
}

/// A replica serving the test's workflows.
async fn replica(client: &async_nats::Client, config: &Config) -> WorkflowNode {
    let workflows = [STEPS, FLAKY]
        .iter()
        .map(|y| workflow_node::definition::parse_str(y, "t.yaml").unwrap())
        .collect();
    WorkflowNode::start(client.clone(), workflows, config.clone())
        .await
        .unwrap()
}

impl Mesh {
    /// Shuts the replica down and starts another in its place (what a rolling restart
    /// does): whatever a run keeps must be in its committed record.
    fn replace_replica(&self) {
        let old = self.node.lock().unwrap().take().expect("a replica");
        self.rt.block_on(old.shutdown());
        let new = self.rt.block_on(replica(&self.client, &self.config));
        *self.node.lock().unwrap() = Some(new);
    }

    /// The command with `args` against this mesh, signed by `who`'s key if given.
    fn cli(&self, who: Option<&str>, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workflow-node"));
        c.env_remove("NATS_URL")
            .env_remove("MESH_NKEY_SEED_FILE")
            .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
            .args(args)
            .args(["--nats-url", &self.server.url()]);
        if let Some(who) = who {
            c.args([
                "--nkey-seed-file",
                &self.keys.path().join(who).display().to_string(),
            ]);
        }
        c.output().unwrap()
    }

    /// Starts a run of `workflow` in the background; its execution id, and its result.
    fn start(&self, workflow: &str) -> (String, tokio::task::JoinHandle<RunResult>) {
        let (execution, handle, _) = self.start_watched(workflow);
        (execution, handle)
    }

    /// [`Self::start`], with the progress its caller is told, as it comes.
    fn start_watched(
        &self,
        workflow: &str,
    ) -> (
        String,
        tokio::task::JoinHandle<RunResult>,
        Arc<Mutex<Vec<WorkflowDataPart>>>,
    ) {
        let task_id = new_task_id();
        let execution = names::execution_id(workflow, &task_id).0;
        let (client, workflow) = (self.client.clone(), workflow.to_string());
        let told = Arc::new(Mutex::new(Vec::new()));
        let progress = told.clone();
        let handle = self.rt.spawn(async move {
            invoke_as(
                &client,
                "mesh",
                &workflow,
                &json!({}),
                TIMEOUT,
                &task_id,
                |p| progress.lock().unwrap().push(p.clone()),
            )
            .await
            .expect("a final reply")
        });
        (execution, handle, told)
    }

    /// Waits until `Held` has been called.
    fn wait_held(&self) {
        let mut held = self.held.lock().unwrap();
        self.rt.block_on(async {
            tokio::time::timeout(TIMEOUT, held.recv())
                .await
                .expect("Held is called")
                .unwrap();
        });
    }

    /// Waits until run `id` of `workflow` is as `want` says; the run as it then is.
    fn wait_run(&self, workflow: &str, id: &str, want: impl Fn(&FoundRun) -> bool) -> FoundRun {
        self.rt.block_on(async {
            let inspector = Inspector::open(self.client.clone(), "mesh").await.unwrap();
            let deadline = tokio::time::Instant::now() + TIMEOUT;
            loop {
                let run = inspector.find(id, Some(workflow), None).await.unwrap();
                if let Some(run) = run.filter(|r| want(r)) {
                    return run;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "run {id} never got there"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(out), stderr(out));
    stdout(out)
}

/// Exit 1, with `message` on stderr.
fn refused(out: Output, message: &str) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains(message), "{}", stderr(&out));
}

#[test]
fn a_paused_run_records_its_call_in_flight_dispatches_nothing_and_resumes_where_it_stopped() {
    let m = mesh();
    let (id, result, told) = m.start_watched("Steps");
    m.wait_held();
    // Naming a run by its execution id takes its owner's or an operator's key.
    refused(m.cli(None, &["runs", "pause", &id]), "operator's signature");
    let out = m.cli(
        Some("operator"),
        &["runs", "pause", &id, "--reason", "maintenance"],
    );
    assert!(ok(&out).contains(&format!("pause of run {id} recorded")));
    let paused = m.wait_run("Steps", &id, |r| r.record.state.is_paused());
    assert_eq!(paused.record.state.shown_status(), "paused");
    refused(
        m.cli(Some("operator"), &["runs", "pause", &id]),
        "is already paused",
    );
    let shown = m.cli(None, &["runs", "show", &id]);
    assert!(ok(&shown).contains(": paused"), "{}", stdout(&shown));
    assert!(
        stdout(&shown).contains("paused since"),
        "{}",
        stdout(&shown)
    );

    // The call in flight ends and is recorded; what it would start waits.
    m.release.notify_one();
    let run = m.wait_run("Steps", &id, |r| {
        r.record.state.node_status("first") == NodeStatus::Success
    });
    assert!(run.record.state.is_paused());
    // Its call waits in the queue, never sent (a node whose call waits for a slot under
    // `concurrency` is shown running the same way).
    let call = &run.record.state.calls[&TaskKey::single("second")];
    assert_eq!(call.phase, CallPhase::Queued);
    assert_eq!(run.record.state.queue.len(), 1, "second waits in the queue");
    assert!(
        !run.record.attempts.contains_key("second"),
        "second was never sent"
    );
    assert_eq!(m.counted.load(Ordering::SeqCst), 0);

    let out = m.cli(Some("operator"), &["runs", "resume", &id]);
    assert!(ok(&out).contains(&format!("resume of run {id} recorded")));
    let result = m.rt.block_on(result).unwrap();
    assert_eq!(result.status, "success", "{result:?}");
    assert_eq!(result.output, Some(json!({"done": 1})));
    // Its caller was told of the pause, with its reason, and of the resume, in order.
    let steered: Vec<(RunControl, Option<String>)> = told
        .lock()
        .unwrap()
        .iter()
        .filter_map(|p| match p {
            WorkflowDataPart::RunSteered(s) => {
                assert_eq!(s.execution_id, id);
                Some((s.action, s.reason.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        steered,
        vec![
            (RunControl::Pause, Some("maintenance".to_string())),
            (RunControl::Resume, None)
        ]
    );
    refused(
        m.cli(Some("operator"), &["runs", "resume", &id]),
        "already ended (success)",
    );
    let history = m.cli(None, &["runs", "history", &id, "--json"]);
    let history: Value = serde_json::from_str(&ok(&history)).unwrap();
    let events: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    let pause = events.iter().position(|e| *e == "pause_requested");
    let resume = events.iter().position(|e| *e == "resume_requested");
    assert!(pause.is_some() && resume > pause, "{events:?}");
}

#[test]
fn a_failed_run_is_retried_from_its_failed_node_as_a_new_run_linked_to_it() {
    let m = mesh();
    let (id, result) = m.start("Flaky");
    let result = m.rt.block_on(result).unwrap();
    assert_eq!(result.status, "failure", "{result:?}");
    assert_eq!(m.counted.load(Ordering::SeqCst), 1, "start ran once");

    let out = m.cli(Some("operator"), &["runs", "retry", &id, "--json"]);
    let shown: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(shown["status"], "success", "{shown}");
    // `start` is kept (its output is the first run's), `last` ran in the retry.
    assert_eq!(shown["output"], json!({"start": 1, "last": 2}), "{shown}");
    assert_eq!(
        m.counted.load(Ordering::SeqCst),
        2,
        "start was not run again"
    );

    let listed = m.cli(None, &["runs", "list", "--workflow", "Flaky", "--json"]);
    let listed: Value = serde_json::from_str(&ok(&listed)).unwrap();
    let retry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["retry_of"] == json!(id))
        .unwrap_or_else(|| panic!("a run retrying {id}: {listed}"))
        .clone();
    assert_eq!(retry["status"], "success");
    let new_id = retry["execution_id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    let shown = m.cli(None, &["runs", "show", &new_id]);
    assert!(
        ok(&shown).contains(&format!("retry of run {id}")),
        "{}",
        stdout(&shown)
    );

    // A run that succeeded has nothing to retry; an unknown one is named.
    refused(
        m.cli(Some("operator"), &["runs", "retry", &new_id]),
        "only a run that ended without success can be retried",
    );
    refused(
        m.cli(Some("operator"), &["runs", "retry", "nosuchrun"]),
        "no run",
    );
}

#[test]
fn only_the_owner_or_an_operator_may_retry_a_signed_run() {
    let m = mesh();
    let owner = agent_sdk::Signer::from_seed_file(m.keys.path().join("owner")).unwrap();
    let task_id = new_task_id();
    let id = names::execution_id("Flaky", &task_id).0;
    let start = agent_sdk::workflow::StartAs {
        task_id,
        version: None,
        signer: Some(owner),
        priority: None,
    };
    let result = m.rt.block_on(invoke_as(
        &m.client,
        "mesh",
        "Flaky",
        &json!({}),
        TIMEOUT,
        start,
        |_| {},
    ));
    assert_eq!(result.unwrap().status, "failure");
    let stranger = agent_sdk::Signer::generate();
    std::fs::write(m.keys.path().join("stranger"), stranger.seed()).unwrap();
    refused(
        m.cli(Some("stranger"), &["runs", "retry", &id]),
        "was started by key",
    );
    let out = m.cli(Some("owner"), &["runs", "retry", &id, "--detach"]);
    let new_id = ok(&out).trim().to_string();
    let run = m.wait_run("Flaky", &new_id, |r| r.record.state.status.is_terminal());
    assert_eq!(run.record.state.shown_status(), "success");
    assert_eq!(
        run.record.state.retry_of.as_ref().map(|r| r.0.as_str()),
        Some(id.as_str())
    );
    // The owner of the retried run owns the retry.
    assert_eq!(
        run.record.caller.signer.as_deref(),
        Some(
            agent_sdk::Signer::from_seed_file(m.keys.path().join("owner"))
                .unwrap()
                .public_key()
                .to_string()
                .as_str()
        )
    );
}

#[test]
fn a_pause_outlives_the_replica_that_recorded_it() {
    let m = mesh();
    let (id, result) = m.start("Steps");
    m.wait_held();
    let out = m.cli(Some("operator"), &["runs", "pause", &id]);
    ok(&out);
    m.wait_run("Steps", &id, |r| r.record.state.is_paused());
    m.replace_replica();
    // The new replica records the call that was in flight, and keeps the run paused.
    m.release.notify_one();
    let run = m.wait_run("Steps", &id, |r| {
        r.record.state.node_status("first") == NodeStatus::Success
    });
    assert!(run.record.state.is_paused());
    assert!(
        !run.record.attempts.contains_key("second"),
        "second was never sent"
    );
    let out = m.cli(Some("operator"), &["runs", "resume", &id]);
    ok(&out);
    let result = m.rt.block_on(result).unwrap();
    assert_eq!(result.status, "success", "{result:?}");
    assert_eq!(m.counted.load(Ordering::SeqCst), 1);
}
