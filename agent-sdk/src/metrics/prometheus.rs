//! The Prometheus text exposition format (version 0.0.4) of what the OpenTelemetry SDK
//! collected: what `/metrics` answers (workflow-node's and the agents process's). The names follow the OpenTelemetry-to-Prometheus
//! compatibility rules: characters outside `[a-zA-Z0-9_:]` become `_`, the unit is a
//! suffix (`s` gives `_seconds`; annotations such as `{run}` give none), and a monotonic
//! sum is a counter ending in `_total`. A non-monotonic sum (an up-down counter) is a
//! gauge; a histogram gives `_bucket{le=...}` (cumulative, ending with `+Inf`), `_sum` and
//! `_count`. Exponential histograms have no text form and are left out (none is recorded).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};

/// The media type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One metric family: its help, type, and the sample lines of each series.
struct Family {
    help: String,
    kind: &'static str,
    /// Per series (data point), its labels as written and its lines in order (a
    /// histogram's buckets by increasing `le`, then `_sum` and `_count`).
    series: Vec<(String, Vec<String>)>,
}

/// Renders every metric of `metrics`: families sorted by name, series by their labels.
pub fn render(metrics: &ResourceMetrics) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for scope in metrics.scope_metrics() {
        for metric in scope.metrics() {
            match metric.data() {
                AggregatedMetrics::F64(data) => add(&mut families, metric, data),
                AggregatedMetrics::U64(data) => add(&mut families, metric, data),
                AggregatedMetrics::I64(data) => add(&mut families, metric, data),
            }
        }
    }
    let mut out = String::new();
    for (name, mut family) in families {
        family.series.sort_by(|a, b| a.0.cmp(&b.0));
        if !family.help.is_empty() {
            let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help));
        }
        let _ = writeln!(out, "# TYPE {name} {}", family.kind);
        for line in family.series.iter().flat_map(|(_, lines)| lines) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A sample value as the text format writes it.
trait Number: Copy {
    fn text(self) -> String;
}

impl Number for u64 {
    fn text(self) -> String {
        self.to_string()
    }
}

impl Number for i64 {
    fn text(self) -> String {
        self.to_string()
    }
}

impl Number for f64 {
    fn text(self) -> String {
        float(self)
    }
}

/// Adds `metric`'s series to its family; a second metric of one name and another type
/// (two instrumentation scopes disagreeing) is left out rather than mixed in.
fn add<T: Number>(families: &mut BTreeMap<String, Family>, metric: &Metric, data: &MetricData<T>) {
    let base = base_name(metric.name(), metric.unit());
    let (name, kind, series) = match data {
        MetricData::Gauge(g) => {
            let series: Vec<_> = g
                .data_points()
                .map(|p| single(&base, labels(p.attributes()), p.value().text()))
                .collect();
            (base, "gauge", series)
        }
        MetricData::Sum(s) => {
            let (name, kind) = if s.is_monotonic() {
                (with_suffix(&base, "_total"), "counter")
            } else {
                (base, "gauge")
            };
            let series = s
                .data_points()
                .map(|p| single(&name, labels(p.attributes()), p.value().text()))
                .collect();
            (name, kind, series)
        }
        MetricData::Histogram(h) => {
            let series = h
                .data_points()
                .map(|p| {
                    let labels = labels(p.attributes());
                    let bucket = format!("{base}_bucket");
                    let mut lines = Vec::new();
                    let mut cumulative = 0;
                    for (bound, count) in p.bounds().zip(p.bucket_counts()) {
                        cumulative += count;
                        let le = ("le".to_string(), float(bound));
                        lines.push(sample(&bucket, &labels, Some(le), cumulative.to_string()));
                    }
                    let le = ("le".to_string(), "+Inf".to_string());
                    lines.push(sample(&bucket, &labels, Some(le), p.count().to_string()));
                    let sum = format!("{base}_sum");
                    lines.push(sample(&sum, &labels, None, p.sum().text()));
                    let count = format!("{base}_count");
                    lines.push(sample(&count, &labels, None, p.count().to_string()));
                    (key(&labels), lines)
                })
                .collect();
            (base, "histogram", series)
        }
        MetricData::ExponentialHistogram(_) => return,
    };
    let family = families.entry(name).or_insert_with(|| Family {
        help: metric.description().to_string(),
        kind,
        series: Vec::new(),
    });
    if family.kind == kind {
        family.series.extend(series);
    }
}

/// A series of one sample.
fn single(name: &str, labels: Vec<(String, String)>, value: String) -> (String, Vec<String>) {
    (key(&labels), vec![sample(name, &labels, None, value)])
}

/// A data point's labels, valid and escaped, sorted by name: a series always reads the
/// same.
fn labels<'a>(attributes: impl Iterator<Item = &'a KeyValue>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = attributes
        .map(|kv| {
            (
                label_name(kv.key.as_str()),
                escape_value(&kv.value.as_str()),
            )
        })
        .collect();
    pairs.sort();
    pairs
}

/// What series are sorted by: their labels as written.
fn key(labels: &[(String, String)]) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    pairs.join(",")
}

/// One sample line (without its newline): `name{labels,le} value`.
fn sample(
    name: &str,
    labels: &[(String, String)],
    le: Option<(String, String)>,
    value: String,
) -> String {
    let mut all = key(labels);
    if let Some((k, v)) = le {
        if !all.is_empty() {
            all.push(',');
        }
        all.push_str(&format!("{k}=\"{v}\""));
    }
    if all.is_empty() {
        format!("{name} {value}")
    } else {
        format!("{name}{{{all}}} {value}")
    }
}

/// The family name of an instrument: its name made valid, then its unit as a suffix.
fn base_name(name: &str, unit: &str) -> String {
    let name = metric_name(name);
    match unit_suffix(unit) {
        Some(suffix) => with_suffix(&name, &format!("_{suffix}")),
        None => name,
    }
}

/// `name` ending in `suffix` (added unless it is there already).
fn with_suffix(name: &str, suffix: &str) -> String {
    if name.ends_with(suffix) {
        name.to_string()
    } else {
        format!("{name}{suffix}")
    }
}

/// The word a unit adds to the name; `None` for no unit or an annotation (`{run}`).
fn unit_suffix(unit: &str) -> Option<String> {
    let word = match unit {
        "" | "1" => return None,
        u if u.starts_with('{') && u.ends_with('}') => return None,
        "s" => "seconds",
        "ms" => "milliseconds",
        "By" => "bytes",
        other => return Some(metric_name(other)).filter(|s| !s.is_empty()),
    };
    Some(word.to_string())
}

/// A metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`, runs of other characters one `_`.
fn metric_name(name: &str) -> String {
    sanitize(name, |c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// A label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn label_name(name: &str) -> String {
    sanitize(name, |c| c.is_ascii_alphanumeric() || c == '_')
}

fn sanitize(name: &str, valid: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        if valid(c) {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// A label value between double quotes: `\`, `"` and newlines escaped.
fn escape_value(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// A help text: `\` and newlines escaped.
fn escape_help(help: &str) -> String {
    help.replace('\\', r"\\").replace('\n', r"\n")
}

/// A float as Prometheus reads it: `NaN`, `+Inf`, `-Inf`, or the shortest decimal.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::{Meter, MeterProvider as _};
    use opentelemetry_sdk::metrics::{ManualReader, SdkMeterProvider};
    use std::sync::Arc;

    /// Records with a real SDK, collects with a manual reader as `/metrics` does, renders.
    fn rendered(record: impl FnOnce(&Meter)) -> String {
        let reader = Arc::new(ManualReader::builder().build());
        let provider = SdkMeterProvider::builder()
            .with_reader(crate::metrics::SharedReader(reader.clone()))
            .build();
        record(&provider.meter("test"));
        let mut rm = ResourceMetrics::default();
        opentelemetry_sdk::metrics::reader::MetricReader::collect(&*reader, &mut rm)
            .expect("collect");
        render(&rm)
    }

    #[test]
    fn a_counter_is_a_total_per_label_set() {
        let text = rendered(|m| {
            let c = m
                .u64_counter("workflow.runs.started")
                .with_description("Runs started.")
                .with_unit("{run}")
                .build();
            c.add(2, &[KeyValue::new("workflow", "B")]);
            c.add(1, &[KeyValue::new("workflow", "A")]);
            c.add(1, &[KeyValue::new("workflow", "B")]);
        });
        assert_eq!(
            text,
            "# HELP workflow_runs_started_total Runs started.\n\
             # TYPE workflow_runs_started_total counter\n\
             workflow_runs_started_total{workflow=\"A\"} 1\n\
             workflow_runs_started_total{workflow=\"B\"} 3\n"
        );
    }

    #[test]
    fn an_up_down_counter_and_an_observable_gauge_are_gauges() {
        let text = rendered(|m| {
            let c = m.i64_up_down_counter("runs.in_flight").build();
            c.add(1, &[]);
            c.add(-3, &[]);
            m.u64_observable_gauge("events.pending")
                .with_callback(|o| o.observe(7, &[KeyValue::new("workflow", "W")]))
                .build();
        });
        assert_eq!(
            text,
            "# TYPE events_pending gauge\n\
             events_pending{workflow=\"W\"} 7\n\
             # TYPE runs_in_flight gauge\n\
             runs_in_flight -2\n"
        );
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_a_sum_and_a_count() {
        let text = rendered(|m| {
            let h = m
                .f64_histogram("workflow.run.duration")
                .with_unit("s")
                .with_boundaries(vec![0.1, 1.0])
                .build();
            let attrs = [KeyValue::new("status", "success")];
            for v in [0.05, 0.5, 0.75, 5.0] {
                h.record(v, &attrs);
            }
            h.record(20.0, &[KeyValue::new("status", "failure")]);
        });
        // Buckets in increasing `le`, then the sum and the count, one series after another.
        assert_eq!(
            text,
            "# TYPE workflow_run_duration_seconds histogram\n\
             workflow_run_duration_seconds_bucket{status=\"failure\",le=\"0.1\"} 0\n\
             workflow_run_duration_seconds_bucket{status=\"failure\",le=\"1\"} 0\n\
             workflow_run_duration_seconds_bucket{status=\"failure\",le=\"+Inf\"} 1\n\
             workflow_run_duration_seconds_sum{status=\"failure\"} 20\n\
             workflow_run_duration_seconds_count{status=\"failure\"} 1\n\
             workflow_run_duration_seconds_bucket{status=\"success\",le=\"0.1\"} 1\n\
             workflow_run_duration_seconds_bucket{status=\"success\",le=\"1\"} 3\n\
             workflow_run_duration_seconds_bucket{status=\"success\",le=\"+Inf\"} 4\n\
             workflow_run_duration_seconds_sum{status=\"success\"} 6.3\n\
             workflow_run_duration_seconds_count{status=\"success\"} 4\n"
        );
    }

    #[test]
    fn labels_are_sorted_values_and_help_escaped_and_names_made_valid() {
        let text = rendered(|m| {
            let c = m
                .u64_counter("odd-name./x")
                .with_description("line one\nback\\slash")
                .with_unit("By")
                .build();
            let labels = [
                KeyValue::new("z", "last"),
                KeyValue::new("a.b", "q\"uo\\te\nnl"),
            ];
            c.add(1, &labels);
        });
        assert_eq!(
            text,
            "# HELP odd_name_x_bytes_total line one\\nback\\\\slash\n\
             # TYPE odd_name_x_bytes_total counter\n\
             odd_name_x_bytes_total{a_b=\"q\\\"uo\\\\te\\nnl\",z=\"last\"} 1\n"
        );
    }

    #[test]
    fn floats_and_units_are_written_as_prometheus_reads_them() {
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(0.25), "0.25");
        assert_eq!(float(10.0), "10");
        assert_eq!(base_name("call.duration", "s"), "call_duration_seconds");
        assert_eq!(base_name("x_seconds", "s"), "x_seconds");
        assert_eq!(base_name("x", "{call}"), "x");
        assert_eq!(base_name("x", "1"), "x");
        assert_eq!(with_suffix("a_total", "_total"), "a_total");
        assert_eq!(
            metric_name("9lives"),
            "_9lives",
            "a name starts with no digit"
        );
    }
}
