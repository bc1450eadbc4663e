//! `map`: maps over 100, 1,000 and 10,000 items with `concurrency_limit` 100: time per
//! item, KV bytes per item (a meter subscribed to the run's buckets), and the server's
//! counts per item.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use serde_json::json;
use workflow_node::shell::run::names;

use super::counters::Counts;
use super::env::{self, Env};
use super::floor::{self, round};
use super::scenarios::{compare_with_floor, us, Mesh};
use super::Report;

/// Longest wait for the meter to have seen every write the server stored.
const METER_LIMIT: Duration = Duration::from_secs(10);

/// Counts messages and bytes written to buckets (every KV write is a message on
/// `$KV.{bucket}.{key}`), and the largest one.
#[derive(Default)]
struct Seen {
    msgs: AtomicU64,
    /// As the meter's client counts a message: subject, reply, headers and payload.
    bytes: AtomicU64,
    /// As the server counts a delivery: headers and payload.
    delivered_bytes: AtomicU64,
    largest: AtomicU64,
}

/// What the meter saw over one measurement.
#[derive(Debug, Clone, Copy)]
struct Metered {
    msgs: u64,
    bytes: u64,
    delivered_bytes: u64,
    largest: u64,
}

struct KvMeter {
    seen: Arc<Seen>,
    client: async_nats::Client,
    task: tokio::task::JoinHandle<()>,
}

impl KvMeter {
    async fn start(client: async_nats::Client, buckets: &[String]) -> Result<KvMeter> {
        let seen = Arc::new(Seen::default());
        let mut subs = Vec::new();
        for b in buckets {
            subs.push(client.subscribe(messages::subjects::kv_all(b)).await?);
        }
        agent_sdk::Mesh::new(client.clone()).roundtrip().await?;
        let s = seen.clone();
        let task = tokio::spawn(async move {
            let mut all = futures::stream::select_all(subs);
            while let Some(msg) = all.next().await {
                let n = msg.length as u64;
                let routing = msg.subject.len() + msg.reply.as_ref().map_or(0, |r| r.len());
                s.msgs.fetch_add(1, Ordering::Relaxed);
                s.bytes.fetch_add(n, Ordering::Relaxed);
                s.delivered_bytes
                    .fetch_add(n.saturating_sub(routing as u64), Ordering::Relaxed);
                s.largest
                    .fetch_max(msg.payload.len() as u64, Ordering::Relaxed);
            }
        });
        Ok(KvMeter { seen, client, task })
    }

    /// What was seen since the last take, once at least `expected` messages were (the
    /// writes the server stored to the metered buckets); without that figure, once a
    /// message of ours came back and the count holds still.
    async fn take(&self, expected: Option<u64>) -> Result<Metered> {
        let deadline = Instant::now() + METER_LIMIT;
        match expected {
            Some(n) => {
                while self.seen.msgs.load(Ordering::Relaxed) < n && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            None => {
                agent_sdk::Mesh::new(self.client.clone())
                    .roundtrip()
                    .await?;
                let mut last = u64::MAX;
                while self.seen.msgs.load(Ordering::Relaxed) != last && Instant::now() < deadline {
                    last = self.seen.msgs.load(Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        Ok(Metered {
            msgs: self.seen.msgs.swap(0, Ordering::Relaxed),
            bytes: self.seen.bytes.swap(0, Ordering::Relaxed),
            delivered_bytes: self.seen.delivered_bytes.swap(0, Ordering::Relaxed),
            largest: self.seen.largest.swap(0, Ordering::Relaxed),
        })
    }
}

impl Drop for KvMeter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One size's figures.
struct Size {
    secs: f64,
    kv_bytes_per_item: f64,
    largest: u64,
    counts: Option<Counts>,
}

/// Maps over `n` items `repeats` times; the median time and KV bytes, the largest write,
/// and the server's counts over all repeats.
async fn measure_size(
    env: &Env,
    mesh: &Mesh,
    meter: &KvMeter,
    streams: &[String],
    n: usize,
    repeats: usize,
) -> Result<Size> {
    let input = env::map_input(n);
    let (mut times, mut bytes, mut largest) = (Vec::new(), Vec::new(), 0);
    let mut total: Option<Counts> = None;
    for _ in 0..repeats {
        let before = env.counters().await?;
        meter.take(None).await?;
        let t0 = Instant::now();
        mesh.run("Map", &input, Duration::from_secs(600)).await?;
        times.push(t0.elapsed().as_secs_f64());
        let after = env.counters().await?;
        let expected = before
            .as_ref()
            .zip(after.as_ref())
            .map(|(b, a)| a.writes_to(b, streams));
        let m = meter.take(expected).await?;
        bytes.push(m.bytes as f64);
        largest = largest.max(m.largest);
        if let (Some(b), Some(a)) = (&before, &after) {
            // The meter's own copies are deliveries the node did not cause.
            let c = a
                .since(b)
                .without_delivered(m.msgs, m.delivered_bytes)
                .named(&mesh.ns);
            total.get_or_insert_with(Counts::default).add(&c);
        }
    }
    Ok(Size {
        secs: env::median(times),
        kv_bytes_per_item: env::median(bytes) / n as f64,
        largest,
        counts: total,
    })
}

/// `map`: maps over 100, 1,000 and 10,000 items with `concurrency_limit` 100.
pub(crate) async fn map(env: &Env) -> Result<Report> {
    let floor = floor::measure(env, "map").await?;
    let wf = env::workflow(&env::map_yaml("Map"))?;
    let mesh = Mesh::start(env, "map", wf).await?;
    let buckets = [names::runs_bucket(&mesh.ns), names::wakes_bucket(&mesh.ns)];
    let streams: Vec<String> = buckets.iter().map(|b| format!("KV_{b}")).collect();
    let meter = KvMeter::start(env.connect().await?, &buckets).await?;
    mesh.run("Map", &env::map_input(100), Duration::from_secs(60))
        .await?;
    let mut per_item = BTreeMap::new();
    let mut bytes_per_item = BTreeMap::new();
    let mut total_ms = BTreeMap::new();
    let mut largest = BTreeMap::new();
    let mut counts_per_item = BTreeMap::new();
    let mut rows = Vec::new();
    let mut last_counts = None;
    for n in [100usize, 1_000, 10_000] {
        // Small maps are repeated (median), so one hiccup does not decide the figure.
        let repeats = if n <= 1_000 { 5 } else { 1 };
        let size = measure_size(env, &mesh, &meter, &streams, n, repeats).await?;
        let per = size.secs * 1e6 / n as f64;
        let bpi = size.kv_bytes_per_item;
        per_item.insert(n.to_string(), round(per));
        bytes_per_item.insert(n.to_string(), round(bpi));
        total_ms.insert(n.to_string(), round(size.secs * 1e3));
        largest.insert(n.to_string(), size.largest);
        rows.push((
            format!("{n} items"),
            format!(
                "{:.0} ms total, {} per item, {bpi:.0} KV bytes/item, largest KV write {} B",
                size.secs * 1e3,
                us(per),
                size.largest
            ),
        ));
        if let Some(c) = size.counts {
            let p = c.per((n * repeats) as u64);
            rows.push(("  server counts per item".into(), p.text()));
            rows.push(("    JS writes by stream".into(), p.streams_text()));
            counts_per_item.insert(n.to_string(), p.json());
            last_counts = Some(p);
        }
    }
    drop(meter);
    mesh.stop().await;
    let ratio = per_item["10000"] / per_item["100"];
    rows.push(("per-item 10,000 / 100".into(), format!("{ratio:.2}x")));
    let mut json = json!({
        "floor": floor.json(),
        "total_ms": total_ms,
        "per_item_overhead_us": per_item,
        "kv_bytes_per_item": bytes_per_item,
        "largest_kv_write_bytes": largest,
        "per_item_ratio_10000_vs_100": round(ratio * 100.0) / 100.0,
    });
    if let Some(c) = &last_counts {
        json["server_counts"] = json!({ "per_item": counts_per_item });
        rows.push(("10,000 items, vs the floor".into(), String::new()));
        compare_with_floor(&mut json, &mut rows, c, &floor);
    }
    Ok(Report {
        name: "map",
        floor,
        json,
        rows,
    })
}
