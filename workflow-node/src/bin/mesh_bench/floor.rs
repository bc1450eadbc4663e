//! The floor NATS sets on this machine, measured in the same run as each scenario: a raw
//! request/reply to an echo responder, and a KV compare-and-swap.

use std::time::{Duration, Instant};

use anyhow::Result;
use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use serde_json::{json, Value};

use super::env::{percentile_us, Env};

/// Warm-up operations before timing.
const WARMUP: usize = 200;
/// Timed operations (bounded in time too).
const SAMPLES: usize = 2_000;
/// Most time one floor measurement may take.
const LIMIT: Duration = Duration::from_secs(20);

/// The floor's figures, in microseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Floor {
    pub(crate) rr_p50: f64,
    pub(crate) rr_p99: f64,
    pub(crate) cas_p50: f64,
    pub(crate) cas_p99: f64,
}

impl Floor {
    /// Request/reply plus one CAS, at p50: the least one workflow step can cost.
    pub(crate) fn step_p50(&self) -> f64 {
        self.rr_p50 + self.cas_p50
    }

    /// As JSON, under the names the issue fixes.
    pub(crate) fn json(&self) -> Value {
        json!({
            "request_reply_p50_us": round(self.rr_p50),
            "request_reply_p99_us": round(self.rr_p99),
            "kv_cas_p50_us": round(self.cas_p50),
            "kv_cas_p99_us": round(self.cas_p99),
        })
    }
}

/// Rounds to 0.1 µs for the report.
pub(crate) fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Measures the floor on `env`'s server; `tag` keeps subjects and buckets apart.
pub(crate) async fn measure(env: &Env, tag: &str) -> Result<Floor> {
    let responder = env.connect().await?;
    let client = env.connect().await?;
    let subject = format!("bench.floor.{tag}");
    let mut sub = responder.subscribe(subject.clone()).await?;
    let r = responder.clone();
    let echo = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                let _ = r.publish(reply, msg.payload).await;
            }
        }
    });
    responder.flush().await?;
    let payload = bytes::Bytes::from(vec![b'x'; 128]);
    let deadline = Instant::now() + LIMIT;
    let mut rr = Vec::with_capacity(SAMPLES);
    for i in 0..WARMUP + SAMPLES {
        if Instant::now() > deadline {
            break;
        }
        let t0 = Instant::now();
        client.request(subject.clone(), payload.clone()).await?;
        if i >= WARMUP {
            rr.push(t0.elapsed());
        }
    }
    echo.abort();

    let js = jetstream::new(client.clone());
    let bucket = format!("bench_floor_{tag}");
    let store = js
        .create_key_value(kv::Config {
            bucket: bucket.clone(),
            history: 1,
            ..Default::default()
        })
        .await?;
    let value = bytes::Bytes::from(vec![b'v'; 256]);
    let mut rev = store.put("k", value.clone()).await?;
    let deadline = Instant::now() + LIMIT;
    let mut cas = Vec::with_capacity(SAMPLES);
    for i in 0..WARMUP + SAMPLES {
        if Instant::now() > deadline {
            break;
        }
        let t0 = Instant::now();
        rev = store.update("k", value.clone(), rev).await?;
        if i >= WARMUP {
            cas.push(t0.elapsed());
        }
    }
    let _ = js.delete_key_value(&bucket).await;
    rr.sort();
    cas.sort();
    Ok(Floor {
        rr_p50: percentile_us(&rr, 50.0),
        rr_p99: percentile_us(&rr, 99.0),
        cas_p50: percentile_us(&cas, 50.0),
        cas_p99: percentile_us(&cas, 99.0),
    })
}
