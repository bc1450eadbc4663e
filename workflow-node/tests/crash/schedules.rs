//! Crash test of schedules with real processes: two `workflow-node serve` replicas of a
//! workflow with a schedule every second, and a killer that `kill -9`s a random replica
//! every 300–700 ms (at fire times among others: between a decision's commit and its
//! start, between the start and clearing it) and starts a new one. Every slot from the
//! first run on must start exactly one run: none lost (the slots are contiguous), none
//! started twice (one run per slot, its id derived from the slot).

use std::collections::BTreeMap;
use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use workflow_node::shell::run::names;

use crate::support::crash::rig::{all_ended, one_success_each, watch_runs, Killer, Rig, RunsBy};
use crate::support::crash::STUBS;

const TICK: &str = r#"
name: Tick
workflow:
  description: a run every second, its slot in its input
  schedules:
    - {name: tick, every: 1s, overlap: allow_all, catchup_window: 60s, input: {at: "{{schedule.unix}}"}}
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {at: "{{workflow.input.at}}"}}
  output_mapping: {at: "{{echo.output.at}}"}
"#;

/// Kills before the killer stops.
const KILLS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_starts_one_run_while_replicas_are_killed_at_fire_times() {
    let rig = Rig::start(STUBS, "tick.yaml", TICK).await;
    let fleet = rig.fleet(2).await;
    let killer = Killer::start(&fleet);
    let mut watch = pin!(watch_runs(&rig.client, "Tick").await);
    // Slot (Unix seconds) → the runs started for it, by execution id.
    let mut slots: RunsBy<u64> = BTreeMap::new();
    let mut stopped_at: Option<u64> = None;
    let watching = async {
        while let Some((execution, record)) = watch.next().await {
            let Some(at) = record.state.input["at"].as_u64() else {
                continue;
            };
            slots.entry(at).or_default().insert(execution, record);
            if stopped_at.is_none() && fleet.kill_count() >= KILLS {
                killer.halt();
                stopped_at = Some(workflow_node::shell::now().0 / 1000);
            }
            let Some(stop) = stopped_at else { continue };
            // Done once the runs of the slots up to a while after the killer stopped have
            // all ended, and no slot between the first and the last is missing.
            let (first, last) = (*slots.keys().next().unwrap(), *slots.keys().last().unwrap());
            let contiguous = slots.len() as u64 == last - first + 1;
            if last >= stop + 3 && contiguous && all_ended(&slots) {
                break;
            }
        }
    };
    let watched = tokio::time::timeout(Duration::from_secs(180), watching).await;
    killer.stop().await;
    fleet.kill_all();
    let report = || {
        let seen: Vec<String> = slots
            .iter()
            .map(|(at, runs)| format!("{at}: {} run(s)", runs.len()))
            .collect();
        format!(
            "kills {}; slots:\n{}\nlogs:\n{}",
            fleet.kill_count(),
            seen.join("\n"),
            rig.logs.tail()
        )
    };
    assert!(watched.is_ok(), "the slots never all ran: {}", report());
    for (at, execution, _) in one_success_each(&slots, "slot", report) {
        let task = workflow_node::definition::slot_time(at * 1000);
        let derived = names::caller_execution_id("Tick", Some("schedule:tick"), &task);
        assert_eq!(
            execution, &derived.0,
            "slot {at}'s run id comes from its slot"
        );
    }
    eprintln!(
        "{} slots, one run each, through {} kills",
        slots.len(),
        fleet.kill_count()
    );
}
