//! The recording agent of the flow-control tests (`shell/flow.rs`, `crash/flow.rs`): it
//! counts, per concurrency key, the runs with a call in flight, so that a test sees from
//! the agent's side whether a run's slot was ever shared.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sdk::handler::{handler_fn, NodeRequest};
use agent_sdk::AgentBuilder;
use serde_json::json;

/// What the recording agent saw.
#[derive(Default)]
pub(crate) struct Seen {
    /// Per key, the runs with a call in flight, and how many of its calls (a copy of a
    /// call sent again after a crash is the same run, not one more).
    pub(crate) in_flight: HashMap<String, HashMap<String, usize>>,
    /// Per key, the most runs with a call in flight at once.
    pub(crate) max_per_key: HashMap<String, usize>,
    all_now: usize,
    /// The most calls in flight at once, all keys together.
    pub(crate) max_all: usize,
    /// Labels in the order their calls arrived.
    pub(crate) order: Vec<String>,
}

/// The recording agent, `Rec`: counts calls in flight per `customer`, records the order of
/// `label`s, and holds a call labelled `hold` until `release` is notified.
pub(crate) struct Recorder {
    pub(crate) seen: Arc<Mutex<Seen>>,
    pub(crate) release: Arc<tokio::sync::Notify>,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            seen: Arc::default(),
            release: Arc::new(tokio::sync::Notify::new()),
        }
    }

    pub(crate) async fn serve(&self, client: async_nats::Client) -> agent_sdk::AgentHandle {
        let (seen, release) = (self.seen.clone(), self.release.clone());
        AgentBuilder::new("Rec")
            .description("records how many calls are in flight")
            .max_in_flight(64)
            .handler(handler_fn(move |req: NodeRequest| {
                let (seen, release) = (seen.clone(), release.clone());
                async move {
                    let key = req.input["customer"].as_str().unwrap_or("").to_string();
                    let label = req.input["label"].as_str().unwrap_or("").to_string();
                    let run = req.context_id.clone();
                    {
                        let mut s = seen.lock().unwrap();
                        let runs = s.in_flight.entry(key.clone()).or_default();
                        *runs.entry(run.clone()).or_default() += 1;
                        let now = runs.len();
                        let max = s.max_per_key.entry(key.clone()).or_default();
                        *max = (*max).max(now);
                        s.all_now += 1;
                        s.max_all = s.max_all.max(s.all_now);
                        s.order.push(label.clone());
                    }
                    if label == "hold" {
                        release.notified().await;
                    } else {
                        // The call's work: long enough for calls to overlap if allowed.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    {
                        let mut s = seen.lock().unwrap();
                        let runs = s.in_flight.get_mut(&key).expect("counted above");
                        let calls = runs.get_mut(&run).expect("counted above");
                        *calls -= 1;
                        if *calls == 0 {
                            runs.remove(&run);
                        }
                        s.all_now -= 1;
                    }
                    Ok(json!({ "label": label }))
                }
            }))
            .serve(client)
            .await
            .expect("agent")
    }
}
