//! `conformance-agent --nats-url URL --name NAME [--namespace NS] [--heartbeat-ms MS]
//! [--nkey-seed-file PATH]`: the agent of the SDK conformance suite (`python/tests/conformance`),
//! written with agent-sdk. The Python SDK's `mesh.conformance` serves the same agent, so that
//! one suite of scenarios drives both and holds them to one protocol.
//!
//! What it does is chosen by the input's `op` (the same in both SDKs, by contract):
//! `double` answers `{value: 2 × value}`; `status` sends `text` as a status update, then
//! answers `{said: text}`; `big` answers `{blob: "x" × size}` (stored when large); `fail`
//! fails with `text` and error kind `kind`; `gate` counts a run of key `text`, subscribes to
//! `conformance.release.{text}`, says `gate {text} open` as a status update (so a test
//! knows the handler runs and listens), waits for a message there and answers `{runs: N,
//! value}` (N: runs of that key so far, so a test sees whether a copy ran the handler
//! again). Its schemas refuse anything else. Prints `ready` on stdout once serving, and
//! `draining` when SIGTERM comes (it then finishes its running calls).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sdk::{handler_fn, skill, AgentBuilder, AgentError, NodeRequest, Signer};
use futures::StreamExt;
use serde_json::{json, Value};

/// Its flags, parsed by hand (the binary pulls no command-line parser).
struct Args {
    url: String,
    name: String,
    namespace: String,
    heartbeat: Duration,
    seed_file: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut out = Args {
        url: String::new(),
        name: "Conformance".into(),
        namespace: agent_sdk::DEFAULT_NAMESPACE.into(),
        heartbeat: Duration::from_secs(1),
        seed_file: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--nats-url" => out.url = value,
            "--name" => out.name = value,
            "--namespace" => out.namespace = value,
            "--heartbeat-ms" => {
                let ms = value.parse().map_err(|e| format!("--heartbeat-ms: {e}"))?;
                out.heartbeat = Duration::from_millis(ms);
            }
            "--nkey-seed-file" => out.seed_file = Some(value),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if out.url.is_empty() {
        return Err("--nats-url is required".into());
    }
    Ok(out)
}

/// The input schema both SDKs' conformance agents declare.
fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["double", "status", "big", "fail", "gate"]},
            "value": {"type": "number"},
            "text": {"type": "string"},
            "kind": {"type": "string"},
            "size": {"type": "integer", "minimum": 0, "maximum": 16_777_216}
        },
        "required": ["op"]
    })
}

/// Runs of each `gate` key.
type Runs = Arc<Mutex<HashMap<String, u64>>>;

async fn handle(
    client: async_nats::Client,
    runs: Runs,
    req: NodeRequest,
) -> Result<Value, AgentError> {
    let input = &req.input;
    let text = input["text"].as_str().unwrap_or_default().to_owned();
    let value = input["value"].as_f64().unwrap_or(0.0);
    match input["op"].as_str().unwrap_or_default() {
        "double" => Ok(json!({"value": value * 2.0})),
        "status" => {
            req.send_status(text.clone())
                .await
                .map_err(|e| AgentError::new(e.to_string()))?;
            Ok(json!({"said": text}))
        }
        "big" => {
            let size = input["size"].as_u64().unwrap_or(0) as usize;
            Ok(json!({"blob": "x".repeat(size)}))
        }
        "fail" => {
            let kind = input["kind"].as_str().unwrap_or("conformance");
            Err(AgentError::with_kind(text, kind))
        }
        "gate" => {
            let n = {
                let mut runs = runs.lock().unwrap_or_else(|e| e.into_inner());
                let n = runs.entry(text.clone()).or_default();
                *n += 1;
                *n
            };
            let mut release = client
                .subscribe(format!("conformance.release.{text}"))
                .await
                .map_err(|e| AgentError::new(e.to_string()))?;
            // The subscription is written before the status update on one connection, so
            // the server knows it by the time the test reads the update.
            req.send_status(format!("gate {text} open"))
                .await
                .map_err(|e| AgentError::new(e.to_string()))?;
            release.next().await;
            Ok(json!({"runs": n, "value": value}))
        }
        other => Err(AgentError::new(format!("unknown op {other}"))),
    }
}

async fn run(args: Args) -> Result<(), String> {
    let client = async_nats::connect(&args.url)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", args.url))?;
    let runs: Runs = Arc::default();
    let handler_client = client.clone();
    let mut builder = AgentBuilder::new(args.name.clone())
        .description("The SDK conformance suite's agent (agent-sdk)")
        .namespace(args.namespace.clone())
        .skill(skill("conformance", "Conformance", "what the suite drives"))
        .input_schema(input_schema())
        .output_schema(json!({"type": "object"}))
        .heartbeat_interval(args.heartbeat)
        .handler(handler_fn(move |req| {
            handle(handler_client.clone(), runs.clone(), req)
        }));
    if let Some(path) = &args.seed_file {
        builder = builder.signer(Signer::from_seed_file(path).map_err(|e| e.to_string())?);
    }
    let handle = builder.serve(client).await.map_err(|e| e.to_string())?;
    // Listening before saying ready: a SIGTERM right after `ready` is a drain, not death.
    let mut signals = agent_sdk::health::Signals::listen().map_err(|e| e.to_string())?;
    println!("ready");
    signals.recv().await;
    println!("draining");
    handle.stop().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("conformance-agent: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("conformance-agent: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conformance-agent: {e}");
            ExitCode::from(2)
        }
    }
}
