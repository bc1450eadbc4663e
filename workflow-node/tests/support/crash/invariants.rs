//! Checks made from outside after a fault scenario, beyond the replies and records
//! (`check_replies`, `check_records`): no agent call for a run after it ended, and how much
//! memory a process holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use messages::subjects;
use serde_json::Value;
use workflow_node::core::{ExecutionId, TaskKey};
use workflow_node::shell::{run::names, RunRecord};

use super::NAME;

/// The most an agent request may trail its run's end when nothing holds it: one sent just
/// before the end and still on its way.
const IN_FLIGHT_ALLOWANCE_MS: u64 = 2_000;

/// The last time each run's calls were seen going out (wall-clock ms), by execution id.
pub(crate) type LastCalls = Arc<Mutex<HashMap<String, u64>>>;

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Records every agent call of the mesh: its run and when it was seen.
pub(crate) async fn spy_calls(client: &async_nats::Client) -> LastCalls {
    let seen: LastCalls = Arc::default();
    let mut sub = client
        .subscribe(subjects::agent_request("mesh", "*"))
        .await
        .expect("subscribe");
    let s = seen.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let Ok(v) = serde_json::from_slice::<Value>(&msg.payload) else {
                continue;
            };
            let Some(sub_task_id) = v["params"]["metadata"]["sub_task_id"].as_str() else {
                continue; // a caller's request of a workflow, not a node's call
            };
            if let Some((execution, _, _)) = TaskKey::parse_sub_task_id(sub_task_id) {
                let mut seen = s.lock().unwrap_or_else(|e| e.into_inner());
                seen.insert(execution.0, wall_ms());
            }
        }
    });
    seen
}

/// Runs whose calls went out after they ended (beyond the allowance). Calls are seen when
/// they arrive, not when they were made: `held` is the longest a fault of the scenario
/// holds a replica's messages (a frozen process, a black hole), which a call made just
/// before its run ended may spend on its way too.
pub(crate) async fn check_no_call_after_end(
    client: &async_nats::Client,
    calls: &LastCalls,
    held: std::time::Duration,
) -> Vec<String> {
    let allowance = IN_FLIGHT_ALLOWANCE_MS + u64::try_from(held.as_millis()).unwrap_or(u64::MAX);
    let js = async_nats::jetstream::new(client.clone());
    let kv = js
        .get_key_value(names::runs_bucket("mesh"))
        .await
        .expect("runs bucket");
    let last: Vec<(String, u64)> = calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let mut problems = Vec::new();
    for (execution, at) in last {
        let key = names::run_key(NAME, &ExecutionId(execution.clone()));
        let Ok(Some(bytes)) = kv.get(&key).await else {
            continue; // not a run of this test's workflow, or checked by check_records
        };
        let Ok(record) = RunRecord::from_entry(&bytes) else {
            continue;
        };
        if let Some(ended) = record.ended_at {
            if at > ended.0.saturating_add(allowance) {
                problems.push(format!(
                    "run {execution}: an agent call {} ms after it ended",
                    at - ended.0
                ));
            }
        }
    }
    problems
}

/// The resident memory of process `pid`, in KiB.
pub(crate) fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
