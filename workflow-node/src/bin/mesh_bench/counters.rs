//! The server's own counters around a measurement: messages and bytes in and out
//! (`/varz`), JetStream API requests and writes (`/jsz`: the sum of every stream's last
//! sequence, so a KV put, delete or purge and an event published into a workflow's stream
//! each count once, whichever stream or bucket they went to).
//!
//! These are the whole server's: a snapshot counts everything every client did, so a
//! scenario takes them around its own work only, with nothing else running.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::floor::round;

/// Longest wait for the server to go quiet before a snapshot.
const SETTLE_LIMIT: Duration = Duration::from_secs(3);
/// A window without a message in: the server is quiet.
const QUIET: Duration = Duration::from_millis(30);

/// Where the server's monitoring endpoint listens (`host:port`).
#[derive(Debug, Clone)]
pub(crate) struct Monitor {
    addr: String,
}

impl Monitor {
    /// `http://host:port`, or `host:port`.
    pub(crate) fn parse(url: &str) -> Result<Monitor> {
        let addr = url
            .strip_prefix("http://")
            .unwrap_or(url)
            .trim_end_matches('/');
        if addr.is_empty() || !addr.contains(':') || addr.contains('/') {
            bail!("--monitor-url {url:?} is not http://HOST:PORT (the server's monitoring port)");
        }
        Ok(Monitor {
            addr: addr.to_owned(),
        })
    }

    /// Our own server's monitoring port on loopback.
    pub(crate) fn local(port: u16) -> Monitor {
        Monitor {
            addr: format!("127.0.0.1:{port}"),
        }
    }

    /// The counters now.
    pub(crate) async fn snapshot(&self) -> Result<Counters> {
        let varz = self.get("/varz").await?;
        let jsz = self.get("/jsz?accounts=true&streams=true").await?;
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
        let mut streams = BTreeMap::new();
        for account in jsz["account_details"].as_array().into_iter().flatten() {
            for s in account["stream_detail"].as_array().into_iter().flatten() {
                let name = format!(
                    "{}/{}",
                    account["name"].as_str().unwrap_or(""),
                    s["name"].as_str().unwrap_or("")
                );
                streams.insert(name, s["state"]["last_seq"].as_u64().unwrap_or(0));
            }
        }
        Ok(Counters {
            in_msgs: n(&varz, "in_msgs"),
            in_bytes: n(&varz, "in_bytes"),
            out_msgs: n(&varz, "out_msgs"),
            out_bytes: n(&varz, "out_bytes"),
            js_api: jsz["api"]["total"].as_u64().unwrap_or(0),
            streams,
        })
    }

    /// The counters once no message has come in for [`QUIET`] (at most [`SETTLE_LIMIT`]
    /// of waiting): what a run left to do after its reply (an ack, an outbox entry going)
    /// is counted with it, not with what comes next.
    pub(crate) async fn settled(&self) -> Result<Counters> {
        let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
        let mut last = self.snapshot().await?;
        loop {
            tokio::time::sleep(QUIET).await;
            let now = self.snapshot().await?;
            if now.in_msgs == last.in_msgs || tokio::time::Instant::now() >= deadline {
                return Ok(now);
            }
            last = now;
        }
    }

    /// `GET path`: the JSON body of a 200 answer.
    async fn get(&self, path: &str) -> Result<Value> {
        let what = || format!("GET http://{}{path}", self.addr);
        let mut stream = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(&self.addr),
        )
        .await
        .with_context(what)?
        .with_context(what)?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr);
        stream
            .write_all(request.as_bytes())
            .await
            .with_context(what)?;
        let mut response = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
            .await
            .with_context(what)?
            .with_context(what)?;
        let text = String::from_utf8_lossy(&response);
        match text.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
                serde_json::from_str(body).with_context(what)
            }
            _ => bail!("{} answered: {}", what(), text.lines().next().unwrap_or("")),
        }
    }
}

/// The server's counters at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    in_msgs: u64,
    in_bytes: u64,
    out_msgs: u64,
    out_bytes: u64,
    js_api: u64,
    /// Each stream's last sequence, by account and name.
    streams: BTreeMap<String, u64>,
}

impl Counters {
    /// What happened between `before` and `self`.
    pub(crate) fn since(&self, before: &Counters) -> Counts {
        let mut by_stream = BTreeMap::new();
        for (name, seq) in &self.streams {
            let n = seq.saturating_sub(before.streams.get(name).copied().unwrap_or(0));
            if n > 0 {
                let short = name.rsplit_once('/').map_or(name.as_str(), |(_, s)| s);
                by_stream.insert(short.to_owned(), n);
            }
        }
        let js_writes = by_stream.values().sum();
        Counts {
            by_stream,
            js_writes,
            in_msgs: self.in_msgs.saturating_sub(before.in_msgs),
            in_bytes: self.in_bytes.saturating_sub(before.in_bytes),
            out_msgs: self.out_msgs.saturating_sub(before.out_msgs),
            out_bytes: self.out_bytes.saturating_sub(before.out_bytes),
            js_api: self.js_api.saturating_sub(before.js_api),
        }
    }

    /// JetStream writes to the streams named (`$KV` buckets are `KV_{bucket}`) since
    /// `before`.
    pub(crate) fn writes_to(&self, before: &Counters, streams: &[String]) -> u64 {
        self.streams
            .iter()
            .filter(|(name, _)| {
                streams
                    .iter()
                    .any(|s| name.rsplit_once('/').is_some_and(|(_, n)| n == s))
            })
            .map(|(name, seq)| seq.saturating_sub(before.streams.get(name).copied().unwrap_or(0)))
            .sum()
    }
}

/// Counts over an interval, or per unit of work (`per`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    /// JetStream writes by stream (KV buckets are `KV_{bucket}`).
    pub(crate) by_stream: BTreeMap<String, u64>,
    /// Messages stored in any stream (KV writes included).
    pub(crate) js_writes: u64,
    /// Messages the server received from clients.
    pub(crate) in_msgs: u64,
    /// Bytes (headers and payloads) of those.
    pub(crate) in_bytes: u64,
    /// Messages the server delivered to clients.
    pub(crate) out_msgs: u64,
    /// Bytes of those.
    pub(crate) out_bytes: u64,
    /// JetStream API requests (stream and consumer management, infos; not publishes,
    /// direct gets, pulls or acks).
    pub(crate) js_api: u64,
}

impl Counts {
    /// With the namespace `ns` in stream names written `{ns}`, so that scenarios and
    /// runs compare.
    pub(crate) fn named(mut self, ns: &str) -> Counts {
        self.by_stream = std::mem::take(&mut self.by_stream)
            .into_iter()
            .map(|(k, v)| (k.replace(ns, "{ns}"), v))
            .collect();
        self
    }

    /// Adds `o`'s counts to these.
    pub(crate) fn add(&mut self, o: &Counts) {
        for (k, v) in &o.by_stream {
            *self.by_stream.entry(k.clone()).or_default() += v;
        }
        self.js_writes += o.js_writes;
        self.in_msgs += o.in_msgs;
        self.in_bytes += o.in_bytes;
        self.out_msgs += o.out_msgs;
        self.out_bytes += o.out_bytes;
        self.js_api += o.js_api;
    }

    /// Minus what an observer of ours received (`msgs`, `bytes`), which the server counts
    /// as delivered but the system measured did not cause.
    pub(crate) fn without_delivered(self, msgs: u64, bytes: u64) -> Counts {
        Counts {
            out_msgs: self.out_msgs.saturating_sub(msgs),
            out_bytes: self.out_bytes.saturating_sub(bytes),
            ..self
        }
    }

    /// Per one of `n` units of work.
    pub(crate) fn per(&self, n: u64) -> PerUnit {
        let n = n.max(1) as f64;
        PerUnit {
            by_stream: self
                .by_stream
                .iter()
                .map(|(k, v)| (k.clone(), *v as f64 / n))
                .collect(),
            js_writes: self.js_writes as f64 / n,
            in_msgs: self.in_msgs as f64 / n,
            in_bytes: self.in_bytes as f64 / n,
            out_msgs: self.out_msgs as f64 / n,
            out_bytes: self.out_bytes as f64 / n,
            js_api: self.js_api as f64 / n,
        }
    }
}

/// [`Counts`] per unit of work (a node execution, a map item, a floor operation).
#[derive(Debug, Clone, Default)]
pub(crate) struct PerUnit {
    pub(crate) by_stream: BTreeMap<String, f64>,
    pub(crate) js_writes: f64,
    pub(crate) in_msgs: f64,
    pub(crate) in_bytes: f64,
    pub(crate) out_msgs: f64,
    pub(crate) out_bytes: f64,
    pub(crate) js_api: f64,
}

impl PerUnit {
    /// The sum of two (the floor's request/reply and CAS make one step).
    pub(crate) fn plus(&self, o: &PerUnit) -> PerUnit {
        let mut by_stream = self.by_stream.clone();
        for (k, v) in &o.by_stream {
            *by_stream.entry(k.clone()).or_default() += v;
        }
        PerUnit {
            by_stream,
            js_writes: self.js_writes + o.js_writes,
            in_msgs: self.in_msgs + o.in_msgs,
            in_bytes: self.in_bytes + o.in_bytes,
            out_msgs: self.out_msgs + o.out_msgs,
            out_bytes: self.out_bytes + o.out_bytes,
            js_api: self.js_api + o.js_api,
        }
    }

    /// As JSON.
    pub(crate) fn json(&self) -> Value {
        json!({
            "js_writes": round(self.js_writes),
            "msgs_in": round(self.in_msgs),
            "bytes_in": round(self.in_bytes),
            "msgs_out": round(self.out_msgs),
            "bytes_out": round(self.out_bytes),
            "js_api_requests": round(self.js_api),
            "js_writes_by_stream": self
                .by_stream
                .iter()
                .map(|(k, v)| (k.clone(), json!(round(*v))))
                .collect::<serde_json::Map<_, _>>(),
        })
    }

    /// JetStream writes by stream, for the table.
    pub(crate) fn streams_text(&self) -> String {
        self.by_stream
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One line for the table.
    pub(crate) fn text(&self) -> String {
        format!(
            "{:.1} JS writes, {:.1} msgs in ({}), {:.1} msgs out ({}), {:.2} JS API",
            self.js_writes,
            self.in_msgs,
            bytes(self.in_bytes),
            self.out_msgs,
            bytes(self.out_bytes),
            self.js_api
        )
    }
}

/// Bytes, readable.
fn bytes(b: f64) -> String {
    if b >= 10_000.0 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_summed_over_streams_new_ones_included() {
        let before = Counters {
            in_msgs: 10,
            streams: [("$G/KV_a".to_string(), 5), ("$G/S".to_string(), 7)].into(),
            ..Counters::default()
        };
        let after = Counters {
            in_msgs: 25,
            streams: [
                ("$G/KV_a".to_string(), 9),
                ("$G/S".to_string(), 7),
                ("$G/KV_b".to_string(), 3),
            ]
            .into(),
            ..Counters::default()
        };
        let c = after.since(&before);
        assert_eq!((c.js_writes, c.in_msgs), (7, 15));
        assert_eq!(after.writes_to(&before, &["KV_a".into(), "KV_b".into()]), 7);
        assert_eq!(c.per(5).in_msgs, 3.0);
        assert!(Monitor::parse("http://127.0.0.1:8222/").is_ok());
        assert!(Monitor::parse("127.0.0.1").is_err());
    }
}
