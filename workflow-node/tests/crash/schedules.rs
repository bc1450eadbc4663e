//! Crash test of schedules with real processes: two `workflow-node serve` replicas of a
//! workflow with a schedule every second, and a killer that `kill -9`s a random replica
//! every 300–700 ms (at fire times among others: between a decision's commit and its
//! start, between the start and clearing it) and starts a new one. Every slot from the
//! first run on must start exactly one run: none lost (the slots are contiguous), none
//! started twice (one run per slot, its id derived from the slot).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use workflow_node::shell::{run::names, RunRecord};

use crate::support;
use crate::support::crash::replicas::{write_file, Fleet, Logs, Spawner};
use crate::support::crash::stubs;

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
    let _machine = support::process::alone().await;
    let server = test_harness::nats();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let _stubs = stubs(&client, dir.path()).await;
    let logs = Logs::default();
    let spawner = Spawner {
        workflow_file: write_file(dir.path(), "tick.yaml", TICK),
        ack_wait: 1.0,
        stream_replicas: 1,
        logs: logs.clone(),
    };
    let fleet = Fleet::start(spawner, vec![server.url()], 2).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let killer = tokio::spawn(fleet.clone().run_killer(
        (Duration::from_millis(300), Duration::from_millis(700)),
        stop_rx,
    ));
    let js = async_nats::jetstream::new(client.clone());
    let runs = js.get_key_value(names::runs_bucket("mesh")).await.unwrap();
    let mut watch = runs.watch_with_history("Tick.*").await.expect("watch");
    // Slot (Unix seconds) → the runs started for it, by execution id.
    let mut slots: BTreeMap<u64, BTreeMap<String, RunRecord>> = BTreeMap::new();
    let mut stopped_at: Option<u64> = None;
    let watching = async {
        while let Some(Ok(entry)) = watch.next().await {
            let Ok(record) = serde_json::from_slice::<RunRecord>(&entry.value) else {
                continue;
            };
            let Some(at) = record.state.input["at"].as_u64() else {
                continue;
            };
            let execution = entry.key.trim_start_matches("Tick.").to_string();
            slots.entry(at).or_default().insert(execution, record);
            if stopped_at.is_none() && fleet.kill_count() >= KILLS {
                let _ = stop_tx.send(true);
                stopped_at = Some(workflow_node::shell::now().0 / 1000);
            }
            let Some(stop) = stopped_at else { continue };
            // Done once the runs of the slots up to a while after the killer stopped have
            // all ended, and no slot between the first and the last is missing.
            let (first, last) = (*slots.keys().next().unwrap(), *slots.keys().last().unwrap());
            let contiguous = slots.len() as u64 == last - first + 1;
            let ended = slots
                .values()
                .flat_map(|runs| runs.values())
                .all(|r| r.state.status.is_terminal());
            if last >= stop + 3 && contiguous && ended {
                break;
            }
        }
    };
    let watched = tokio::time::timeout(Duration::from_secs(180), watching).await;
    let _ = stop_tx.send(true);
    let _ = killer.await;
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
            logs.tail()
        )
    };
    assert!(watched.is_ok(), "the slots never all ran: {}", report());
    for (at, runs) in &slots {
        assert_eq!(
            runs.len(),
            1,
            "slot {at} started {} runs: {}",
            runs.len(),
            report()
        );
        for (execution, record) in runs {
            assert_eq!(
                record.state.status.as_str(),
                "success",
                "slot {at}: {:?}",
                record.state
            );
            let task = workflow_node::definition::slot_time(at * 1000);
            let derived = names::caller_execution_id("Tick", Some("schedule:tick"), &task);
            assert_eq!(
                execution, &derived.0,
                "slot {at}'s run id comes from its slot"
            );
        }
    }
    eprintln!(
        "{} slots, one run each, through {} kills",
        slots.len(),
        fleet.kill_count()
    );
}
