//! `mesh-agents FILE [--nats-url URL] [--namespace NS] [connection options]`: serves the
//! stub agents and LLM agents (`agent_sdk::llm`) a YAML file describes, until ctrl-c or
//! SIGTERM. Also built as `stub-agents`, its old name (it served only stubs then), kept
//! for existing scripts: the program names itself by the name it was built as, and says
//! so in `--help`. User, NKey, credentials,
//! TLS and inbox prefix: flags or `NATS_*` variables (`agent_sdk::ConnectConfig`). Without a URL (flag or `NATS_URL`) it starts a local
//! nats-server with JetStream in a data directory of its own, and stops it on exit.
//!
//! `--nkey-seed-file PATH` (or `MESH_NKEY_SEED_FILE`) signs the agents' cards with that
//! key (see `agent_sdk::card_trust`).
//!
//! `--health-addr ADDR` serves `/livez` and `/readyz` (`agent_sdk::health`); on SIGTERM it
//! turns unready, waits `--shutdown-delay` (or a second signal), then stops taking
//! requests and finishes the calls in hand.
//!
//! Exit 2 when it cannot start serving: an invalid file, or a server that does not answer
//! (at once, naming the URL); once serving, the client reconnects on its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agent_sdk::health::{signalled, Probes};
use agent_sdk::{load_stub_file, serve_stubs_signed, DEFAULT_NAMESPACE};
use anyhow::{Context, Result};
use clap::Parser;

/// What `--help` says the program does.
const ABOUT: &str = "Serve the agents an agents file declares: stub agents (fixed rules, \
for testing workflows without any LLM) and LLM agents (a model block: any \
OpenAI-compatible chat-completions endpoint, with the mesh as tools).";

/// The old name's note, before [`ABOUT`].
const OLD_NAME: &str = "stub-agents is the old name of mesh-agents (it served only stub \
agents then), kept for existing scripts; use mesh-agents.";

#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The agents file (`agents: [{name, rules: [{when, output | fail}]} | {name, model:
    /// {base_url, name}, instruction, tools}, ...]`).
    file: PathBuf,
    /// NATS server URL; without it (and without NATS_URL) a local server is started.
    #[arg(long, env = "NATS_URL")]
    nats_url: Option<String>,
    /// Subject namespace.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    namespace: String,
    /// Serve liveness (`/livez`) and readiness (`/readyz`) probes at `http://ADDR/` (port 0
    /// picks a free one, printed at start): ready once every agent is subscribed and its
    /// card out, not while draining or cut off from NATS. `/metrics` there has the LLM
    /// agents' calls, tokens and waits in the Prometheus text format.
    #[arg(long, value_name = "ADDR", env = "MESH_HEALTH_ADDR")]
    health_addr: Option<SocketAddr>,
    /// On SIGINT/SIGTERM, how long to stay unready but serving before draining (`5s`), so
    /// that an orchestrator stops routing to this replica first; a second signal ends it.
    #[arg(long, default_value = "0s", value_parser = delay, env = "MESH_SHUTDOWN_DELAY")]
    shutdown_delay: Duration,
    /// A file holding an NKey user seed (`SU…`; a `.creds` file's seed works too): signs
    /// every agent's card, so that readers who bind the names to its key take them.
    #[arg(long, env = "MESH_NKEY_SEED_FILE", value_name = "PATH")]
    nkey_seed_file: Option<PathBuf>,
    /// User, NKey or credentials, TLS and inbox prefix.
    #[command(flatten)]
    connect: agent_sdk::ConnectConfig,
}

/// The name the program runs as, for its messages.
static PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

fn program() -> &'static str {
    PROGRAM.get().copied().unwrap_or("mesh-agents")
}

fn delay(text: &str) -> Result<Duration, String> {
    workflow_expr::duration::parse(text).map_err(|e| e.to_string())
}

/// The `stub-agents` binary (the old name).
#[allow(dead_code)] // mesh-agents, which includes this file, enters by `main_as`.
pub(crate) fn main() -> ExitCode {
    main_as("stub-agents")
}

/// Runs the program as `name` (`mesh-agents`, or the old `stub-agents`): its `--help`,
/// its messages' prefix and its service name in traces.
pub(crate) fn main_as(name: &'static str) -> ExitCode {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let about = match name {
        "stub-agents" => format!("{OLD_NAME}\n\n{ABOUT}"),
        _ => ABOUT.to_owned(),
    };
    let matches = Args::command()
        .long_about(about.clone())
        .name(name)
        .bin_name(name)
        .about(about)
        .get_matches();
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    PROGRAM.set(name).ok();
    // Logs on stderr (RUST_LOG, default warn); traces when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let telemetry = agent_sdk::telemetry::Telemetry::builder(name)
        .log_default(Some("warn"))
        .init();
    let stubs = match load_stub_file(&args.file) {
        Ok(s) => s,
        Err(problems) => {
            for p in problems {
                eprintln!("{p}");
            }
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: cannot start the runtime: {e}", program());
            return ExitCode::from(1);
        }
    };
    let code = match runtime.block_on(run(args, stubs)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e:#}", program());
            ExitCode::from(2)
        }
    };
    // The last spans go out before the exit.
    runtime.block_on(telemetry.shutdown());
    code
}

async fn run(args: Args, stubs: agent_sdk::StubFile) -> Result<()> {
    let mut embedded = None;
    let url = match args.nats_url.clone() {
        Some(url) => url,
        None => {
            let dir =
                std::env::temp_dir().join(format!("{}-nats-{}", program(), std::process::id()));
            let server = nats_process::NatsServer::start(nats_process::Options {
                data_dir: Some(dir.clone()),
                ..Default::default()
            })
            .context("starting a local nats-server (give --nats-url to use another)")?;
            eprintln!(
                "{}: no --nats-url or NATS_URL; started a local nats-server at {} (data in {})",
                program(),
                server.url(),
                dir.display()
            );
            let url = server.url();
            embedded = Some((server, dir));
            url
        }
    };
    let result = serve(&url, &args, stubs).await;
    if let Some((mut server, dir)) = embedded {
        if let Err(e) = server.stop() {
            eprintln!("{}: stopping the local nats-server: {e}", program());
        }
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

async fn serve(url: &str, args: &Args, stubs: agent_sdk::StubFile) -> Result<()> {
    let ns = &args.namespace;
    let client = args.connect.connect(url).await?;
    let probes = Probes::new(client.clone());
    if let Some(addr) = args.health_addr {
        let bound = probes
            .serve_with_metrics(addr)
            .await
            .with_context(|| format!("serving the health probes at {addr}"))?;
        eprintln!("{}: health at http://{bound}/livez and /readyz", program());
        eprintln!("{}: metrics at http://{bound}/metrics", program());
    }
    let names: Vec<String> = (stubs.agents.iter().map(|a| a.name.clone()))
        .chain(stubs.llm.iter().map(|a| a.name.clone()))
        .collect();
    let signer = match &args.nkey_seed_file {
        Some(path) => Some(
            agent_sdk::Signer::from_seed_file(path)
                .with_context(|| format!("--nkey-seed-file {}", path.display()))?,
        ),
        None => None,
    };
    if let Some(signer) = &signer {
        eprintln!("{}: cards signed by key {}", program(), signer.public_key());
    }
    let handles = serve_stubs_signed(client, ns, stubs, signer).await?;
    probes.started();
    eprintln!(
        "{}: serving {} in namespace {ns} on {url}; ctrl-c to stop",
        program(),
        names.join(", ")
    );
    signalled().await.context("waiting for SIGINT or SIGTERM")?;
    probes.draining();
    if !args.shutdown_delay.is_zero() {
        eprintln!(
            "{}: unready; stopping in {} s (or at a second signal)",
            program(),
            args.shutdown_delay.as_secs_f64()
        );
    }
    probes
        .hold_unready(args.shutdown_delay)
        .await
        .context("waiting for a second signal")?;
    eprintln!("{}: stopping", program());
    for h in handles {
        h.stop().await;
    }
    Ok(())
}
