//! `mesh-bench`: the end-to-end benchmark of the workflow node over real NATS.
//!
//! `cargo run --release -p workflow-node --bin mesh-bench -- SCENARIO [--nats-url URL
//! [--monitor-url URL]] [--json FILE]`, SCENARIO one of `chain`, `throughput`, `map`,
//! `replicas`, `resume`, `all`, `pull`. Starts its own nats-server (monitoring on an ephemeral
//! loopback port) unless given a URL; prints a table; writes one JSON object per scenario
//! with `--json`. With monitoring, `chain`, `throughput`, `map` and every floor also report
//! the server's own counts (JetStream writes, messages and bytes in and out) per node
//! execution, per map item and per floor operation. The bench, the server and the node
//! share the machine's cores.

mod mesh_bench;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use mesh_bench::counters::Monitor;
use mesh_bench::env::Env;
use mesh_bench::{procs, scenarios, Report};

/// Which scenario to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// 10 agent nodes in sequence, one run at a time: per-node overhead, start latency.
    Chain,
    /// A 5-node fork/join, 64 and 256 runs in flight: runs/s, node executions/s.
    Throughput,
    /// A map over 100, 1,000, 10,000 items: per-item overhead, KV bytes per item.
    Map,
    /// `throughput` with 1, 2 and 3 node processes; RSS with 1,000 runs in flight.
    Replicas,
    /// `kill -9` of a replica mid-chain: time to the next dispatch.
    Resume,
    /// The event pull's batch and expiry and the worker count: `throughput` at 64 in flight
    /// and `chain` per setting. Not part of `all`.
    Pull,
    /// Every scenario but `pull`, in that order.
    All,
}

/// The end-to-end benchmark of the workflow node over real NATS.
#[derive(Debug, Parser)]
#[command(name = "mesh-bench")]
struct Args {
    /// What to measure; `all` runs every scenario, one after the other.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Use this server instead of starting one.
    #[arg(long)]
    nats_url: Option<String>,
    /// The monitoring endpoint (http://HOST:PORT) of the server given by `--nats-url`,
    /// for the server's counts; without it they are left out. Our own server's is known.
    #[arg(long, requires = "nats_url")]
    monitor_url: Option<String>,
    /// Write the figures here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seconds a call may stay silent before the in-process node sends it again (its
    /// liveness check); 0 turns the check off, to measure what it costs.
    #[arg(long, default_value_t = 10.0)]
    call_check: f64,
    /// Record a flame graph (SVG, and its folded stacks beside it) of the in-process
    /// node's threads while `chain` or `throughput` times its runs, with `perf` (with
    /// `all`, the later one's).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// How the in-process node writes run entries: `lz4` (compressed, the default) or
    /// `json`, to measure what compression costs and saves.
    #[arg(long, default_value = "lz4")]
    record_format: workflow_node::shell::run::entry::RecordFormat,
    /// Do not count the in-process node's allocations: the counting allocator's own work
    /// then stays out of the node's CPU figure.
    #[arg(long)]
    no_allocation_count: bool,
}

/// Counts the in-process node's allocations (see `mesh_bench::usage`).
#[global_allocator]
static ALLOCATOR: mesh_bench::usage::Allocator = mesh_bench::usage::Allocator::system();

fn main() -> ExitCode {
    let args = Args::parse();
    if !args.no_allocation_count {
        mesh_bench::usage::count_allocations();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let monitor = args
        .monitor_url
        .as_deref()
        .map(Monitor::parse)
        .transpose()?;
    let mut env = Env::new(args.nats_url.clone(), monitor)?;
    env.call_check =
        (args.call_check > 0.0).then(|| std::time::Duration::from_secs_f64(args.call_check));
    env.profile = args.profile.clone();
    env.record_format = args.record_format;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "mesh-bench on {} ({} server, {cores} cores shared by the server, the node, the agents and the bench)",
        env.url,
        if env.server.is_some() { "own" } else { "given" }
    );
    let list = match args.scenario {
        Scenario::All => vec![
            Scenario::Chain,
            Scenario::Throughput,
            Scenario::Map,
            Scenario::Replicas,
            Scenario::Resume,
        ],
        s => vec![s],
    };
    let mut out = serde_json::Map::new();
    for s in list {
        let report = match s {
            Scenario::Chain => scenarios::chain(&env).await?,
            Scenario::Throughput => scenarios::throughput(&env).await?,
            Scenario::Map => mesh_bench::map::map(&env).await?,
            Scenario::Replicas => procs::replicas(&env).await?,
            Scenario::Resume => procs::resume(&env).await?,
            Scenario::Pull => mesh_bench::pull::pull(&env).await?,
            Scenario::All => unreachable!("expanded above"),
        };
        print_table(&report);
        out.insert(report.name.to_string(), report.json);
    }
    if let Some(path) = &args.json {
        std::fs::write(
            path,
            serde_json::to_vec_pretty(&serde_json::Value::Object(out))?,
        )?;
        println!("figures written to {}", path.display());
    }
    Ok(())
}

fn print_table(r: &Report) {
    let f = &r.floor;
    let mut rows = vec![
        (
            "floor request/reply p50 / p99".to_string(),
            format!("{:.0} µs / {:.0} µs", f.rr_p50, f.rr_p99),
        ),
        (
            "floor KV CAS p50 / p99".to_string(),
            format!("{:.0} µs / {:.0} µs", f.cas_p50, f.cas_p99),
        ),
    ];
    if let Some((rr, cas)) = &f.counts {
        rows.push(("floor per request/reply".into(), rr.text()));
        rows.push(("floor per KV CAS".into(), cas.text()));
    }
    rows.extend(r.rows.iter().cloned());
    let width = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    println!("\n== {} ==", r.name);
    for (label, value) in rows {
        println!("  {label:<width$}  {value}");
    }
}
