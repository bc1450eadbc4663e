//! The operator's commands as a user runs them: the real binary (`runs list|show|watch|
//! history|cancel`, `approvals`, `approve`, `reject`, `run` with Ctrl-C and `--detach`)
//! against a real nats-server, with the workflows and agents served by this test.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::workflow::{invoke_as, new_task_id, RunResult};
use agent_sdk::{handler_fn, AgentBuilder, NodeRequest};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::runtime::Runtime;
use workflow_node::shell::{run::names, Config, WorkflowNode};

use crate::support::fixtures::{CHAIN, GATE};

const TIMEOUT: Duration = Duration::from_secs(60);

const BIG: &str = r#"
name: Big
workflow:
  description: a large input, a large map, a large output
  nodes:
    - {id: each, type: map, items: "{{workflow.input.numbers}}", node: one, max_items: 1000}
    - {id: one, type: agent, agent_name: Doubler, input: {value: "{{_map_item}}"}}
    - {id: echo, type: agent, agent_name: Echo, depends_on: [each], input: {text: "{{workflow.input.text}}"}}
    - {id: gate, type: approval, depends_on: [echo], timeout: 1h}
  output_mapping: {text: "{{echo.output.text}}"}
"#;

const ASK: &str = r#"
name: Ask
workflow:
  description: one call to an agent that reports progress
  nodes:
    - {id: ask, type: agent, agent_name: Talker, input: {}}
  output_mapping: {done: "{{ask.output.done}}"}
"#;

/// A server, the agents, and a node serving the test's workflows.
struct Mesh {
    server: test_harness::NatsServer,
    rt: Runtime,
    client: async_nats::Client,
    _node: WorkflowNode,
    _agents: Vec<agent_sdk::AgentHandle>,
    /// Lets `Talker` answer (it waits for this after saying how it goes).
    release: Arc<tokio::sync::Notify>,
    /// Seed files: `alice` (the approver of `Gate`) and `operator` (the node's operator).
    keys: tempfile::TempDir,
}

fn agents(release: Arc<tokio::sync::Notify>) -> Vec<AgentBuilder> {
    let echo = AgentBuilder::new("Echo")
        .description("echoes its input")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
    let doubler = AgentBuilder::new("Doubler")
        .description("doubles a value")
        .handler(handler_fn(|req: NodeRequest| async move {
            let v = req.input["value"].as_i64().unwrap_or(0);
            Ok(json!({"value": v * 2}))
        }));
    let talker = AgentBuilder::new("Talker")
        .description("reports progress, then answers when released")
        .heartbeat_interval(Duration::from_millis(200))
        .handler(handler_fn(move |req: NodeRequest| {
            let release = release.clone();
            async move {
                // Said again until released, so a watcher that starts late sees it too.
                loop {
                    req.send_status("half way").await.expect("published");
                    let released = release.notified();
                    if tokio::time::timeout(Duration::from_millis(200), released)
                        .await
                        .is_ok()
                    {
                        return Ok(json!({"done": true}));
                    }
                }
            }
        }));
    vec![echo, doubler, talker]
}

fn mesh() -> Mesh {
    let server = test_harness::nats();
    let rt = Runtime::new().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    for name in ["alice", "operator"] {
        let signer = agent_sdk::Signer::generate();
        std::fs::write(keys.path().join(name), signer.seed()).unwrap();
        let key = signer.public_key().to_string();
        match name {
            "alice" => drop(config.approvers.insert(name.into(), key)),
            _ => config.operators.push(key),
        }
    }
    let release = Arc::new(tokio::sync::Notify::new());
    let (client, node, agents) = rt.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let mut handles = Vec::new();
        for a in agents(release.clone()) {
            handles.push(a.serve(client.clone()).await.unwrap());
        }
        let workflows = [CHAIN, GATE, BIG, ASK]
            .iter()
            .map(|y| workflow_node::definition::parse_str(y, "t.yaml").unwrap())
            .collect();
        let node = WorkflowNode::start(client.clone(), workflows, config)
            .await
            .unwrap();
        (client, node, handles)
    });
    Mesh {
        server,
        rt,
        client,
        _node: node,
        _agents: agents,
        release,
        keys,
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_workflow-node"));
    c.env_remove("NATS_URL")
        .env_remove("MESH_NKEY_SEED_FILE")
        .current_dir(repo());
    c
}

impl Mesh {
    /// The command with `args` against this mesh.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.args(args).args(["--nats-url", &self.server.url()]);
        c
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// The seed file of `who` (`alice` or `operator`).
    fn seed(&self, who: &str) -> String {
        self.keys.path().join(who).display().to_string()
    }

    /// The command with `args`, signed by `who`'s key.
    fn cli_as(&self, who: &str, args: &[&str]) -> Output {
        let seed = self.seed(who);
        self.cmd(args)
            .args(["--nkey-seed-file", &seed])
            .output()
            .unwrap()
    }

    /// Starts a run of `workflow` in the background; its execution id, and its result.
    fn start(&self, workflow: &str, input: Value) -> (String, tokio::task::JoinHandle<RunResult>) {
        let task_id = new_task_id();
        let execution = names::execution_id(workflow, &task_id).0;
        let (client, workflow) = (self.client.clone(), workflow.to_string());
        let handle = self.rt.spawn(async move {
            invoke_as(
                &client,
                "mesh",
                &workflow,
                &input,
                TIMEOUT,
                &task_id,
                |_| {},
            )
            .await
            .expect("a final reply")
        });
        (execution, handle)
    }

    /// A run of `workflow` to its end.
    fn run(&self, workflow: &str, input: Value) -> (String, RunResult) {
        let (id, handle) = self.start(workflow, input);
        (id, self.rt.block_on(handle).unwrap())
    }

    /// Starts runs of `Gate` and waits until each waits at its gate.
    fn gated(&self, n: usize) -> Vec<(String, tokio::task::JoinHandle<RunResult>)> {
        let mut asks = self.rt.block_on(async {
            self.client
                .subscribe(messages::subjects::approvals("mesh", "Gate"))
                .await
                .unwrap()
        });
        let runs: Vec<_> = (0..n).map(|_| self.start("Gate", json!({}))).collect();
        self.rt.block_on(async {
            for _ in 0..n {
                tokio::time::timeout(TIMEOUT, asks.next())
                    .await
                    .expect("the run reaches its gate")
                    .unwrap();
            }
        });
        runs
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit 0 and the JSON it printed.
fn json_of(out: Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
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
fn runs_list_show_and_history_describe_runs() {
    let m = mesh();
    let (first, r) = m.run("Chain", json!({"value": 3}));
    assert_eq!(r.status, "success");
    let (second, _) = m.run("Chain", json!({"value": 4}));
    let gated = m.gated(1);
    let waiting = &gated[0].0;

    // list: a table, and JSON, newest first, filtered.
    let out = m.cli(&["runs", "list"]);
    let table = stdout(&out);
    assert!(table.starts_with("RUN "), "{table}");
    for id in [&first, &second, waiting] {
        assert!(table.contains(id.as_str()), "{table}");
    }
    let all = json_of(m.cli(&["runs", "list", "--json"]));
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{all}");
    assert_eq!(ids[0], waiting.as_str(), "newest first: {all}");
    assert_eq!(all[1]["workflow"], "Chain");
    assert_eq!(all[1]["status"], "success");
    assert!(all[1]["duration_ms"].as_u64().is_some(), "{all}");
    let chains = json_of(m.cli(&["runs", "list", "--json", "--workflow", "Chain"]));
    assert_eq!(chains.as_array().unwrap().len(), 2);
    let running = json_of(m.cli(&["runs", "list", "--json", "--status", "running"]));
    assert_eq!(running[0]["execution_id"], waiting.as_str());
    assert_eq!(running.as_array().unwrap().len(), 1);
    let recent = json_of(m.cli(&["runs", "list", "--json", "--since", "1h"]));
    assert_eq!(recent.as_array().unwrap().len(), 3);
    let out = m.cli(&["runs", "list", "--since", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // show: the node table, input, output; JSON; the diagram coloured.
    let out = m.cli(&["runs", "show", &first]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        text.contains(&format!("run {first} of Chain: success")),
        "{text}"
    );
    let line = |id: &str| text.lines().find(|l| l.starts_with(id)).unwrap_or("");
    assert!(line("double ").contains("agent"), "{text}");
    assert!(line("double ").contains("success  1"), "{text}");
    assert!(text.contains(r#"input:  {"value":3}"#), "{text}");
    assert!(text.contains(r#"output: {"value":12}"#), "{text}");
    let shown = json_of(m.cli(&["runs", "show", &first, "--json"]));
    assert_eq!(shown["status"], "success");
    assert_eq!(shown["output"], json!({"value": 12}));
    assert_eq!(shown["nodes"][1]["id"], "again");
    assert_eq!(shown["nodes"][1]["attempts"], 1);
    assert_eq!(shown["nodes"][1]["status"], "success");
    let gate = json_of(m.cli(&["runs", "show", waiting, "--json"]));
    assert_eq!(gate["nodes"][0]["status"], "waiting");
    assert_eq!(gate["nodes"][1]["status"], "pending");
    assert_eq!(gate["waiting"]["gate"]["message"], "ok to go?");
    let out = m.cli(&["runs", "show", waiting, "--mermaid"]);
    let diagram = stdout(&out);
    assert!(diagram.starts_with("graph TD"), "{diagram}");
    assert!(diagram.contains("class gate waiting"), "{diagram}");
    assert!(diagram.contains("class go pending"), "{diagram}");

    // history: the events, in order.
    let history = json_of(m.cli(&["runs", "history", &first, "--json"]));
    let events: Vec<(u64, &str, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["n"].as_u64().unwrap(),
                e["event"].as_str().unwrap(),
                e["node"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        events,
        vec![
            (1, "started", "-"),
            (2, "call_succeeded", "double"),
            (3, "call_succeeded", "again"),
        ]
    );
    let out = m.cli(&["runs", "history", &first]);
    assert!(
        stdout(&out).contains("call_succeeded  again"),
        "{}",
        stdout(&out)
    );

    // Bad ids, and runs of another workflow.
    refused(m.cli(&["runs", "show", "nosuchrun"]), "no run 'nosuchrun'");
    refused(
        m.cli(&["runs", "history", "no.such"]),
        "a task id needs --workflow",
    );
    refused(
        m.cli(&["runs", "show", &first, "--workflow", "Gate"]),
        &format!("run {first} is a run of Chain, not of Gate"),
    );
}

#[test]
fn runs_show_finds_a_run_by_its_task_id_and_reads_what_it_keeps_apart() {
    let m = mesh();
    // Over the inline limit (256 KiB): the run's output is kept as its output artifact.
    let text = "t".repeat(300_000);
    let numbers: Vec<u32> = (0..300).collect();
    let task_id = new_task_id();
    let execution = names::execution_id("Big", &task_id).0;
    let client = m.client.clone();
    let input = json!({"numbers": numbers, "text": text});
    let mut asks = m.rt.block_on(async {
        client
            .subscribe(messages::subjects::approvals("mesh", "Big"))
            .await
            .unwrap()
    });
    let task = task_id.clone();
    let run = m.rt.spawn(async move {
        invoke_as(&client, "mesh", "Big", &input, TIMEOUT, &task, |_| {}).await
    });
    m.rt.block_on(async { tokio::time::timeout(TIMEOUT, asks.next()).await })
        .expect("the run reaches its gate");
    // Running: its input is kept apart (and its map's items were, while it ran).
    let out = m.cli(&["runs", "show", &execution]);
    let table = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(table.contains("--json prints it whole"), "{table}");
    let row = |name: &str| {
        let t = table.clone();
        t.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        row("each").contains("map") && row("each").contains("success"),
        "{table}"
    );
    assert!(row("one").contains(" 300 "), "300 attempts: {table}");
    let shown = json_of(m.cli(&["runs", "show", &task_id, "--workflow", "Big", "--json"]));
    assert_eq!(shown["execution_id"], execution.as_str());
    assert_eq!(shown["input"]["text"].as_str().unwrap().len(), 300_000);
    // Ended: its output is kept apart.
    // The gate lists no approvers: an operator decides.
    let out = m.cli_as("operator", &["approve", &execution, "gate"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(m.rt.block_on(run).unwrap().unwrap().status, "success");
    let shown = json_of(m.cli(&["runs", "show", &execution, "--json"]));
    assert_eq!(shown["output"]["text"].as_str().unwrap().len(), 300_000);
}

#[test]
fn approvals_are_listed_and_approve_or_reject_ends_the_run() {
    let m = mesh();
    let runs = m.gated(2);
    let (approved, rejected) = (&runs[0].0.clone(), &runs[1].0.clone());
    let waiting = json_of(m.cli(&["approvals", "--json"]));
    let listed: Vec<&str> = waiting
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 2, "{waiting}");
    assert!(listed.contains(&approved.as_str()) && listed.contains(&rejected.as_str()));
    assert_eq!(waiting[0]["node_id"], "gate");
    assert_eq!(waiting[0]["approvers"], json!(["alice"]));
    assert_eq!(waiting[0]["message"], "ok to go?");
    let out = m.cli(&["approvals"]);
    assert!(stdout(&out).contains("ok to go?"), "{}", stdout(&out));

    refused(m.cli(&["approve", approved, "gate"]), "is not signed");
    refused(
        m.cli_as("operator", &["approve", approved, "gate"]),
        "may not decide on 'gate' (approvers: alice)",
    );
    refused(
        m.cli(&["approve", approved, "go", "--by", "alice"]),
        "'go' is not an approval node of Gate",
    );
    refused(
        m.cli(&["approve", "nosuchrun", "gate"]),
        "no run 'nosuchrun'",
    );
    let out = m.cli_as("alice", &["approve", approved, "gate", "--by", "alice"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("recorded"), "{}", stdout(&out));
    // The key from the environment; `by` from the signature.
    let out = m
        .cmd(&["reject", rejected, "gate", "--comment", "not today"])
        .env("MESH_NKEY_SEED_FILE", m.seed("alice"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let mut results = Vec::new();
    for (_, handle) in runs {
        results.push(m.rt.block_on(handle).unwrap());
    }
    assert_eq!(results[0].status, "success", "{:?}", results[0]);
    assert_eq!(results[0].output, Some(json!({"went": true})));
    assert_eq!(results[1].status, "failure", "{:?}", results[1]);
    assert!(
        results[1]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("rejected by alice: not today"),
        "{:?}",
        results[1]
    );
    refused(
        m.cli(&["approve", approved, "gate", "--by", "alice"]),
        "already ended (success)",
    );
    let out = m.cli(&["approvals"]);
    assert!(
        stdout(&out).contains("no approvals waiting"),
        "{}",
        stdout(&out)
    );
}

/// Reads `child`'s stdout line by line until one contains `text`; what was read.
fn read_until(lines: &mut impl BufRead, seen: &mut String, text: &str) {
    while !seen.contains(text) {
        assert!(
            lines.read_line(seen).unwrap() > 0,
            "ended before {text:?}: {seen}"
        );
    }
}

#[test]
fn runs_watch_follows_a_run_and_its_agents_until_it_ends() {
    let m = mesh();
    let mut updates = m.rt.block_on(async {
        let all = messages::subjects::agent_status_all("mesh", "Ask");
        let updates = m.client.subscribe(all).await.expect("subscribe");
        m.client.flush().await.expect("flush");
        updates
    });
    let (id, handle) = m.start("Ask", json!({}));
    // Once the call runs (its first status update), the watch shows the run, then the
    // agent's updates: a watch started before the run is stored finds no run.
    m.rt.block_on(async {
        tokio::time::timeout(TIMEOUT, updates.next())
            .await
            .expect("the call runs in time")
    });
    let mut child = m
        .cmd(&["runs", "watch", &id])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    read_until(&mut out, &mut seen, &format!("run {id} of Ask"));
    read_until(
        &mut out,
        &mut seen,
        r#"ask [working] Talker says: "half way""#,
    );
    m.release.notify_one();
    let status = child.wait().unwrap();
    out.read_to_string(&mut seen).unwrap();
    assert_eq!(status.code(), Some(0), "{seen}");
    assert!(seen.contains("ask running -> success"), "{seen}");
    assert!(seen.contains("run running -> success"), "{seen}");
    assert!(
        seen.contains(&format!("run {id} of Ask: success")),
        "{seen}"
    );
    assert_eq!(m.rt.block_on(handle).unwrap().status, "success");

    // --json: one object per line, the last a snapshot of the ended run.
    let gated = m.gated(1);
    let id = &gated[0].0;
    let mut child = m
        .cmd(&["runs", "watch", id, "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["event"], "snapshot");
    assert_eq!(v["run"]["status"], "running");
    let out2 = m.cli_as("alice", &["approve", id, "gate"]);
    assert_eq!(out2.status.code(), Some(0), "{}", stderr(&out2));
    let status = child.wait().unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    let last: Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    assert_eq!(last["run"]["status"], "success", "{rest}");
    refused(m.cli(&["runs", "watch", "nosuchrun"]), "no run 'nosuchrun'");
}

#[test]
fn run_shows_its_agents_status_updates() {
    let m = mesh();
    let mut child = m
        .cmd(&["run", "Ask", "--input", "{}"])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    read_until(
        &mut err,
        &mut seen,
        r#"  ask [working] the agent of node ask says: "half way""#,
    );
    m.release.notify_one();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{seen}");
    assert_eq!(json_of(out), json!({"done": true}));
}

#[test]
fn runs_cancel_cancels_a_waiting_run_and_refuses_an_ended_one() {
    let m = mesh();
    let mut gated = m.gated(1);
    let (id, handle) = gated.remove(0);
    refused(
        m.cli(&["runs", "cancel", &id]),
        "takes an operator's signature",
    );
    refused(
        m.cli_as("alice", &["runs", "cancel", &id]),
        "takes an operator's signature",
    );
    let out = m.cli_as(
        "operator",
        &["runs", "cancel", &id, "--reason", "no longer needed"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("cancel of run"), "{}", stdout(&out));
    let result = m.rt.block_on(handle).unwrap();
    assert_eq!(result.status, "cancelled", "{result:?}");
    let history = json_of(m.cli(&["runs", "history", &id, "--json"]));
    let cancel = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "cancel_requested")
        .unwrap_or_else(|| panic!("{history}"));
    assert_eq!(cancel["detail"], "no longer needed");
    refused(m.cli(&["runs", "cancel", &id]), "already ended (cancelled)");
    refused(
        m.cli(&["runs", "cancel", "nosuchrun"]),
        "no run 'nosuchrun'",
    );
}

#[test]
fn ctrl_c_on_run_cancels_its_run() {
    let m = mesh();
    let mut child = m
        .cmd(&["run", "Gate", "--input", "{}"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    read_until(&mut err, &mut seen, "gate waits for approval");
    let id = seen
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .unwrap()
        .to_string();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    err.read_to_string(&mut seen).unwrap();
    assert_eq!(status.code(), Some(1), "{seen}");
    assert!(
        seen.contains(&format!("Ctrl-C: cancelling run {id} of Gate")),
        "{seen}"
    );
    assert!(seen.contains(&format!("run {id} cancelled")), "{seen}");
    let shown = json_of(m.cli(&["runs", "show", &id, "--json"]));
    assert_eq!(shown["status"], "cancelled", "{shown}");
}

#[test]
fn a_signed_run_is_cancelled_by_its_key_only() {
    let m = mesh();
    let seed = m.seed("alice");
    let mut child = m
        .cmd(&["run", "Gate", "--input", "{}", "--nkey-seed-file", &seed])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    read_until(&mut err, &mut seen, "gate waits for approval");
    let id = seen
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .unwrap()
        .to_string();
    refused(m.cli(&["runs", "cancel", &id]), "was started by key");
    let out = m.cli_as("alice", &["runs", "cancel", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status = child.wait().unwrap();
    err.read_to_string(&mut seen).unwrap();
    assert_eq!(status.code(), Some(1), "{seen}");
    assert!(seen.contains("run cancelled"), "{seen}");
}

#[test]
fn run_detach_prints_the_run_id_and_the_run_still_ends() {
    let m = mesh();
    let out = m.cli(&["run", "Chain", "--input", r#"{"value": 5}"#, "--detach"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    assert_eq!(id.len(), 32, "{id}");
    // The watch ends when the run does.
    let out = m.cli(&["runs", "watch", &id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let last: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(last["run"]["status"], "success");
    assert_eq!(last["run"]["output"], json!({"value": 20}));
    let out = m.cli(&["run", "Chain", "--input", "{}", "--detach", "--json"]);
    let v = json_of(out);
    assert_eq!(v["execution_id"].as_str().unwrap().len(), 32, "{v}");
}

#[test]
fn runs_commands_need_a_reachable_server() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://127.0.0.1:{}", listener.local_addr().unwrap().port());
    drop(listener);
    for args in [
        vec!["runs", "list"],
        vec!["runs", "show", "x"],
        vec!["approvals"],
        vec!["approve", "x", "gate"],
    ] {
        let out = bin()
            .args(&args)
            .args(["--nats-url", &url])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("cannot reach the NATS server at {url}")),
            "{}",
            stderr(&out)
        );
    }
    let out = bin().args(["runs", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--nats-url"), "{}", stderr(&out));
}

#[test]
fn bad_keys_are_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.nk");
    std::fs::write(&bad, "not a seed\n").unwrap();
    let bad = bad.display().to_string();
    // Nothing listens there: a command that connected first would say so instead.
    let url = "nats://127.0.0.1:1";
    for args in [
        vec!["approve", "x", "gate"],
        vec!["reject", "x", "gate"],
        vec!["runs", "cancel", "x"],
        vec!["run", "Gate", "--input", "{}"],
    ] {
        let out = bin()
            .args(&args)
            .args(["--nats-url", url, "--nkey-seed-file", &bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(
            e.contains(&format!("--nkey-seed-file {bad}")) && e.contains("holds no user seed"),
            "{args:?}: {e}"
        );
    }
    let seed = agent_sdk::Signer::generate().seed();
    for (flag, value, why) in [
        (
            "--approver",
            "alice=UNOTAKEY",
            "not an NKey user public key",
        ),
        ("--approver", "alice", "is not NAME=UKEY"),
        ("--operator-key", seed.as_str(), "that is a seed, a secret"),
    ] {
        let out = bin()
            .args([
                "serve",
                "examples/workflows/echo.json",
                "--nats-url",
                url,
                flag,
                value,
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {value}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(why),
            "{flag} {value}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn keygen_writes_a_private_seed_and_prints_its_public_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("me.nk");
    let out = bin()
        .args(["keygen", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let public = stdout(&out).trim().to_string();
    let signer = agent_sdk::Signer::from_seed_file(&path).unwrap();
    assert_eq!(signer.public_key(), public);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let again = bin()
        .args(["keygen", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(1),
        "an existing seed is never overwritten"
    );
    assert!(stderr(&again).contains("me.nk"), "{}", stderr(&again));
}
