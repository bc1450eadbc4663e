//! Logs and OpenTelemetry traces, set up in one call: [`init`] (or [`Telemetry::builder`]).
//!
//! It installs the `tracing` subscriber: a `fmt` layer on stderr filtered by `RUST_LOG`,
//! and, only when an OTLP endpoint is configured, a `tracing-opentelemetry` layer that
//! exports spans over OTLP. Configuration is the standard environment:
//!
//! - `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: where spans go.
//!   Without either nothing is exported, no provider is built and nothing costs.
//! - `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`): `http/protobuf` (default) or
//!   `grpc`; `OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`, `..._COMPRESSION` as usual.
//! - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: the resource (the service name
//!   defaults to the one given to [`init`]).
//! - `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`: sampling (default
//!   `parentbased_always_on`); `OTEL_BSP_*`: batching.
//! - `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn export off;
//!   `OTEL_PROPAGATORS` may name `tracecontext` (the default) and `baggage`.
//!
//! Call [`Telemetry::shutdown`] before exiting: it flushes the spans not yet exported.
//!
//! Trace context travels in NATS headers (`traceparent`, `tracestate`): [`inject_current`]
//! writes the current span's, [`extract`] reads a request's. The agent server runs each
//! handler in a span that is a child of the request's `traceparent`, and
//! [`crate::Mesh`]'s calls and [`crate::NodeRequest::onward_headers`] carry the current
//! span on, so calls made from a handler nest under it.
//!
//! For spans that outlive a process (a workflow run handled by several replicas), the
//! provider pins ids on demand: [`emit`] exports a span that has already ended, with the
//! trace and span ids, parent, start and end given, so that spans emitted by different
//! processes at different times join one tree.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::SystemTime;

use async_nats::HeaderMap;
pub use opentelemetry;
use opentelemetry::propagation::{
    Extractor, Injector, TextMapCompositePropagator, TextMapPropagator as _,
};
use opentelemetry::trace::{
    SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceId, Tracer,
    TracerProvider as _,
};
use opentelemetry::{global, Context, KeyValue};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Sets up logs and, when configured, trace export for a process called `service_name`
/// (unless `OTEL_SERVICE_NAME` says otherwise). Logs go to stderr, filtered by `RUST_LOG`
/// (default `info`). Keep the returned value and call [`Telemetry::shutdown`] on exit.
pub fn init(service_name: &str) -> Telemetry {
    Telemetry::builder(service_name).init()
}

/// The telemetry of a process: call [`Telemetry::shutdown`] before exiting to flush the
/// spans not yet exported (dropping it does the same, blocking).
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    /// For gRPC: the runtime the exporter's connection lives on, so that it works
    /// whatever runtime (or none) the application has.
    runtime: Option<tokio::runtime::Runtime>,
}

/// Options of [`Telemetry`] before [`TelemetryBuilder::init`].
#[derive(Debug, Clone)]
pub struct TelemetryBuilder {
    service_name: String,
    log_default: Option<String>,
}

impl TelemetryBuilder {
    /// The log filter used when `RUST_LOG` is not set (default `info`); `None` logs
    /// nothing unless `RUST_LOG` is set.
    pub fn log_default(mut self, filter: Option<&str>) -> Self {
        self.log_default = filter.map(str::to_owned);
        self
    }

    /// Installs the subscriber (unless one is installed already: then only the provider
    /// is set up) and, when the environment asks for it, the OTLP exporter.
    pub fn init(self) -> Telemetry {
        self.init_with(|key| std::env::var(key).ok())
    }

    fn init_with(self, env: impl Fn(&str) -> Option<String>) -> Telemetry {
        let log_filter = match env("RUST_LOG").filter(|v| !v.is_empty()) {
            Some(_) => Some(EnvFilter::from_default_env()),
            None => self.log_default.as_deref().map(EnvFilter::new),
        };
        let export = match ExportConfig::from_env(&env) {
            Ok(config) => config,
            Err(why) => {
                eprintln!("{}: tracing not exported: {why}", self.service_name);
                None
            }
        };
        let mut telemetry = Telemetry {
            provider: None,
            runtime: None,
        };
        if let Some(config) = export {
            match build_provider(&self.service_name, &config, &env) {
                Ok((provider, runtime)) => {
                    install(&provider, &config);
                    telemetry.provider = Some(provider);
                    telemetry.runtime = runtime;
                }
                Err(why) => eprintln!("{}: tracing not exported: {why}", self.service_name),
            }
        }
        let fmt = log_filter.map(|filter| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter)
        });
        let otel = telemetry.provider.as_ref().map(|p| {
            tracing_opentelemetry::layer()
                .with_tracer(p.tracer(self.service_name.clone()))
                .with_filter(otel_filter())
        });
        if fmt.is_some() || otel.is_some() {
            // A subscriber installed before (a test harness, the application) stays.
            let _ = tracing_subscriber::registry()
                .with(fmt)
                .with(otel)
                .try_init();
        }
        telemetry
    }
}

/// What the OTel layer records: spans and events at `info` and above, without those of
/// the exporter's own HTTP and gRPC stacks (which would feed back into the exporter).
fn otel_filter() -> Targets {
    Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("h2", LevelFilter::OFF)
        .with_target("hyper", LevelFilter::OFF)
        .with_target("hyper_util", LevelFilter::OFF)
        .with_target("tonic", LevelFilter::OFF)
        .with_target("tower", LevelFilter::OFF)
        .with_target("reqwest", LevelFilter::OFF)
        .with_target("opentelemetry", LevelFilter::OFF)
        .with_target("opentelemetry_sdk", LevelFilter::OFF)
        .with_target("opentelemetry_otlp", LevelFilter::OFF)
        .with_target("async_nats", LevelFilter::OFF)
}

impl Telemetry {
    /// A builder: logs with `RUST_LOG` (default `info`), traces when configured.
    pub fn builder(service_name: &str) -> TelemetryBuilder {
        TelemetryBuilder {
            service_name: service_name.to_owned(),
            log_default: Some("info".into()),
        }
    }

    /// Whether spans are exported (an OTLP endpoint was configured and the exporter
    /// built).
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes the spans not yet exported (at most the exporter's timeout) and stops
    /// exporting. Runs the blocking part off the async workers.
    pub async fn shutdown(mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        uninstall();
        let _ = tokio::task::spawn_blocking(move || finish(&provider)).await;
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    /// [`Telemetry::shutdown`] for code outside any async runtime.
    pub fn shutdown_blocking(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(provider) = self.provider.take() {
            uninstall();
            finish(&provider);
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn finish(provider: &SdkTracerProvider) {
    if let Err(e) = provider.shutdown() {
        eprintln!("flushing the last spans failed: {e}");
    }
}

/// What the environment asks of the exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// `grpc` rather than HTTP.
    pub grpc: bool,
    /// Whether `baggage` is propagated beside `tracecontext`.
    pub baggage: bool,
}

impl ExportConfig {
    /// The export the variables `env` gives ask for: `None` when no OTLP endpoint is set
    /// (or export is turned off); an error for a setting that cannot be honoured.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Option<ExportConfig>, String> {
        let var = |k: &str| {
            env(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            && var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        if let Some(exporters) = var("OTEL_TRACES_EXPORTER") {
            let names: Vec<&str> = exporters.split(',').map(str::trim).collect();
            if names.contains(&"none") {
                return Ok(None);
            }
            if let Some(other) = names.iter().find(|n| **n != "otlp") {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER '{other}' is not supported (only 'otlp' and 'none')"
                ));
            }
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        let grpc = match protocol.as_str() {
            "grpc" => true,
            "http/protobuf" => false,
            other => {
                return Err(format!(
                    "OTLP protocol '{other}' is not supported (use 'http/protobuf' or 'grpc')"
                ))
            }
        };
        let mut baggage = false;
        if let Some(props) = var("OTEL_PROPAGATORS") {
            for p in props.split(',').map(str::trim) {
                match p {
                    "tracecontext" | "none" => {}
                    "baggage" => baggage = true,
                    other => eprintln!("OTEL_PROPAGATORS: '{other}' is not supported, ignored"),
                }
            }
        }
        Ok(Some(ExportConfig { grpc, baggage }))
    }
}

/// The tracer provider: a batch exporter over OTLP, the resource from the environment,
/// and the id generator that [`emit`] pins.
fn build_provider(
    service_name: &str,
    config: &ExportConfig,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(SdkTracerProvider, Option<tokio::runtime::Runtime>), String> {
    let runtime = if config.grpc {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-grpc")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the gRPC exporter's runtime: {e}"))?;
        Some(rt)
    } else {
        None
    };
    let exporter = {
        let _entered = runtime.as_ref().map(|rt| rt.enter());
        // The HTTP exporter builds a reqwest client, which needs the TLS provider.
        crate::crypto::install();
        opentelemetry_otlp::SpanExporter::builder()
            .build()
            .map_err(|e| e.to_string())?
    };
    let named = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let resource_names_service = env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attrs| {
        attrs
            .split(',')
            .any(|kv| kv.trim().starts_with("service.name="))
    });
    let mut resource = Resource::builder();
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|_| named("OTEL_SERVICE_NAME")) {
        // The variable wins over `service.name` in OTEL_RESOURCE_ATTRIBUTES.
        resource = resource.with_service_name(name);
    } else if !resource_names_service {
        resource = resource.with_service_name(service_name.to_owned());
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_id_generator(PinnedIds::default())
        .with_resource(resource.build())
        .build();
    Ok((provider, runtime))
}

/// What [`emit`] and friends use, while a provider is installed.
struct Installed {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Same sampler, no processor: tells whether a span would be sampled.
    decider: SdkTracer,
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static INSTALLED: RwLock<Option<Installed>> = RwLock::new(None);

fn install(provider: &SdkTracerProvider, config: &ExportConfig) {
    let trace_context: Box<dyn opentelemetry::propagation::TextMapPropagator + Send + Sync> =
        Box::new(TraceContextPropagator::new());
    if config.baggage {
        global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
            trace_context,
            Box::new(BaggagePropagator::new()),
        ]));
    } else {
        global::set_text_map_propagator(TraceContextPropagator::new());
    }
    global::set_tracer_provider(provider.clone());
    let decider = SdkTracerProvider::builder()
        .with_id_generator(PinnedIds::default())
        .build()
        .tracer("sampling");
    let installed = Installed {
        provider: provider.clone(),
        tracer: provider.tracer("mesh"),
        decider,
    };
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some(installed);
    ACTIVE.store(true, Ordering::SeqCst);
}

fn uninstall() {
    ACTIVE.store(false, Ordering::SeqCst);
    INSTALLED.write().unwrap_or_else(|e| e.into_inner()).take();
}

fn with_installed<T>(f: impl FnOnce(&Installed) -> T) -> Option<T> {
    if !active() {
        return None;
    }
    INSTALLED
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(f)
}

/// Whether this process exports spans (a provider is installed by [`init`]). When it
/// does not, [`emit`] and [`flush`] do nothing.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Exports the spans ended so far and waits for the exporter (blocking work runs off the
/// async workers); does nothing when not [`active`]. Errors are logged, not returned: a
/// collector that is down must not stop the work it watches.
pub async fn flush() {
    let Some(provider) = with_installed(|i| i.provider.clone()) else {
        return;
    };
    let flushed = tokio::task::spawn_blocking(move || provider.force_flush()).await;
    if let Ok(Err(e)) = flushed {
        tracing::debug!("flushing spans failed: {e}");
    }
}

thread_local! {
    /// Ids the next span built on this thread takes (see [`emit`]).
    static PIN: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except while [`emit`] pins them for the span it builds.
#[derive(Debug, Default)]
struct PinnedIds(RandomIdGenerator);

impl IdGenerator for PinnedIds {
    fn new_trace_id(&self) -> TraceId {
        PIN.get().map_or_else(|| self.0.new_trace_id(), |p| p.0)
    }

    fn new_span_id(&self) -> SpanId {
        PIN.get().map_or_else(|| self.0.new_span_id(), |p| p.1)
    }
}

/// Builds a span with ids `(trace, span)` (the trace id is the parent's when it has one).
fn build_pinned(
    tracer: &SdkTracer,
    trace: TraceId,
    span: SpanId,
    builder: SpanBuilder,
    parent: Option<&SpanContext>,
) -> opentelemetry_sdk::trace::Span {
    let cx = match parent {
        Some(p) if p.is_valid() => Context::new().with_remote_span_context(p.clone()),
        _ => Context::new(),
    };
    PIN.set(Some((trace, span)));
    let built = tracer.build_with_context(builder, &cx);
    PIN.set(None);
    built
}

/// A span that has ended, to export with the ids and times given.
#[derive(Debug, Clone)]
pub struct EndedSpan {
    /// Its name.
    pub name: Cow<'static, str>,
    /// Its trace (ignored when the parent is valid: the parent's is taken).
    pub trace_id: TraceId,
    /// Its own id.
    pub span_id: SpanId,
    /// Its parent, if any (a span of another process, or one emitted before or later).
    pub parent: Option<SpanContext>,
    /// Server, client, internal...
    pub kind: SpanKind,
    /// When it started.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// Its status (`Unset` for a success).
    pub status: Status,
}

/// Exports spans that have already ended, with the ids, parents and times they carry
/// (the sampler decides, with the parent's flags); does nothing when not [`active`].
pub fn emit(spans: impl IntoIterator<Item = EndedSpan>) {
    with_installed(|i| {
        for s in spans {
            let builder = SpanBuilder::from_name(s.name)
                .with_kind(s.kind)
                .with_start_time(s.start)
                .with_attributes(s.attributes);
            let mut span =
                build_pinned(&i.tracer, s.trace_id, s.span_id, builder, s.parent.as_ref());
            opentelemetry::trace::Span::set_status(&mut span, s.status);
            opentelemetry::trace::Span::end_with_timestamp(&mut span, s.end);
        }
    });
}

/// Whether a span with these ids and this parent would be sampled (so that its children,
/// emitted elsewhere or later, carry the same decision in their parent's flags); `false`
/// when not [`active`].
pub fn sampled(
    trace_id: TraceId,
    span_id: SpanId,
    parent: Option<&SpanContext>,
    name: &str,
) -> bool {
    with_installed(|i| {
        let builder = SpanBuilder::from_name(name.to_owned());
        let span = build_pinned(&i.decider, trace_id, span_id, builder, parent);
        opentelemetry::trace::Span::span_context(&span).is_sampled()
    })
    .unwrap_or(false)
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .iter()
            .map(|(k, _)| AsRef::<str>::as_ref(k))
            .collect()
    }
}

/// Writes the current `tracing` span's context into `headers` (`traceparent`, and
/// `tracestate` when it has one), replacing any there; `false` (headers untouched) when
/// there is no valid current span context (not [`active`], or no span).
pub fn inject_current(headers: &mut HeaderMap) -> bool {
    if !active() {
        return false;
    }
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return false;
    }
    global::get_text_map_propagator(|p| p.inject_context(&cx, &mut HeaderInjector(headers)));
    true
}

/// The trace context of a request's headers (an empty context when they carry none).
pub fn extract(headers: &HeaderMap) -> Context {
    global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)))
}

/// A `traceparent` value (W3C: `00-{32 hex}-{16 hex}-{2 hex}`) read into a remote span
/// context; `None` when it is not one.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let parts: Vec<&str> = value.trim().split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    match parts.as_slice() {
        [v, t, s, f] if hex(v, 2) && *v != "ff" && hex(t, 32) && hex(s, 16) && hex(f, 2) => {}
        _ => return None,
    }
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_owned(), value.trim().to_owned());
    let cx = TraceContextPropagator::new().extract(&carrier);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The `traceparent` value of a span context.
pub fn traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The OpenTelemetry context of a `tracing` span (starting it); `None` when it has none
/// (not [`active`], or a disabled span).
pub fn span_context(span: &tracing::Span) -> Option<SpanContext> {
    if !active() {
        return None;
    }
    let sc = span.context().span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// Makes `span` a child of the trace context in `headers` (when they carry one); must be
/// called before the span is entered.
pub fn set_parent_from(span: &tracing::Span, headers: &HeaderMap) {
    if !active() {
        return;
    }
    let parent = extract(headers);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn without_an_endpoint_nothing_is_exported() {
        assert_eq!(ExportConfig::from_env(env(&[])), Ok(None));
        let other = [
            ("OTEL_SERVICE_NAME", "x"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", " "),
        ];
        assert_eq!(ExportConfig::from_env(env(&other)), Ok(None));
    }

    #[test]
    fn an_endpoint_exports_over_http_unless_grpc_is_asked_for() {
        let http = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")];
        let c = ExportConfig::from_env(env(&http)).unwrap().unwrap();
        assert!(!c.grpc);
        let grpc = [
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4317",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        assert!(ExportConfig::from_env(env(&grpc)).unwrap().unwrap().grpc);
        let signal_wins = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ];
        assert!(
            !ExportConfig::from_env(env(&signal_wins))
                .unwrap()
                .unwrap()
                .grpc
        );
        let json = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ];
        assert!(ExportConfig::from_env(env(&json)).is_err());
    }

    #[test]
    fn export_can_be_turned_off() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                ExportConfig::from_env(env(&[base, off])),
                Ok(None),
                "{off:?}"
            );
        }
        assert!(ExportConfig::from_env(env(&[base, ("OTEL_TRACES_EXPORTER", "zipkin")])).is_err());
        let otlp = ExportConfig::from_env(env(&[base, ("OTEL_TRACES_EXPORTER", "otlp")]));
        assert!(otlp.unwrap().is_some());
    }

    #[test]
    fn traceparents_round_trip() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let sc = parse_traceparent(tp).expect("valid");
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent(&sc), tp);
        assert!(parse_traceparent("00-abc-def-01").is_none());
    }

    #[test]
    fn with_no_variables_no_provider_is_built_and_nothing_is_emitted() {
        let t = Telemetry::builder("test")
            .log_default(None)
            .init_with(|_| None);
        assert!(!t.is_exporting());
        assert!(!active());
        emit([EndedSpan {
            name: "x".into(),
            trace_id: TraceId::from_bytes([1; 16]),
            span_id: SpanId::from_bytes([2; 8]),
            parent: None,
            kind: SpanKind::Internal,
            start: SystemTime::now(),
            end: SystemTime::now(),
            attributes: Vec::new(),
            status: Status::Unset,
        }]);
        let mut h = HeaderMap::new();
        assert!(!inject_current(&mut h));
        assert!(h.get("traceparent").is_none());
        assert!(!sampled(
            TraceId::from_bytes([1; 16]),
            SpanId::from_bytes([2; 8]),
            None,
            "x"
        ));
    }
}
