//! A wiretap: a subscription to `>` that counts every message by kind of subject (a KV
//! write to the runs bucket, a pull request, an ack, an agent's request, ...). The server's
//! counters say how many messages a node costs; this says which. It runs apart from the
//! timed runs, since its copies of every message cost the server work too.
//!
//! It also keeps when each message came, so one node's sequence can be laid out: from an
//! agent's request to the next node's, which messages pass and when (a timeline seen
//! from outside the node, with no instrumentation inside it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use serde_json::{json, Value};

use super::floor::round;

/// Counts by kind of subject.
pub(crate) struct Wiretap {
    seen: Arc<Mutex<BTreeMap<String, u64>>>,
    /// Every message's kind and arrival, in order.
    log: Arc<Mutex<Vec<(Instant, String)>>>,
    client: async_nats::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Wiretap {
    /// Starts counting what every client of the server publishes, and what the server
    /// itself sends (JetStream's deliveries and replies), in namespace `ns`'s terms.
    pub(crate) async fn start(client: async_nats::Client, ns: &str) -> Result<Wiretap> {
        let mut sub = client.subscribe(">").await?;
        agent_sdk::Mesh::new(client.clone()).roundtrip().await?;
        let seen: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let log: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
        let (s, l, ns) = (seen.clone(), log.clone(), ns.to_owned());
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let at = Instant::now();
                let kind = kind(&msg.subject, &ns);
                if let Ok(mut l) = l.lock() {
                    l.push((at, kind.clone()));
                }
                if let Ok(mut m) = s.lock() {
                    *m.entry(kind).or_default() += 1;
                }
            }
        });
        Ok(Wiretap {
            seen,
            log,
            client,
            task,
        })
    }

    /// Counts so far (after a message of ours came back, and the count held still), per
    /// one of `units`.
    pub(crate) async fn take(&self, units: u64) -> Result<BTreeMap<String, f64>> {
        agent_sdk::Mesh::new(self.client.clone())
            .roundtrip()
            .await?;
        let total = || {
            self.seen
                .lock()
                .map(|m| m.values().sum::<u64>())
                .unwrap_or(0)
        };
        let mut last = u64::MAX;
        for _ in 0..200 {
            let now = total();
            if now == last {
                break;
            }
            last = now;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seen = self.seen.lock().map(|m| m.clone()).unwrap_or_default();
        let n = units.max(1) as f64;
        Ok(seen.into_iter().map(|(k, v)| (k, v as f64 / n)).collect())
    }
}

impl Wiretap {
    /// One node's messages, from an agent's request to the next agent's request within a
    /// run (spans holding a run's start or end are left out): the most common sequence,
    /// each message with its median offset in µs, and how many spans had that sequence
    /// out of all.
    pub(crate) fn node_timeline(&self) -> (Vec<(String, f64)>, usize, usize) {
        let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        let is_request = |k: &str| k.ends_with(".agent.request");
        let starts: Vec<usize> = (0..log.len()).filter(|&i| is_request(&log[i].1)).collect();
        let mut by_sequence: BTreeMap<Vec<String>, Vec<Vec<f64>>> = BTreeMap::new();
        let mut spans = 0;
        for w in starts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let span = &log[a..=b];
            if span.iter().any(|(_, k)| k.ends_with(".events")) {
                continue;
            }
            spans += 1;
            let t0 = span[0].0;
            let kinds = span.iter().map(|(_, k)| k.clone()).collect();
            let offsets = span
                .iter()
                .map(|(t, _)| t.saturating_duration_since(t0).as_secs_f64() * 1e6)
                .collect();
            by_sequence.entry(kinds).or_default().push(offsets);
        }
        let Some((kinds, all)) = by_sequence.into_iter().max_by_key(|(_, v)| v.len()) else {
            return (Vec::new(), 0, spans);
        };
        let timeline = kinds
            .into_iter()
            .enumerate()
            .map(|(i, k)| (k, super::env::median(all.iter().map(|o| o[i]).collect())))
            .collect();
        (timeline, all.len(), spans)
    }
}

/// A node's timeline, for the table: `+offset kind` in order.
pub(crate) fn timeline_text(t: &[(String, f64)]) -> String {
    t.iter()
        .map(|(k, us)| format!("+{us:.0} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A node's timeline as JSON: `[{"subject": kind, "offset_us": n}, ...]`.
pub(crate) fn timeline_json(t: &[(String, f64)]) -> Value {
    t.iter()
        .map(|(k, us)| json!({"subject": k, "offset_us": round(*us)}))
        .collect::<Vec<_>>()
        .into()
}

impl Drop for Wiretap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The kind of a subject: ids and keys dropped, the namespace written `{ns}`.
fn kind(subject: &str, ns: &str) -> String {
    let t: Vec<&str> = subject.split('.').collect();
    let keep = match t.as_slice() {
        // A final reply's marker (`{workflow}.{run}.final[.{hash}]`), apart from the commits.
        ["$KV", _, _, _, "final", ..] => return t[..2].join(".").replace(ns, "{ns}") + ".final",
        ["$KV", ..] => 2,
        ["$JS", "ACK", ..] => 3,
        ["$JS", "API", "DIRECT", "GET", ..] | ["$JS", "API", "CONSUMER", "MSG", "NEXT", ..] => 5,
        ["$JS", "API", ..] => 4,
        ["_INBOX", ..] => 1,
        [first, _, _, _, "request" | "response" | "status" | "cancel", ..] if *first == ns => 5,
        [first, ..] if *first == ns => 4,
        _ => 1,
    };
    t[..keep.min(t.len())].join(".").replace(ns, "{ns}")
}

/// As JSON, rounded.
pub(crate) fn json(per: &BTreeMap<String, f64>) -> Value {
    per.iter()
        .map(|(k, v)| (k.clone(), json!(round(*v * 100.0) / 100.0)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// For the table, most frequent first.
pub(crate) fn text(per: &BTreeMap<String, f64>) -> String {
    let mut v: Vec<_> = per.iter().filter(|(_, n)| **n >= 0.05).collect();
    v.sort_by(|a, b| b.1.total_cmp(a.1));
    v.iter()
        .map(|(k, n)| format!("{k} {n:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::kind;

    #[test]
    fn subjects_are_grouped_by_kind() {
        assert_eq!(kind("$KV.mbx_runs.Chain.abc", "mbx"), "$KV.{ns}_runs");
        assert_eq!(
            kind("$KV.mbx_runs.Chain.abc.final", "mbx"),
            "$KV.{ns}_runs.final"
        );
        assert_eq!(
            kind("$JS.ACK.mbx_WF_Chain.replicas.1.2.3.4.5", "mbx"),
            "$JS.ACK.{ns}_WF_Chain"
        );
        assert_eq!(
            kind("$JS.API.CONSUMER.MSG.NEXT.mbx_WF_Chain.replicas", "mbx"),
            "$JS.API.CONSUMER.MSG.NEXT"
        );
        assert_eq!(kind("_INBOX.abc.def", "mbx"), "_INBOX");
        assert_eq!(
            kind("mbx.a2a.v1.agent.response.Chain.sub1", "mbx"),
            "{ns}.a2a.v1.agent.response"
        );
    }
}
