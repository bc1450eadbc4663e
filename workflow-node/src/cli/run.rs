//! `workflow-node run NAME`: invoke a workflow as another agent would, show progress on
//! stderr, print the output on stdout. Exit 0 on success, 1 when the run fails or is
//! cancelled, 2 on a usage or connection error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use messages::workflow::WorkflowDataPart;
use serde_json::{json, Value};

use agent_sdk::Timing;

use super::connect::{connect, NatsArgs};
use crate::ops::words::AgentWords;
use crate::shell::{Config, WorkflowNode};
use agent_sdk::workflow::{invoke_as, new_task_id, submit, RunResult, StartAs};

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The workflow's name.
    pub name: String,
    /// The input as JSON.
    #[arg(long, conflicts_with = "input_file")]
    pub input: Option<String>,
    /// A file holding the input JSON (or YAML).
    #[arg(long)]
    pub input_file: Option<PathBuf>,
    /// How long the whole command may take, e.g. 30s, 5m (closing the connection may add
    /// up to a second).
    #[arg(long, default_value = "5m")]
    pub timeout: String,
    /// Silence after which the request is resent with the same task id, e.g. 3s: no
    /// progress within it after sending, or no result within it after the last progress.
    /// The workflow starts one run per task id, so resending is safe.
    #[arg(long, default_value = "3s")]
    pub resend_interval: String,
    /// Print {"status", "output", "error"} instead of the bare output.
    #[arg(long)]
    pub json: bool,
    /// Host these workflows in this process too (handy with the embedded server).
    #[arg(long)]
    pub workflows: Vec<PathBuf>,
    /// Serve the agents of this agents file in this process too: stub agents, LLM agents
    /// (a `model:` block) and proxies of remote A2A agents (a `remote:` block), as
    /// `mesh-agents` serves them.
    #[arg(long)]
    pub agents: Option<PathBuf>,
    /// Print the run's id once the workflow accepted the run, and return at once: the run
    /// goes on (`runs watch ID` follows it). Without it, Ctrl-C cancels the run.
    #[arg(long, conflicts_with_all = ["workflows", "agents"])]
    pub detach: bool,
    /// Run this stored version of the workflow (its file's `version`), whatever version
    /// the replica that takes the request serves (`definitions list` shows those stored).
    #[arg(long = "workflow-version", value_name = "VERSION")]
    pub workflow_version: Option<String>,
    /// The run's priority while it waits for a slot of a workflow with
    /// `max_concurrent_runs` or a `concurrency_key`: 1 first to 5 last (default: the
    /// workflow's `priority`, else 3).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub priority: Option<u8>,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// The key the run's start (and its Ctrl-C cancel) is signed with: only it, or an
    /// operator, may then cancel the run.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
    /// For workflows hosted here (`--workflows`): approver names and operator keys to
    /// trust. Names left unbound get keys of this process (their gates wait).
    #[command(flatten)]
    pub trust: super::identity::TrustArgs,
}

/// Runs `run`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(execute(args))
}

fn read_input(args: &Args) -> Result<Value> {
    match (&args.input, &args.input_file) {
        (Some(text), _) => serde_json::from_str(text).context("--input is not valid JSON"),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_yaml::from_str(&text)
                .with_context(|| format!("{} is not valid JSON or YAML", path.display()))
        }
        (None, None) => Err(anyhow!(
            "give the input with --input JSON or --input-file PATH"
        )),
    }
}

async fn execute(args: Args) -> Result<ExitCode> {
    let input = read_input(&args)?;
    let timeout =
        workflow_expr::duration::parse(&args.timeout).map_err(|e| anyhow!("--timeout: {e}"))?;
    let resend_interval = workflow_expr::duration::parse(&args.resend_interval)
        .map_err(|e| anyhow!("--resend-interval: {e}"))?;
    let deadline = tokio::time::Instant::now() + timeout;
    if args.nats.nats_url.is_none() && args.workflows.is_empty() {
        return Err(anyhow!(
            "nothing serves {} on a fresh embedded server: give --nats-url (or NATS_URL) of a mesh where it runs, or --workflows (and --agents) to host it here",
            args.name
        ));
    }
    let signer = args.sign.signer()?;
    let conn = connect(&args.nats).await?;
    let ns = args.nats.namespace.clone();
    let stubs = match &args.agents {
        Some(path) => Some(super::stubs::start(&conn.client, &ns, path).await?),
        None => None,
    };
    let node = host(&args, &conn.client, &ns).await?;
    let timing = Timing {
        timeout: deadline.saturating_duration_since(tokio::time::Instant::now()),
        resend_interval,
    };
    let task_id = new_task_id();
    let start = StartAs {
        task_id: task_id.clone(),
        version: args.workflow_version.clone(),
        signer: signer.clone(),
        priority: args.priority,
    };
    let execution = crate::shell::run::names::execution_id(&args.name, &task_id);
    if args.detach {
        let submitted = submit(&conn.client, &ns, &args.name, &input, timing, start.clone()).await;
        conn.close().await;
        submitted?;
        print_submitted(&execution, args.json);
        return Ok(ExitCode::SUCCESS);
    }
    let on_ctrl_c = tokio::spawn(cancel_on_ctrl_c(
        conn.client.clone(),
        ns.clone(),
        args.name.clone(),
        task_id.clone(),
        execution.0.clone(),
        signer,
    ));
    let result = invoke_as(
        &conn.client,
        &ns,
        &args.name,
        &input,
        timing,
        start,
        show_progress,
    )
    .await;
    on_ctrl_c.abort();
    if let Some(node) = node {
        super::stop_hosted(node).await;
    }
    drop(stubs);
    conn.close().await;
    let result = result?;
    if let Some(trace) = &result.trace_id {
        eprintln!("trace {trace}");
    }
    print_result(&result, args.json);
    Ok(if result.status == "success" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Hosts the workflows of `--workflows` here, if any are given.
async fn host(args: &Args, client: &async_nats::Client, ns: &str) -> Result<Option<WorkflowNode>> {
    if args.workflows.is_empty() {
        return Ok(None);
    }
    let workflows =
        super::load(&args.workflows).ok_or_else(|| anyhow!("invalid workflow files"))?;
    let mut config = Config {
        namespace: ns.to_owned(),
        ..Config::default()
    };
    args.trust.apply(&mut config);
    for name in super::identity::bind_hosted(&mut config, &workflows).keys() {
        eprintln!(
            "approver '{name}' is bound to a key of this process only: bind it with \
             --approver {name}=U… to decide its approvals"
        );
    }
    let node = WorkflowNode::start(client.clone(), workflows, config)
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(Some(node))
}

/// Prints the id of a run started with `--detach`.
fn print_submitted(execution: &crate::core::ExecutionId, json: bool) {
    if json {
        println!("{}", json!({"execution_id": execution.0}));
    } else {
        println!("{execution}");
    }
}

/// On Ctrl-C, says so and asks the workflow to cancel the run (by its task id); the run's
/// final reply, `cancelled`, then ends the command. A second Ctrl-C leaves at once.
async fn cancel_on_ctrl_c(
    client: async_nats::Client,
    ns: String,
    workflow: String,
    task_id: String,
    execution: String,
    signer: Option<agent_sdk::Signer>,
) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    eprintln!(
        "Ctrl-C: cancelling run {execution} of {workflow} (Ctrl-C again to leave without waiting)"
    );
    let reason = Some("Ctrl-C on workflow-node run");
    let request = crate::ops::steer::cancel_request(&format!("cancel-{task_id}"), &task_id, reason);
    let body = serde_json::to_vec(&request).expect("a tasks/cancel serialises to JSON");
    let subject = messages::subjects::agent_request(&ns, &workflow);
    let headers = signer
        .map(|s| s.sign(&subject, None, &body, std::time::SystemTime::now()))
        .unwrap_or_default();
    if let Err(e) = client
        .publish_with_headers(subject, headers, body.into())
        .await
    {
        eprintln!("the cancel could not be sent: {e}");
    }
    if tokio::signal::ctrl_c().await.is_ok() {
        eprintln!("leaving run {execution} to go on");
        std::process::exit(130);
    }
}

pub(crate) fn print_result(result: &RunResult, as_json: bool) {
    if as_json {
        let v = json!({"status": result.status, "output": result.output, "error": result.error});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else if result.status == "success" {
        let out = result.output.clone().unwrap_or(Value::Null);
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        eprintln!(
            "run {}: {}",
            result.status,
            result.error.clone().unwrap_or_default()
        );
    }
}

/// Prints one progress update on stderr.
pub fn show_progress(part: &WorkflowDataPart) {
    let line = match part {
        WorkflowDataPart::ExecutionStart(s) => format!("run {} started", s.execution_id),
        WorkflowDataPart::NodeExecutionStart(s) => node_started(s),
        WorkflowDataPart::NodeExecutionResult(r) => node_ended(r),
        WorkflowDataPart::RunSteered(r) => {
            let why = r
                .reason
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            let done = match r.action {
                messages::control::RunControl::Pause => "paused",
                messages::control::RunControl::Resume => "resumed",
            };
            format!("run {} {done}{why}", r.execution_id)
        }
        WorkflowDataPart::MapProgress(m) => format!(
            "  {} {}/{} items",
            m.node_id, m.completed_items, m.total_items
        ),
        WorkflowDataPart::ApprovalRequest(a) => {
            format!(
                "  {} waits for approval by {:?}: {}",
                a.node_id, a.approvers, a.message
            )
        }
        WorkflowDataPart::AgentStatus(u) => {
            // The agent's words, quoted: never a line that reads as ours.
            let (text, data) = (u.text.as_deref(), u.data.as_ref());
            let Some(words) = AgentWords::new(None, &u.node_id, text, data) else {
                return;
            };
            format!("  {} [{}] {words}", u.node_id, u.state)
        }
        WorkflowDataPart::ExecutionResult(r) => {
            let status = serde_json::to_value(r.status)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            format!("run {} {status}", r.execution_id)
        }
        _ => return,
    };
    eprintln!("{line}");
}

/// A node's start, as a progress line.
fn node_started(s: &messages::workflow::WorkflowNodeExecutionStart) -> String {
    let what = s
        .agent_name
        .as_deref()
        .map(|a| format!(" -> {a}"))
        .unwrap_or_default();
    let idx = s
        .iteration_index
        .map(|i| format!(" [{i}]"))
        .unwrap_or_default();
    let attempt = s
        .attempt
        .filter(|a| *a > 1)
        .map(|a| format!(" (attempt {a})"))
        .unwrap_or_default();
    format!("  {} ({}){idx}{what}{attempt}", s.node_id, s.node_type)
}

/// A node's end, as a progress line.
fn node_ended(r: &messages::workflow::WorkflowNodeExecutionResult) -> String {
    let status = serde_json::to_value(r.status)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let why = r
        .error_message
        .as_deref()
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    format!("  {} {status}{why}", r.node_id)
}

/// How long `run` and `test` wait by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
