//! `workflow-node serve FILE_OR_DIR...`: host workflows on the mesh until SIGINT/SIGTERM,
//! then drain (stop taking events, finish the one in hand, exit).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::connect::{connect, connect_when_up, Connection, NatsArgs};
use crate::shell::{Config, MetricsConfig, WorkflowNode};

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workflow files or directories.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// While no server answers at the URL, keep trying (saying so every few seconds)
    /// instead of exiting with code 2.
    #[arg(long)]
    pub wait_for_server: bool,
    /// Seconds between agent card publications.
    #[arg(long, default_value_t = 10.0)]
    pub card_interval: f64,
    /// Seconds an event may be in hand before another replica takes it over.
    #[arg(long, default_value_t = 5.0)]
    pub ack_wait: f64,
    /// Seconds a call in flight may stay silent (no heartbeat, status update or reply)
    /// before the node sends the same attempt again; 0 never does.
    #[arg(long, default_value_t = 10.0)]
    pub call_check: f64,
    /// The process's runtime threads (default: one per core). Where the NATS server
    /// shares the cores, fewer threads hand events between fewer cores: on two cores, one
    /// thread spent 13–20 % less CPU per node execution for the same throughput
    /// (`docs/figures.md`).
    #[arg(long, env = "MESH_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Worker tasks per workflow: the runs of a workflow are spread over them, and each
    /// works on one event (or one run's group of events) at a time.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub workers: u32,
    /// Events a replica asks its workflow's consumer for at a time (see the README's
    /// "Figures" for what was measured).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub pull_batch: u32,
    /// How long one ask for events stays open on the server (`30s`; at least 1s).
    #[arg(long, default_value = "30s", value_parser = retention)]
    pub pull_expires: Duration,
    /// Replicas of the streams and buckets (3 on a 3-node cluster).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Requests to one workflow handled at once; more wait their turn.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,
    /// The largest request to a workflow, in bytes; a larger one is refused with a JSON-RPC
    /// error (inputs larger than this go as artifacts in the object store).
    #[arg(long, default_value_t = crate::limits::DEFAULT_MAX_REQUEST_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_request_bytes: u64,
    /// The byte limit of a stream or bucket the node creates, as `NAME=BYTES` (repeatable;
    /// NAME is one of runs, wakes, versions, secrets, nonces, early_cancels, schedules, events,
    /// history, artifacts, cards;
    /// the defaults and what a full one does are in docs/security.md).
    #[arg(long = "store-limit", value_name = "NAME=BYTES", value_parser = store_limit)]
    pub store_limits: Vec<(String, u64)>,
    /// How long an ended run's record, keys, markers and artifacts are kept (`7d`, `12h`,
    /// `30s`; a bare number is seconds).
    #[arg(long, default_value = "7d", value_parser = retention)]
    pub retention: Duration,
    /// Serve metrics in the Prometheus text format at `http://ADDR/metrics` (for example
    /// `0.0.0.0:9464`; port 0 picks a free one, printed at start). Metrics also go over
    /// OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    #[arg(long, value_name = "ADDR", env = "MESH_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// The words sent to agents and callers: `mesh` (ours) or `reference`
    /// (`structured_invocation_request`/`_result`, status `error`). Both are always read.
    #[arg(long, default_value = "mesh", env = "MESH_DIALECT")]
    pub dialect: messages::workflow::Dialect,
    /// How run entries are written: `lz4` (compressed JSON, about 40 % of the bytes) or
    /// `json`. Both are always read; `json` is for a rolling upgrade from a version that
    /// reads only JSON, until none of its replicas is left.
    #[arg(long, default_value = "lz4", env = "MESH_RECORD_FORMAT")]
    pub record_format: crate::shell::run::entry::RecordFormat,
    /// How long the drain on SIGINT/SIGTERM may take (`25s`): after it (a NATS server gone
    /// for good, say) `serve` exits with code 4; the events it held come back to another
    /// replica after their ack wait.
    #[arg(long, default_value = "25s", value_parser = retention)]
    pub drain_timeout: Duration,
    /// Serve liveness (`/livez`) and readiness (`/readyz`) probes at `http://ADDR/` (port 0
    /// picks a free one, printed at start): ready once started, not while draining or cut
    /// off from NATS.
    #[arg(long, value_name = "ADDR", env = "MESH_HEALTH_ADDR")]
    pub health_addr: Option<SocketAddr>,
    /// On SIGINT/SIGTERM, how long to stay unready but serving before draining (`5s`), so
    /// that an orchestrator stops routing to this replica first; a second signal ends it.
    #[arg(long, default_value = "0s", value_parser = delay, env = "MESH_SHUTDOWN_DELAY")]
    pub shutdown_delay: Duration,
    /// Serve the web view (pages and JSON API, `docs/http.md`) at `http://ADDR/` (port 0
    /// picks a free one, printed at start).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// The key the starts, cancels and decisions sent from the web view are signed with.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
    /// Who may use the web view's API.
    #[command(flatten)]
    pub access: crate::web::AccessArgs,
    /// What the MCP door at `/mcp` serves (with `--http`).
    #[command(flatten)]
    pub mcp: crate::doors::mcp::McpArgs,
    /// Approver names and operator keys the node trusts.
    #[command(flatten)]
    pub trust: super::identity::TrustArgs,
}

fn delay(text: &str) -> Result<Duration, String> {
    workflow_expr::duration::parse(text).map_err(|e| e.to_string())
}

fn retention(text: &str) -> Result<Duration, String> {
    match workflow_expr::duration::parse(text) {
        Ok(d) if d.as_secs() >= 1 => Ok(d),
        Ok(_) => Err("must be at least 1s".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `NAME=BYTES` of `--store-limit`, checked against the names the node knows.
fn store_limit(text: &str) -> Result<(String, u64), String> {
    let (name, bytes) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=BYTES"))?;
    let bytes: u64 = bytes
        .trim()
        .parse()
        .map_err(|_| format!("'{bytes}' is not a whole number of bytes"))?;
    crate::limits::StoreLimits::default().set(name.trim(), bytes)?;
    Ok((name.trim().to_owned(), bytes))
}

/// Runs `serve`.
pub fn run(args: Args) -> ExitCode {
    super::block_on_threads(args.threads.map(usize::from), async move {
        let Some(workflows) = super::load(&args.files) else {
            return Ok(ExitCode::from(1));
        };
        let access = crate::web::Access::new(&args.access)?;
        if let Some(Err(why)) = args.http.map(|addr| access.check_bind(addr)) {
            return super::runs::refuse(why);
        }
        let conn = if args.wait_for_server {
            connect_when_up(&args.nats).await?
        } else {
            connect(&args.nats).await?
        };
        let probes = agent_sdk::health::Probes::new(conn.client.clone());
        if let Some(addr) = args.health_addr {
            let bound = probes.serve(addr).await?;
            eprintln!("health at http://{bound}/livez and /readyz");
        }
        let names: Vec<String> = workflows.iter().map(|w| w.name.clone()).collect();
        let node = WorkflowNode::start(conn.client.clone(), workflows, config_of(&args))
            .await
            .map_err(anyhow::Error::msg)?;
        eprintln!(
            "serving {} on {} (namespace '{}')",
            names.join(", "),
            conn.url,
            args.nats.namespace
        );
        if let Some(addr) = node.metrics_addr() {
            eprintln!("metrics at http://{addr}/metrics");
        }
        ready_when_pulling(&probes, &node);
        let web = start_web(&args, &conn, access).await?;
        let code = until_told_or_broken(&args, &probes, &node).await?;
        drop(web);
        drain(node, conn, args.drain_timeout, code).await
    })
}

/// The node's configuration, from the arguments.
fn config_of(args: &Args) -> Config {
    let mut config = Config {
        namespace: args.nats.namespace.clone(),
        card_interval: Duration::from_secs_f64(args.card_interval.max(0.1)),
        ack_wait: Duration::from_secs_f64(args.ack_wait.max(0.5)),
        call_check: (args.call_check > 0.0)
            .then(|| Duration::from_secs_f64(args.call_check.max(0.1))),
        replicas: args.replicas,
        workers: args.workers as usize,
        pull: crate::shell::Pull {
            batch: args.pull_batch as usize,
            expires: args.pull_expires,
        },
        max_concurrent_requests: args.max_concurrent_requests as usize,
        limits: crate::limits::Limits {
            max_request_bytes: usize::try_from(args.max_request_bytes).unwrap_or(usize::MAX),
        },
        store_limits: {
            let mut limits = crate::limits::StoreLimits::default();
            for (name, bytes) in &args.store_limits {
                // Checked when parsed.
                let _ = limits.set(name, *bytes);
            }
            limits
        },
        retention: args.retention,
        dialect: args.dialect,
        record_format: args.record_format,
        metrics: MetricsConfig {
            addr: args.metrics_addr,
            ..MetricsConfig::default()
        },
        card_trust: args.nats.cards.clone(),
        ..Config::default()
    };
    args.trust.apply(&mut config);
    config
}

/// Makes `/readyz` say ready while every workflow's events are pulled.
fn ready_when_pulling(probes: &agent_sdk::health::Probes, node: &WorkflowNode) {
    let health = node.health_handle();
    probes.started_with(move || match &health.broken()[..] {
        [] => Ok(()),
        broken => {
            let names: Vec<&str> = broken.iter().map(|(w, _)| w.as_str()).collect();
            Err(format!("events not pulled: {}", names.join(", ")))
        }
    });
}

/// The web view, when `--http` asks for one.
async fn start_web(
    args: &Args,
    conn: &Connection,
    access: crate::web::Access,
) -> Result<Option<crate::web::Web>> {
    let Some(addr) = args.http else {
        return Ok(None);
    };
    let signer = args.sign.signer()?;
    let ns = &args.nats.namespace;
    let client = conn.client.clone();
    // The view and `/mcp` count cards as the node does: `--agent-key` and
    // `--require-signed-cards` apply to every reader of this process.
    let (trust, mcp) = (args.nats.cards.clone(), args.mcp.clone());
    let web = crate::web::Web::start_with_mcp(client, ns, signer, access, addr, trust, mcp).await?;
    eprintln!("web view at http://{}/", web.addr());
    Ok(Some(web))
}

/// Waits for SIGINT/SIGTERM (then unready, for the shutdown delay) or for a workflow whose
/// events cannot be pulled; the exit code.
async fn until_told_or_broken(
    args: &Args,
    probes: &agent_sdk::health::Probes,
    node: &WorkflowNode,
) -> Result<ExitCode> {
    Ok(tokio::select! {
        signal = agent_sdk::health::signalled() => {
            signal?;
            // Unready before saying so: whoever reads the line finds /readyz 503.
            probes.draining();
            if !args.shutdown_delay.is_zero() {
                eprintln!("unready; draining in {} s (or at a second signal)", args.shutdown_delay.as_secs_f64());
            }
            probes.hold_unready(args.shutdown_delay).await?;
            eprintln!("draining");
            ExitCode::SUCCESS
        }
        workflow = broken_for(node, UNHEALTHY_EXIT) => {
            eprintln!(
                "the events of {workflow} could not be pulled for {}s: exiting, so that a \
                 supervisor restarts this replica",
                UNHEALTHY_EXIT.as_secs()
            );
            ExitCode::from(3)
        }
    })
}

/// Drains the node within `timeout`, then closes the connection; `code`, or 4 when the
/// drain did not finish.
async fn drain(
    node: WorkflowNode,
    conn: Connection,
    timeout: Duration,
    code: ExitCode,
) -> Result<ExitCode> {
    if tokio::time::timeout(timeout, node.shutdown())
        .await
        .is_err()
    {
        eprintln!(
            "the drain did not finish within {} s (is the NATS server at {} reachable?): \
             exiting; the events in hand return to the stream after their ack wait",
            timeout.as_secs(),
            conn.url
        );
        conn.close().await;
        return Ok(ExitCode::from(4));
    }
    conn.close().await;
    Ok(code)
}

/// How long a workflow's events may go unpulled before `serve` gives up (exit code 3).
const UNHEALTHY_EXIT: Duration = Duration::from_secs(60);

/// Returns the first workflow whose events have not been pulled for `limit`.
async fn broken_for(node: &WorkflowNode, limit: Duration) -> String {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if let Some((workflow, _)) = node
            .health()
            .broken()
            .into_iter()
            .find(|(_, since)| since.elapsed() >= limit)
        {
            return workflow;
        }
    }
}
