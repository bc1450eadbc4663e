//! Traces of agents built with the SDK, exported over OTLP/HTTP to a real receiver: a
//! handled request is an `agent.handle` span, a child of the request's `traceparent`, and
//! a call the handler makes onward (through `Mesh::agent`) nests under it.
//!
//! One test per process: `telemetry::init` installs the process's global subscriber.

use std::time::Duration;

use agent_sdk::telemetry;
use agent_sdk::{handler_fn, AgentBuilder, CallOptions, Mesh, NodeRequest};
use serde_json::json;
use test_harness::otlp::{Receiver, Trace};
use tracing::Instrument;

#[test]
fn a_handled_request_and_the_call_it_makes_nest_under_the_callers_span() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let receiver = runtime.block_on(Receiver::start());
    // Set before any thread of the test reads the environment.
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    std::env::set_var("OTEL_SERVICE_NAME", "sdk-test");
    std::env::set_var("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test");
    std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "50");
    let telemetry = telemetry::Telemetry::builder("ignored")
        .log_default(None)
        .init();
    assert!(telemetry.is_exporting());
    assert!(telemetry::active());
    runtime.block_on(async {
        let server = test_harness::nats();
        let client = async_nats::connect(server.url()).await.expect("connect");
        let inner = AgentBuilder::new("Inner")
            .description("answers")
            .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }));
        let c = client.clone();
        let outer = AgentBuilder::new("Outer")
            .description("calls Inner")
            .handler(handler_fn(move |req: NodeRequest| {
                let c = c.clone();
                async move {
                    // Onward through the Mesh handle (the call runs in a task of its
                    // own): the context is taken where the call starts.
                    let out = agent_sdk::Mesh::new(c)
                        .agent("Inner")
                        .timeout(Duration::from_secs(10))
                        .headers(req.onward_headers())
                        .call(json!({"x": 1}))
                        .await
                        .map_err(|e| agent_sdk::AgentError::new(e.to_string()))?;
                    Ok(json!({"inner": out}))
                }
            }));
        let _inner = inner.serve(client.clone()).await.expect("Inner serves");
        let _outer = outer.serve(client.clone()).await.expect("Outer serves");

        let root = tracing::info_span!("caller");
        let out = async {
            Mesh::new(client.clone())
                .defaults(CallOptions::new(Duration::from_secs(10)))
                .agent("Outer")
                .call(json!({}))
                .await
        }
        .instrument(root.clone())
        .await
        .expect("Outer answers");
        assert_eq!(out, json!({"inner": {"x": 1}}));
        drop(root);

        let trace = receiver
            .wait_for_spans(Duration::from_secs(20), |spans| {
                let caller = spans.iter().find(|s| s.name == "caller")?;
                let trace = Trace::of(spans, &caller.trace_id);
                (trace.named("agent.handle").count() == 2).then_some(trace)
            })
            .await
            .unwrap_or_else(|spans| panic!("no complete trace; received {spans:#?}"));
        eprintln!("{}", trace.render());
        assert!(trace.orphans().is_empty(), "{}", trace.render());
        let inner = trace
            .named("agent.handle")
            .find(|s| s.attr("agent.name") == Some("Inner"))
            .expect("Inner's span");
        assert_eq!(
            trace.path(inner),
            ["agent.handle", "agent.handle", "caller"],
            "{}",
            trace.render()
        );
        assert_eq!(inner.service_name, "sdk-test");
        assert_eq!(
            inner
                .resource
                .get("deployment.environment")
                .map(String::as_str),
            Some("test")
        );
        assert_eq!(inner.attr("outcome"), Some("success"));
        assert_eq!(inner.kind, 2, "a server span");
    });
    runtime.block_on(telemetry.shutdown());
    assert!(!telemetry::active());
}
