//! A real OTLP receiver for tests: over HTTP, `POST /v1/traces` and `POST /v1/metrics`
//! with protobuf bodies (`application/x-protobuf`, as `opentelemetry-otlp`'s
//! `http/protobuf` sends them), and over gRPC the trace and metrics services on a port
//! of their own ([`Receiver::grpc_endpoint`]); decoded with `opentelemetry-proto` and
//! kept.
//!
//! ```no_run
//! # async fn f() {
//! let receiver = test_harness::otlp::Receiver::start().await;
//! // OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint() for the processes under test ...
//! let spans = receiver
//!     .wait_for_spans(std::time::Duration::from_secs(10), |spans| {
//!         spans.iter().find(|s| s.name == "workflow.run").cloned()
//!     })
//!     .await
//!     .expect("a run span");
//! # }
//! ```
//!
//! Waiting is bounded and wakes on each export (no polling sleeps). [`Trace`] checks a
//! trace's tree: parents present, orphans, and a printable tree.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message as _;
use tokio::sync::watch;

/// One received span, flattened with its resource's service name.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; `None` for a root span.
    pub parent_span_id: Option<String>,
    /// The span's name.
    pub name: String,
    /// The OTLP span kind (1 internal, 2 server, 3 client, 4 producer, 5 consumer).
    pub kind: i32,
    /// Start, in ns since the epoch.
    pub start_unix_nano: u64,
    /// End, in ns since the epoch.
    pub end_unix_nano: u64,
    /// Attributes, values as text (`"3"`, `"true"`, `"text"`).
    pub attributes: BTreeMap<String, String>,
    /// The status code (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// The status message.
    pub status_message: String,
    /// `service.name` of the exporting resource.
    pub service_name: String,
    /// The exporting resource's attributes.
    pub resource: BTreeMap<String, String>,
}

impl Span {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    metrics: Vec<ExportMetricsServiceRequest>,
    /// Export requests received, per signal path.
    requests: BTreeMap<String, usize>,
    /// `service.instance.id`s whose exports are swallowed.
    swallowed: BTreeSet<String>,
    /// Export requests swallowed.
    swallowed_requests: usize,
}

struct Shared {
    received: Mutex<Received>,
    /// Bumped on every export.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn received(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A running receiver on ephemeral loopback ports (HTTP, gRPC); stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    grpc_addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
    grpc: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver on `127.0.0.1:0` (within a tokio runtime).
    pub async fn start() -> Receiver {
        Receiver::start_on("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("starting the OTLP receiver: {e}"))
    }

    /// Starts a receiver on `addr` (HTTP; gRPC on an ephemeral port of the same host).
    pub async fn start_on(addr: &str) -> std::io::Result<Receiver> {
        let (changed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            received: Mutex::new(Received::default()),
            changed,
        });
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let grpc_listener = tokio::net::TcpListener::bind((addr.ip(), 0)).await?;
        let grpc_addr = grpc_listener.local_addr()?;
        let services = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Grpc(shared.clone())))
            .add_service(MetricsServiceServer::new(Grpc(shared.clone())));
        let grpc = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(grpc_listener);
            let _ = services.serve_with_incoming(incoming).await;
        });
        Ok(Receiver {
            addr,
            grpc_addr,
            shared,
            server,
            grpc,
        })
    }

    /// `http://127.0.0.1:PORT`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter
    /// appends `/v1/traces` and `/v1/metrics`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` of the gRPC services: the value of
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.shared.received().spans.clone()
    }

    /// Every metrics export request received so far.
    pub fn metrics(&self) -> Vec<ExportMetricsServiceRequest> {
        self.shared.received().metrics.clone()
    }

    /// From now on, trace exports of the resource with `service.instance.id` `instance`
    /// are neither kept nor answered: the exporter waits (until its timeout), as if they
    /// were lost with a process that died before they went out.
    pub fn swallow(&self, instance: &str) {
        self.shared.received().swallowed.insert(instance.to_owned());
    }

    /// How many trace export requests were swallowed.
    pub fn swallowed(&self) -> usize {
        self.shared.received().swallowed_requests
    }

    /// Waits (at most `timeout`) until an export request was swallowed; `false` if none
    /// came.
    pub async fn wait_for_swallowed(&self, timeout: Duration) -> bool {
        self.wait(timeout, |r| (r.swallowed_requests > 0).then_some(()))
            .await
            .is_ok()
    }

    /// How many export requests came to `path` (`/v1/traces`, `/v1/metrics`, and for gRPC
    /// `grpc:traces`, `grpc:metrics`).
    pub fn requests(&self, path: &str) -> usize {
        self.shared
            .received()
            .requests
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Waits (at most `timeout`) until `check` finds what it wants in the spans received;
    /// on timeout, the spans received, for the failure report. (`check` runs under the
    /// receiver's lock: it must not call the receiver.)
    pub async fn wait_for_spans<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&[Span]) -> Option<T>,
    ) -> Result<T, Vec<Span>> {
        self.wait(timeout, |r| check(&r.spans))
            .await
            .map_err(|_| self.spans())
    }

    /// Waits (at most `timeout`) until `check` finds what it wants in the metrics export
    /// requests received; `Err(())` on timeout.
    pub async fn wait_for_metrics<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&[ExportMetricsServiceRequest]) -> Option<T>,
    ) -> Result<T, ()> {
        self.wait(timeout, |r| check(&r.metrics)).await
    }

    async fn wait<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&Received) -> Option<T>,
    ) -> Result<T, ()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed = self.shared.changed.subscribe();
        loop {
            changed.borrow_and_update();
            if let Some(found) = check(&self.shared.received()) {
                return Ok(found);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(()),
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
        self.grpc.abort();
    }
}

/// The gRPC services.
struct Grpc(Arc<Shared>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep_spans(&self.0, request.into_inner(), "grpc:traces").await;
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        keep_metrics(&self.0, request.into_inner(), "grpc:metrics");
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

fn protobuf(headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/x-protobuf") {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content type '{ct}': only application/x-protobuf"),
        ));
    }
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        if enc.as_bytes() != b"identity" {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "compressed bodies are not supported".into(),
            ));
        }
    }
    Ok(())
}

fn ok() -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        Vec::new(),
    )
}

async fn traces(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl axum::response::IntoResponse, (StatusCode, String)> {
    protobuf(&headers)?;
    let request = ExportTraceServiceRequest::decode(body)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("not a trace export: {e}")))?;
    keep_spans(&shared, request, "/v1/traces").await;
    Ok(ok())
}

async fn metrics(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl axum::response::IntoResponse, (StatusCode, String)> {
    protobuf(&headers)?;
    let request = ExportMetricsServiceRequest::decode(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("not a metrics export: {e}"),
        )
    })?;
    keep_metrics(&shared, request, "/v1/metrics");
    Ok(ok())
}

/// Keeps the spans of a trace export (or, from a swallowed instance, never returns).
async fn keep_spans(shared: &Shared, request: ExportTraceServiceRequest, path: &str) {
    let spans = flatten(request);
    let swallow = {
        let mut r = shared.received();
        let swallow = spans.iter().any(|s| {
            s.resource
                .get("service.instance.id")
                .is_some_and(|i| r.swallowed.contains(i))
        });
        r.swallowed_requests += usize::from(swallow);
        swallow
    };
    if swallow {
        shared.bump();
        std::future::pending::<()>().await;
    }
    {
        let mut r = shared.received();
        r.spans.extend(spans);
        *r.requests.entry(path.into()).or_default() += 1;
    }
    shared.bump();
}

fn keep_metrics(shared: &Shared, request: ExportMetricsServiceRequest, path: &str) {
    {
        let mut r = shared.received();
        r.metrics.push(request);
        *r.requests.entry(path.into()).or_default() += 1;
    }
    shared.bump();
}

/// The spans of an export request, each with its resource.
pub fn flatten(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let resource = rs
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service_name = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                let status = s.status.unwrap_or_default();
                out.push(Span {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: (!s.parent_span_id.is_empty()).then(|| hex(&s.parent_span_id)),
                    name: s.name,
                    kind: s.kind,
                    start_unix_nano: s.start_time_unix_nano,
                    end_unix_nano: s.end_time_unix_nano,
                    attributes: attributes(&s.attributes),
                    status_code: status.code,
                    status_message: status.message,
                    service_name: service_name.clone(),
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Attribute values as text.
pub fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(text).collect();
            format!("[{}]", items.join(", "))
        }
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The spans of one trace, for checks on its tree.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Its spans (the first copy of each span id; an exporter may send one twice).
    pub spans: Vec<Span>,
}

impl Trace {
    /// The spans of `trace_id` among `spans`.
    pub fn of(spans: &[Span], trace_id: &str) -> Trace {
        let mut seen = BTreeSet::new();
        let spans = spans
            .iter()
            .filter(|s| s.trace_id == trace_id && seen.insert(s.span_id.clone()))
            .cloned()
            .collect();
        Trace { spans }
    }

    /// A span by id.
    pub fn span(&self, span_id: &str) -> Option<&Span> {
        self.spans.iter().find(|s| s.span_id == span_id)
    }

    /// Spans named `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Span> + 'a {
        self.spans.iter().filter(move |s| s.name == name)
    }

    /// The children of `span_id`.
    pub fn children<'a>(&'a self, span_id: &'a str) -> impl Iterator<Item = &'a Span> + 'a {
        self.spans
            .iter()
            .filter(move |s| s.parent_span_id.as_deref() == Some(span_id))
    }

    /// The parent of `span`, when it is in the trace.
    pub fn parent(&self, span: &Span) -> Option<&Span> {
        span.parent_span_id.as_deref().and_then(|p| self.span(p))
    }

    /// Spans whose parent is not in the trace (roots excluded).
    pub fn orphans(&self) -> Vec<&Span> {
        self.spans
            .iter()
            .filter(|s| {
                s.parent_span_id
                    .as_deref()
                    .is_some_and(|p| self.span(p).is_none())
            })
            .collect()
    }

    /// Spans without a parent.
    pub fn roots(&self) -> Vec<&Span> {
        self.spans
            .iter()
            .filter(|s| s.parent_span_id.is_none())
            .collect()
    }

    /// The names from `span` up to its root: `[span, parent, ..., root]`.
    pub fn path(&self, span: &Span) -> Vec<String> {
        let mut names = vec![span.name.clone()];
        let mut at = span;
        while let Some(p) = self.parent(at) {
            names.push(p.name.clone());
            at = p;
            if names.len() > 64 {
                break; // a cycle: ids are broken
            }
        }
        names
    }

    /// The tree as indented text, children by start time, each line with the span's
    /// service and a few attributes (orphans are listed after the roots' trees).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut starts: Vec<&Span> = self.roots();
        starts.extend(self.orphans());
        starts.sort_by_key(|s| s.start_unix_nano);
        for s in starts {
            self.render_from(s, 0, &mut out);
        }
        out
    }

    fn render_from(&self, span: &Span, depth: usize, out: &mut String) {
        let keys = [
            "workflow.name",
            "node.id",
            "map.index",
            "loop.iteration",
            "agent.name",
            "attempt",
            "outcome",
            "workflow.status",
            "node.status",
            "error.kind",
        ];
        let attrs: Vec<String> = keys
            .iter()
            .filter_map(|k| span.attr(k).map(|v| format!("{k}={v}")))
            .collect();
        let ms = span.end_unix_nano.saturating_sub(span.start_unix_nano) / 1_000_000;
        let _ = writeln!(
            out,
            "{}{} [{}] {} {ms} ms{}",
            "  ".repeat(depth),
            span.name,
            span.service_name,
            attrs.join(" "),
            if span.status_code == 2 { " ERROR" } else { "" }
        );
        let mut children: Vec<&Span> = self.children(&span.span_id).collect();
        children.sort_by_key(|s| s.start_unix_nano);
        for c in children {
            self.render_from(c, depth + 1, out);
        }
    }
}
