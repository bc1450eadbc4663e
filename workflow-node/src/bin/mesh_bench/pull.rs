//! `pull`: the settings of the event pull and the worker count, measured rather than
//! guessed. For each setting: a fresh node (in process) and echo agent, a warm-up, the
//! fork/join workflow at 64 runs in flight (node executions/s) and the 10-node chain one run
//! at a time (run latency / 10, p50). Settings that differ by one knob from the defaults,
//! so each row reads against the first.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value};
use workflow_node::shell::{Config, Pull};

use super::env::{self, percentile_us, Env};
use super::floor::{self, round};
use super::scenarios::{batch, us, Mesh, CHAIN_NODES};
use super::Report;

/// One setting: a label, the worker count and the pull.
struct Setting {
    label: &'static str,
    workers: usize,
    pull: Pull,
}

fn settings() -> Vec<Setting> {
    let d = Config::default();
    let s = |label, workers, batch, expires_s| Setting {
        label,
        workers,
        pull: Pull {
            batch,
            expires: Duration::from_secs(expires_s),
        },
    };
    let (w, b, e) = (d.workers, d.pull.batch, d.pull.expires.as_secs());
    vec![
        s("defaults", w, b, e),
        s("batch 1", w, 1, e),
        s("batch 10", w, 10, e),
        s("batch 50", w, 50, e),
        s("batch 1000", w, 1000, e),
        s("expires 1 s", w, b, 1),
        s("expires 5 s", w, b, 5),
        s("workers 4", 4, b, e),
        s("workers 16", 16, b, e),
        s("workers 32", 32, b, e),
        s("workers 128", 128, b, e),
    ]
}

/// Runs of the chain timed per setting.
const CHAIN_RUNS: usize = 100;
/// Fork/join runs per setting, 64 in flight.
const FORK_JOIN_RUNS: usize = 1280;

/// `pull`: every setting of [`settings`], one after the other.
pub(crate) async fn pull(env: &Env) -> Result<Report> {
    let floor = floor::measure(env, "pull").await?;
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for (i, setting) in settings().into_iter().enumerate() {
        let config = Config {
            workers: setting.workers,
            pull: setting.pull,
            ..Config::default()
        };
        let workflows = vec![
            env::workflow(&env::fork_join_yaml("ForkJoin"))?,
            env::workflow(&env::chain_yaml("Chain", "Echo", CHAIN_NODES))?,
        ];
        let mesh = Mesh::start_with(env, &format!("pull{i}"), workflows, config).await?;
        let limit = Duration::from_secs(60);
        batch(&mesh.caller, &mesh.ns, "ForkJoin", 128, 64, limit).await?;
        let (done, secs) = batch(
            &mesh.caller,
            &mesh.ns,
            "ForkJoin",
            FORK_JOIN_RUNS,
            64,
            limit,
        )
        .await?;
        let nodes_per_s = done as f64 * env::FORK_JOIN_NODES as f64 / secs;
        let input = json!({"v": 1});
        let mut per_node = Vec::with_capacity(CHAIN_RUNS);
        for _ in 0..CHAIN_RUNS {
            let t0 = Instant::now();
            mesh.run("Chain", &input, Duration::from_secs(30)).await?;
            per_node.push(t0.elapsed() / CHAIN_NODES as u32);
        }
        mesh.stop().await;
        per_node.sort();
        let chain_p50 = percentile_us(&per_node, 50.0);
        rows.push((
            format!(
                "{} (workers {}, batch {}, expires {:?})",
                setting.label, setting.workers, setting.pull.batch, setting.pull.expires
            ),
            format!(
                "{nodes_per_s:.0} node executions/s at 64 in flight; chain {} per node",
                us(chain_p50)
            ),
        ));
        figures.push(json!({
            "setting": setting.label,
            "workers": setting.workers,
            "pull_batch": setting.pull.batch,
            "pull_expires_s": setting.pull.expires.as_secs(),
            "node_executions_per_s": round(nodes_per_s),
            "chain_per_node_p50_us": round(chain_p50),
        }));
    }
    Ok(Report {
        name: "pull",
        json: json!({"floor": floor.json(), "settings": Value::Array(figures)}),
        floor,
        rows,
    })
}
