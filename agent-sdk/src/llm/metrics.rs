//! The LLM agents' metrics, in the process's own registry ([`crate::metrics`]; served at
//! `/metrics` beside the health probes of `mesh-agents --health-addr`):
//!
//! - `mesh_llm_calls_total{agent, model, outcome}`: model calls; `outcome` is `ok`, the
//!   provider's HTTP status (`429`, `503`, ...), `timeout`, `transport`, `certificate` or
//!   `malformed`.
//! - `mesh_llm_tokens_total{agent, model, outcome, type}`: tokens the provider reported,
//!   `type` `input` (the prompt) or `output` (the answer).
//! - `mesh_llm_limit_wait_seconds{agent, limit}`: per model call, the time spent waiting
//!   for a shared limit (`limit`: `concurrency`, `requests` or `tokens`), 0 when it did
//!   not wait; a histogram.
//!
//! Labels are bounded: the agents and models of the file, outcomes by kind. Prompts,
//! errors' texts and run ids are never labels.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::KeyValue;

struct Instruments {
    calls: Counter<u64>,
    tokens: Counter<u64>,
    wait: Histogram<f64>,
}

fn instruments() -> &'static Instruments {
    static I: OnceLock<Instruments> = OnceLock::new();
    I.get_or_init(|| {
        let meter = crate::metrics::meter("agent-sdk.llm");
        Instruments {
            calls: meter
                .u64_counter("mesh.llm.calls")
                .with_unit("{call}")
                .with_description("Model calls of LLM agents, by agent, model and outcome.")
                .build(),
            tokens: meter
                .u64_counter("mesh.llm.tokens")
                .with_unit("{token}")
                .with_description(
                    "Tokens of LLM agents' model calls as the provider reported them, by type (input, output).",
                )
                .build(),
            wait: meter
                .f64_histogram("mesh.llm.limit.wait")
                .with_unit("s")
                .with_description(
                    "Time a model call waited for a shared limit (concurrency, requests, tokens).",
                )
                .with_boundaries(vec![
                    0.0, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                ])
                .build(),
        }
    })
}

/// One finished model call of `agent` on `model`: its outcome and the tokens reported.
pub(crate) fn call(
    agent: &str,
    model: &str,
    outcome: &str,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
) {
    let i = instruments();
    let labels = [
        KeyValue::new("agent", agent.to_owned()),
        KeyValue::new("model", model.to_owned()),
        KeyValue::new("outcome", outcome.to_owned()),
    ];
    i.calls.add(1, &labels);
    for (kind, n) in [("input", input_tokens), ("output", output_tokens)] {
        if let Some(n) = n {
            let mut with_type = labels.to_vec();
            with_type.push(KeyValue::new("type", kind));
            i.tokens.add(n, &with_type);
        }
    }
}

/// The time a model call of `agent` waited for its `limit`.
pub(crate) fn waited(agent: &str, limit: &'static str, waited: Duration) {
    instruments().wait.record(
        waited.as_secs_f64(),
        &[
            KeyValue::new("agent", agent.to_owned()),
            KeyValue::new("limit", limit),
        ],
    );
}
