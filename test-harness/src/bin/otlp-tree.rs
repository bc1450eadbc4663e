//! `otlp-tree [ADDR]`: an OTLP/HTTP receiver (default `127.0.0.1:4318`) that prints each
//! trace it receives as a tree, once no span of it came for a second; for looking at the
//! traces of the workflow node and its agents without a tracing backend:
//!
//! ```sh
//! cargo run -p test-harness --bin otlp-tree &
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 cargo run -p workflow-node -- demo
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use test_harness::otlp::{Receiver, Trace};

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4318".into());
    let receiver = match Receiver::start_on(&addr).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("otlp-tree: cannot listen on {addr}: {e}");
            std::process::exit(2);
        }
    };
    eprintln!(
        "otlp-tree: OTEL_EXPORTER_OTLP_ENDPOINT={} ; ctrl-c to stop",
        receiver.endpoint()
    );
    // Per trace: spans seen, when the count last changed, spans printed.
    let mut seen: BTreeMap<String, (usize, Instant, usize)> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {}
        }
        let spans = receiver.spans();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &spans {
            *counts.entry(s.trace_id.as_str()).or_default() += 1;
        }
        for (trace_id, n) in counts {
            let entry = seen
                .entry(trace_id.to_owned())
                .or_insert((0, Instant::now(), 0));
            if entry.0 != n {
                *entry = (n, Instant::now(), entry.2);
            }
            if entry.2 != n && entry.1.elapsed() >= Duration::from_secs(1) {
                entry.2 = n;
                let trace = Trace::of(&spans, trace_id);
                println!("trace {trace_id}\n{}", trace.render());
            }
        }
    }
}
