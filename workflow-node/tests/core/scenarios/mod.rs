//! Scenario tests of the core on the simulator: every rule of the execution semantics, on
//! virtual time, with a serde round trip of the state before every event.

mod agent;
mod approval;
mod branches;
mod expressions;
mod fork_join;
mod loops;
mod map;
mod pause;
mod policy;
mod retry;
mod run;
mod timed_out;

use std::time::Duration;

use serde_json::json;
use workflow_node::core::sim::{Reply, Sim};
use workflow_node::core::{Command, Event, NodeStatus, Progress, RunStatus};
use workflow_node::definition::{parse_str, Workflow};

fn wf(yaml: &str) -> Workflow {
    match parse_str(yaml, "test.yaml") {
        Ok(w) => w,
        Err(problems) => panic!(
            "invalid test workflow:\n{}",
            problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

fn echo(d: &workflow_node::core::Dispatch) -> Reply {
    Reply::ok(d.input.clone())
}

fn status(sim: &Sim<'_>, node: &str) -> NodeStatus {
    sim.state.node_status(node)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn dispatched(sim: &Sim<'_>) -> Vec<String> {
    sim.dispatches().iter().map(|d| d.node_id.clone()).collect()
}
