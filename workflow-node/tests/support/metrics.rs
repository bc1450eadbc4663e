//! Shared by the metrics tests: a scrape of `/metrics` over real HTTP/1.1
//! (`test_harness::http`), and the Prometheus text it answers, parsed into
//! samples that tests sum by name and labels; an OTLP/HTTP receiver that decodes the
//! protobuf export requests it is sent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

/// A scrape: its content type, its text and the samples in it.
#[derive(Debug)]
pub(crate) struct Scrape {
    pub(crate) content_type: String,
    pub(crate) text: String,
    pub(crate) samples: Vec<Sample>,
}

impl Scrape {
    /// The sum of the samples of `name` whose labels include `labels`.
    pub(crate) fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// Whether some sample of `name` has `labels`.
    pub(crate) fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.matching(name, labels).next().is_some()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

/// `GET /metrics` at `addr`; fails the test on anything but a 200.
pub(crate) async fn scrape(addr: SocketAddr) -> Scrape {
    let answer = test_harness::http::get(addr, "/metrics").await;
    let (status, body) = (answer.status, &answer.body);
    assert_eq!(status, 200, "GET /metrics answered {status}: {body}");
    Scrape {
        content_type: answer
            .header("content-type")
            .unwrap_or_default()
            .to_string(),
        samples: parse(body),
        text: answer.body.clone(),
    }
}

/// Scrapes until `done` holds for a scrape (returned), for at most 30 s.
pub(crate) async fn scrape_until(addr: SocketAddr, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = scrape(addr).await;
        if done(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the metrics never got there; the last scrape:\n{}",
            s.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The samples of a text exposition (comments skipped); fails on a malformed line.
pub(crate) fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| parse_line(line).unwrap_or_else(|| panic!("a malformed sample: {line}")))
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let mut labels = BTreeMap::new();
    let mut rest = rest;
    if let Some(mut inner) = rest.strip_prefix('{') {
        loop {
            if let Some(after) = inner.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = inner.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.insert(key.to_string(), value);
            inner = after[end + 1..].trim_start_matches(',');
        }
    }
    let value = rest.trim();
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        }
    })
}

/// The last value of the cumulative sum `name` for `workflow`, with the service name of
/// the resource it came from.
pub(crate) fn last_sum(
    received: &[ExportMetricsServiceRequest],
    name: &str,
    workflow: &str,
) -> Option<(i64, String)> {
    let mut last = None;
    for request in received {
        for rm in &request.resource_metrics {
            let service = rm
                .resource
                .as_ref()
                .and_then(|r| string_attr(&r.attributes, "service.name"))
                .unwrap_or_default();
            let metrics = rm.scope_metrics.iter().flat_map(|s| &s.metrics);
            for m in metrics.filter(|m| m.name == name) {
                let Some(metric::Data::Sum(sum)) = &m.data else {
                    continue;
                };
                for p in &sum.data_points {
                    if string_attr(&p.attributes, "workflow").as_deref() != Some(workflow) {
                        continue;
                    }
                    if let Some(number_data_point::Value::AsInt(v)) = p.value {
                        last = Some((v, service.clone()));
                    }
                }
            }
        }
    }
    last
}
