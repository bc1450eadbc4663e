//! The floor NATS sets on this machine, measured in the same run as each scenario: a raw
//! request/reply to an echo responder, and a KV compare-and-swap; and, when the server's
//! monitoring port is known, what each costs in the server's own counters.

use std::time::{Duration, Instant};

use anyhow::Result;
use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use serde_json::{json, Value};

use super::counters::PerUnit;
use super::env::{percentile_us, Env};

/// Warm-up operations before timing.
const WARMUP: usize = 200;
/// Timed operations (bounded in time too).
const SAMPLES: usize = 2_000;
/// Most time one floor measurement may take.
const LIMIT: Duration = Duration::from_secs(20);

/// The floor's figures, in microseconds.
#[derive(Debug, Clone)]
pub(crate) struct Floor {
    pub(crate) rr_p50: f64,
    pub(crate) rr_p99: f64,
    pub(crate) cas_p50: f64,
    pub(crate) cas_p99: f64,
    /// The server's counts per request/reply, and per CAS (with monitoring).
    pub(crate) counts: Option<(PerUnit, PerUnit)>,
}

impl Floor {
    /// Request/reply plus one CAS, at p50: the least one workflow step can cost.
    pub(crate) fn step_p50(&self) -> f64 {
        self.rr_p50 + self.cas_p50
    }

    /// The server's counts for one step at the floor (a request/reply plus a CAS).
    pub(crate) fn step_counts(&self) -> Option<PerUnit> {
        self.counts.as_ref().map(|(rr, cas)| rr.plus(cas))
    }

    /// As JSON, under the names the issue fixes.
    pub(crate) fn json(&self) -> Value {
        let mut j = json!({
            "request_reply_p50_us": round(self.rr_p50),
            "request_reply_p99_us": round(self.rr_p99),
            "kv_cas_p50_us": round(self.cas_p50),
            "kv_cas_p99_us": round(self.cas_p99),
        });
        if let (Some((rr, cas)), Some(step)) = (&self.counts, self.step_counts()) {
            j["server_counts"] = json!({
                "per_request_reply": rr.json(),
                "per_kv_cas": cas.json(),
                "per_step": step.json(),
            });
        }
        j
    }
}

/// Rounds to 0.1 µs for the report.
pub(crate) fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Measures the floor on `env`'s server; `tag` keeps subjects and buckets apart.
pub(crate) async fn measure(env: &Env, tag: &str) -> Result<Floor> {
    let client = env.connect().await?;
    let subject = format!("bench.floor.{tag}");
    let echo = echo(env, &subject).await?;
    let payload = bytes::Bytes::from(vec![b'x'; 128]);
    let before = env.counters().await?;
    let deadline = Instant::now() + LIMIT;
    let (mut rr, mut ops) = (Vec::with_capacity(SAMPLES), 0);
    for i in 0..WARMUP + SAMPLES {
        if Instant::now() > deadline {
            break;
        }
        ops += 1;
        let t0 = Instant::now();
        client.request(subject.clone(), payload.clone()).await?;
        if i >= WARMUP {
            rr.push(t0.elapsed());
        }
    }
    let rr_counts = counts_since(env, before.as_ref(), ops).await?;
    echo.abort();

    let js = jetstream::new(client.clone());
    let bucket = format!("bench_floor_{tag}");
    let store = floor_bucket(&js, &bucket).await?;
    let value = bytes::Bytes::from(vec![b'v'; 256]);
    let mut rev = store.put("k", value.clone()).await?;
    let before = env.counters().await?;
    let deadline = Instant::now() + LIMIT;
    let (mut cas, mut ops) = (Vec::with_capacity(SAMPLES), 0);
    for i in 0..WARMUP + SAMPLES {
        if Instant::now() > deadline {
            break;
        }
        ops += 1;
        let t0 = Instant::now();
        rev = store.update("k", value.clone(), rev).await?;
        if i >= WARMUP {
            cas.push(t0.elapsed());
        }
    }
    let cas_counts = counts_since(env, before.as_ref(), ops).await?;
    let _ = js.delete_key_value(&bucket).await;
    rr.sort();
    cas.sort();
    Ok(Floor {
        rr_p50: percentile_us(&rr, 50.0),
        rr_p99: percentile_us(&rr, 99.0),
        cas_p50: percentile_us(&cas, 50.0),
        cas_p99: percentile_us(&cas, 99.0),
        counts: rr_counts.zip(cas_counts),
    })
}

/// A KV bucket for the floor's compare-and-swaps: one revision a key.
async fn floor_bucket(js: &jetstream::Context, bucket: &str) -> Result<kv::Store> {
    Ok(js
        .create_key_value(kv::Config {
            bucket: bucket.to_string(),
            history: 1,
            ..Default::default()
        })
        .await?)
}

/// An echo responder on `subject`, on a connection of its own, subscribed once it returns;
/// abort the task to stop it.
async fn echo(env: &Env, subject: &str) -> Result<tokio::task::JoinHandle<()>> {
    let responder = env.connect().await?;
    let mut sub = responder.subscribe(subject.to_string()).await?;
    let r = responder.clone();
    let task = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                let _ = r.publish(reply, msg.payload).await;
            }
        }
    });
    // A flush only writes the socket: a request from the other connection right after it
    // can meet "no responders". Once our own message comes back, the server has the
    // subscription.
    agent_sdk::Mesh::new(responder.clone()).roundtrip().await?;
    Ok(task)
}

/// The counts per operation since `before`, over `ops` operations.
async fn counts_since(
    env: &Env,
    before: Option<&super::counters::Counters>,
    ops: usize,
) -> Result<Option<PerUnit>> {
    match (before, env.counters().await?) {
        (Some(b), Some(now)) => Ok(Some(now.since(b).per(ops as u64))),
        _ => Ok(None),
    }
}

/// How long the throughput floor runs at each concurrency.
const RATE_TIME: Duration = Duration::from_secs(3);

/// The floor's throughput: floor steps (a request/reply to an echo responder, then a KV
/// compare-and-swap) per second with `in_flight` of them going at once, each on a key of
/// its own, over one client connection as the node has. No workflow step costs less, so
/// no scenario runs more node executions per second than this on the same machine. With
/// it, the server's CPU per floor step (`None` on a server not ours).
pub(crate) async fn steps_per_s(
    env: &Env,
    tag: &str,
    in_flight: usize,
) -> Result<(f64, Option<f64>)> {
    let client = env.connect().await?;
    let subject = format!("bench.floor.rate.{tag}");
    let echo = echo(env, &subject).await?;
    let js = jetstream::new(client.clone());
    let bucket = format!("bench_floor_rate_{tag}");
    let store = floor_bucket(&js, &bucket).await?;
    let payload = bytes::Bytes::from(vec![b'x'; 128]);
    let value = bytes::Bytes::from(vec![b'v'; 256]);
    let cpu_before = super::env::cpu_times(env).1;
    let t0 = Instant::now();
    let end = t0 + RATE_TIME;
    let loops = (0..in_flight).map(|i| {
        let (client, store, subject) = (client.clone(), store.clone(), subject.clone());
        let (payload, value) = (payload.clone(), value.clone());
        async move {
            let key = format!("k{i}");
            let mut rev = store.put(&key, value.clone()).await?;
            let mut steps = 0u64;
            while Instant::now() < end {
                client.request(subject.clone(), payload.clone()).await?;
                rev = store.update(&key, value.clone(), rev).await?;
                steps += 1;
            }
            anyhow::Ok(steps)
        }
    });
    let done = futures::future::try_join_all(loops).await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu_after = super::env::cpu_times(env).1;
    echo.abort();
    let _ = js.delete_key_value(&bucket).await;
    let steps = done?.iter().sum::<u64>();
    let server_cpu = super::env::cpu_us_per(cpu_before, cpu_after, steps);
    Ok((steps as f64 / secs, server_cpu))
}
