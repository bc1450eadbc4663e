//! `workflow-node test SUITE...`: run workflow test suites against stub agents, on the
//! embedded NATS unless given a URL. Exit 0 only when every case passes.
//!
//! ```yaml
//! workflows: [order.yaml]      # relative to the suite file
//! agents: stubs.yaml           # a stub file, or an inline list of stub agents
//! cases:
//!   - name: small values take the small branch
//!     workflow: OrderWorkflow  # optional when the suite has one workflow
//!     input: {value: 5}
//!     expect:
//!       status: success        # success | failure | cancelled | timed_out
//!       output: {...}          # exact JSON equality, when present
//!       error_contains: "..."
//!       nodes: {handle_small: success, handle_large: skipped}
//!     pause_while_deciding: true # pause before each decision, resume after
//!     retry:                   # then retry the run from its failed node, and check that
//!       approvals: [{node: gate, decision: approve}]
//!       expect: {status: success}
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use agent_sdk::Timing;

use super::connect::{connect, NatsArgs};
use crate::shell::{Config, WorkflowNode};
use agent_sdk::workflow::{invoke, RunResult};

/// Arguments of `test`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Suite files.
    #[arg(required = true)]
    pub suites: Vec<PathBuf>,
    /// Per-case timeout, e.g. 30s.
    #[arg(long, default_value = "60s")]
    pub timeout: String,
    /// Silence after which a case's request is resent with the same task id, e.g. 3s (see
    /// `agent_sdk::Timing`).
    #[arg(long, default_value = "3s")]
    pub resend_interval: String,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// A suite file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// Workflow files, relative to the suite.
    pub workflows: Vec<PathBuf>,
    /// A stub agent file, or an inline list of stub agents.
    #[serde(default)]
    pub agents: Option<Value>,
    /// Run in order, one run each, against the suite's workflows; at least one.
    pub cases: Vec<Case>,
}

/// One case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What it checks, printed beside `ok` or `FAIL`.
    pub name: String,
    /// The workflow to run (optional with one workflow).
    #[serde(default)]
    pub workflow: Option<String>,
    /// The workflow's input (`null` when absent).
    #[serde(default)]
    pub input: Value,
    /// Decisions to give when the run asks for approval.
    #[serde(default)]
    pub approvals: Vec<ApprovalStep>,
    /// Pause the run before giving each decision, and resume it after: a paused run takes
    /// decisions and carries on where it stopped once resumed.
    #[serde(default)]
    pub pause_while_deciding: bool,
    /// What must hold.
    pub expect: Expect,
    /// Once the run is checked, retry it from its failed node (`runs retry`), with these
    /// decisions, and check the retry.
    #[serde(default)]
    pub retry: Option<RetryStep>,
}

/// A retry of a case's run, and what must hold of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryStep {
    /// Decisions to give when the retry asks for approval.
    #[serde(default)]
    pub approvals: Vec<ApprovalStep>,
    /// What must hold of the retry.
    pub expect: Expect,
}

/// A decision the runner gives when an approval node of the case's run waits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalStep {
    /// Id of the approval node this decision answers; requests of other nodes are left
    /// waiting.
    pub node: String,
    /// `approve` (default) or `reject`.
    #[serde(default = "approve")]
    pub decision: String,
    /// The approver's name, checked against the node's `approvers` when it lists any. The
    /// suite gives every name a key of its own and signs the decision with it (every one
    /// of them is an operator of the hosted node too); `None` signs with the suite's own
    /// operator key (refused by a node that lists approvers).
    #[serde(default)]
    pub by: Option<String>,
    /// Free text: in the node's output on approval, in its error on rejection.
    #[serde(default)]
    pub comment: Option<String>,
}

fn approve() -> String {
    "approve".into()
}

/// A case's expectations.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `success`, `failure` or `cancelled`.
    #[serde(default)]
    pub status: Option<String>,
    /// The run's output, compared by JSON equality; not checked when absent.
    #[serde(default)]
    pub output: Option<Value>,
    /// Must occur in the run's error (an empty error when the run has none).
    #[serde(default)]
    pub error_contains: Option<String>,
    /// Node id → expected status (`success`, `skipped`…); a node never reported counts as
    /// `pending`.
    #[serde(default)]
    pub nodes: BTreeMap<String, String>,
}

/// Runs `test`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        let timeout =
            workflow_expr::duration::parse(&args.timeout).map_err(|e| anyhow!("--timeout: {e}"))?;
        let resend_interval = workflow_expr::duration::parse(&args.resend_interval)
            .map_err(|e| anyhow!("--resend-interval: {e}"))?;
        let timing = Timing {
            timeout,
            resend_interval,
        };
        let mut passed = 0;
        let mut failed = 0;
        for path in &args.suites {
            let (p, f) = run_suite(path, &args.nats, timing)
                .await
                .with_context(|| format!("suite {}", path.display()))?;
            passed += p;
            failed += f;
        }
        println!("{passed} passed, {failed} failed");
        Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// Loads a suite file.
pub fn load_suite(path: &Path) -> Result<Suite> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let suite: Suite = serde_yaml::from_str(&text)
        .with_context(|| format!("{} is not a valid suite", path.display()))?;
    if suite.cases.is_empty() {
        bail!("{}: cases: a suite needs at least one case", path.display());
    }
    for (i, case) in suite.cases.iter().enumerate() {
        for (j, step) in case.approvals.iter().enumerate() {
            if !["approve", "reject"].contains(&step.decision.as_str()) {
                bail!(
                    "{}: cases[{i}].approvals[{j}].decision: '{}' is not approve or reject",
                    path.display(),
                    step.decision
                );
            }
        }
        if let Some(s) = &case.expect.status {
            if !["success", "failure", "cancelled", "timed_out"].contains(&s.as_str()) {
                bail!(
                    "{}: cases[{i}].expect.status: '{s}' is not success, failure, cancelled \
                     or timed_out",
                    path.display()
                );
            }
        }
    }
    Ok(suite)
}

async fn run_suite(path: &Path, nats: &NatsArgs, timing: Timing) -> Result<(usize, usize)> {
    let suite = load_suite(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let files: Vec<PathBuf> = suite.workflows.iter().map(|w| dir.join(w)).collect();
    let workflows = super::load(&files).ok_or_else(|| anyhow!("invalid workflow files"))?;
    let names: Vec<String> = workflows.iter().map(|w| w.name.clone()).collect();
    let conn = connect(nats).await?;
    let ns = nats.namespace.clone();
    let _temp;
    let stubs = match &suite.agents {
        None => None,
        Some(Value::String(file)) => {
            Some(super::stubs::start(&conn.client, &ns, &dir.join(file)).await?)
        }
        Some(list @ Value::Array(_)) => {
            let temp = tempfile_in(dir, list)?;
            let stubs = super::stubs::start(&conn.client, &ns, &temp).await?;
            _temp = TempFile(temp);
            Some(stubs)
        }
        Some(other) => bail!("agents: expected a file name or a list of agents, found {other}"),
    };
    let mut config = Config {
        namespace: ns.clone(),
        ..Config::default()
    };
    let keys = suite_keys(&mut config, &workflows, &suite.cases);
    let node = WorkflowNode::start(conn.client.clone(), workflows, config)
        .await
        .map_err(anyhow::Error::msg)?;
    let (mut passed, mut failed) = (0, 0);
    println!("suite {}", path.display());
    for case in &suite.cases {
        let workflow = match (&case.workflow, names.as_slice()) {
            (Some(w), _) => w.clone(),
            (None, [only]) => only.clone(),
            (None, _) => bail!(
                "case '{}': name its workflow (the suite has {})",
                case.name,
                names.join(", ")
            ),
        };
        let steps = (case.approvals.clone(), case.pause_while_deciding);
        let approver = spawn_approver(&conn.client, &ns, &workflow, steps, keys.clone()).await?;
        let result = invoke(&conn.client, &ns, &workflow, &case.input, timing, |_| {}).await;
        approver.abort();
        let mut problems = match &result {
            Ok(r) => check(&case.expect, r),
            Err(e) => vec![format!("{e:#}")],
        };
        if let (Some(step), Ok(first)) = (&case.retry, &result) {
            let steps = (step.approvals.clone(), false);
            let approver =
                spawn_approver(&conn.client, &ns, &workflow, steps, keys.clone()).await?;
            let retried = retry(&conn.client, &ns, &workflow, first, timing, &keys).await;
            approver.abort();
            match retried {
                Ok(r) => problems.extend(
                    check(&step.expect, &r)
                        .into_iter()
                        .map(|p| format!("retry: {p}")),
                ),
                Err(e) => problems.push(format!("retry: {e:#}")),
            }
        }
        if problems.is_empty() {
            passed += 1;
            println!("  ok   {}", case.name);
        } else {
            failed += 1;
            println!("  FAIL {}", case.name);
            for p in problems {
                println!("       {p}");
            }
        }
    }
    super::stop_hosted(node).await;
    drop(stubs);
    conn.close().await;
    Ok((passed, failed))
}

/// Retries the run `first` ended, signed with the suite's own (operator) key; its result.
async fn retry(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    first: &RunResult,
    timing: Timing,
    keys: &BTreeMap<String, agent_sdk::Signer>,
) -> Result<RunResult> {
    let execution = first
        .execution_id
        .as_deref()
        .ok_or_else(|| anyhow!("the run never said its execution id"))?;
    let start = agent_sdk::workflow::StartAs {
        task_id: agent_sdk::workflow::new_task_id(),
        version: None,
        signer: keys.get("").cloned(),
        priority: None,
    };
    let retried =
        agent_sdk::workflow::retry(client, ns, workflow, execution, timing, start, |_| {});
    Ok(retried.await?)
}

/// What differs between a result and the expectations (empty: the case passes).
pub fn check(expect: &Expect, result: &RunResult) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(status) = &expect.status {
        if *status != result.status {
            let why = result
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            problems.push(format!(
                "status: expected {status}, got {}{why}",
                result.status
            ));
        }
    }
    if let Some(output) = &expect.output {
        if Some(output) != result.output.as_ref() {
            let got = result
                .output
                .as_ref()
                .map_or("nothing".to_string(), |o| o.to_string());
            problems.push(format!("output: expected {output}, got {got}"));
        }
    }
    if let Some(needle) = &expect.error_contains {
        let error = result.error.clone().unwrap_or_default();
        if !error.contains(needle.as_str()) {
            problems.push(format!(
                "error: expected it to contain {needle:?}, got {error:?}"
            ));
        }
    }
    for (node, status) in &expect.nodes {
        let got = result.nodes.get(node).map_or("pending", String::as_str);
        if got != status {
            problems.push(format!("node '{node}': expected {status}, got {got}"));
        }
    }
    problems
}

/// The keys a suite decides with, by approver name (`""`: the suite's own, for decisions
/// without `by`): one per name its workflows list or its cases decide as, bound in
/// `config`, and all of them the hosted node's operators.
fn suite_keys(
    config: &mut Config,
    workflows: &[crate::definition::Workflow],
    cases: &[Case],
) -> BTreeMap<String, agent_sdk::Signer> {
    let mut keys = super::identity::bind_hosted(config, workflows);
    let named = cases
        .iter()
        .flat_map(|c| &c.approvals)
        .filter_map(|s| s.by.as_deref());
    for name in named {
        let is_name = matches!(
            crate::definition::Approver::parse(name),
            Ok(crate::definition::Approver::Name(_))
        );
        if is_name && !keys.contains_key(name) && !config.approvers.contains_key(name) {
            let signer = agent_sdk::Signer::generate();
            config
                .approvers
                .insert(name.to_owned(), signer.public_key().to_owned());
            keys.insert(name.to_owned(), signer);
        }
    }
    keys.insert(String::new(), agent_sdk::Signer::generate());
    config.operators = keys.values().map(|s| s.public_key().to_owned()).collect();
    keys
}

/// Answers the approval requests of `workflow` with the case's decisions, each signed by
/// the key of its `by` (see [`suite_keys`]); a refused decision is said on stderr.
async fn spawn_approver(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    steps: (Vec<ApprovalStep>, bool),
    keys: BTreeMap<String, agent_sdk::Signer>,
) -> Result<tokio::task::JoinHandle<()>> {
    let (steps, pause) = steps;
    use crate::ops::approvals::{decision_request, Decided};
    use crate::ops::steer::control_request;
    use futures::StreamExt;
    use messages::a2a::Part;
    use messages::workflow::WorkflowDataPart;
    let mut requests = client
        .subscribe(messages::subjects::approvals(ns, workflow))
        .await?;
    agent_sdk::Mesh::new(client.clone()).roundtrip().await?;
    let (client, subject) = (
        client.clone(),
        messages::subjects::agent_request(ns, workflow),
    );
    Ok(tokio::spawn(async move {
        while let Some(msg) = requests.next().await {
            let Ok(part) = serde_json::from_slice::<Part>(&msg.payload) else {
                continue;
            };
            let Some(Ok(Some(WorkflowDataPart::ApprovalRequest(req)))) =
                part.as_data().map(WorkflowDataPart::from_data)
            else {
                continue;
            };
            let Some(step) = steps.iter().find(|s| s.node == req.node_id) else {
                continue;
            };
            let decision = Decided {
                node: &req.node_id,
                approve: step.decision != "reject",
                by: step.by.as_deref(),
                comment: step.comment.as_deref(),
            };
            let id = format!("decision-{}-{}", req.execution_id, req.node_id);
            let request = decision_request(&id, &req.execution_id, decision);
            let Ok(bytes) = serde_json::to_vec(&request) else {
                continue;
            };
            let signer = step
                .by
                .as_ref()
                .and_then(|b| keys.get(b))
                .or_else(|| keys.get(""))
                .expect("the suite's own key is always there");
            let own = keys.get("").expect("the suite's own key is always there");
            let control = |action| {
                let reason = Some("the suite pauses while it decides".into());
                serde_json::to_vec(&control_request(&req.execution_id, action, reason)).ok()
            };
            let send = |bytes: Vec<u8>, signer: agent_sdk::Signer| {
                let (client, subject) = (client.clone(), subject.clone());
                async move {
                    let headers = async_nats::HeaderMap::new();
                    let signer = Some(&signer);
                    agent_sdk::signing::request(&client, subject, headers, bytes.into(), signer)
                        .await
                }
            };
            if let Some(paused) = control(messages::control::RunControl::Pause).filter(|_| pause) {
                if let Err(e) = send(paused, own.clone()).await {
                    eprintln!("pausing run {} failed: {e}", req.execution_id);
                }
            }
            let answer = send(bytes, signer.clone()).await;
            if let Some(resumed) = control(messages::control::RunControl::Resume).filter(|_| pause)
            {
                if let Err(e) = send(resumed, own.clone()).await {
                    eprintln!("resuming run {} failed: {e}", req.execution_id);
                }
            }
            let refused = answer.ok().and_then(|a| {
                let v: Value = serde_json::from_slice(&a.payload).ok()?;
                (v["result"]["status"]["state"] == "failed").then(|| v.to_string())
            });
            if let Some(why) = refused {
                eprintln!("the decision on {} was refused: {why}", req.node_id);
            }
        }
    }))
}

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tempfile_in(dir: &Path, agents: &Value) -> Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("stubs-{}.yaml", uuid::Uuid::new_v4().simple()));
    let _ = dir;
    let doc = serde_json::json!({ "agents": agents });
    std::fs::write(&path, serde_yaml::to_string(&doc)?)?;
    Ok(path)
}
