//! Schedules on a real nats-server: three replicas start one run per slot, each named by
//! its schedule and slot and shown with the schedule that made it; operators pause,
//! trigger, add and delete schedules through the workflow's nodes, and only operators
//! when the node has operator keys.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use agent_sdk::Signer;
use futures::StreamExt;
use messages::control::{ScheduleControl, WorkflowScheduleControl};
use serde_json::{json, Value};
use workflow_node::ops::refusal::RefusalKind;
use workflow_node::ops::schedules;
use workflow_node::shell::{run::names, Config, RunRecord, WorkflowNode};

use crate::support::fixtures::echo;
use crate::support::mesh::{mesh, workflows};

const STUBS: &str = concat!("agents:", echo!(),);

/// A schedule every second whose runs overlap freely (so that each slot starts one).
const TICK: &str = r#"
name: Tick
workflow:
  description: a run every second, its slot in its input
  schedules:
    - name: tick
      every: 1s
      overlap: allow_all
      input: {at: "{{schedule.time}}", unix: "{{schedule.unix}}"}
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {at: "{{workflow.input.at}}"}}
  output_mapping: {at: "{{echo.output.at}}"}
"#;

/// A paused daily schedule: only a trigger by hand starts it.
const DAILY: &str = r#"
name: Daily
workflow:
  description: a report each morning in Paris
  input_schema: {type: object, required: [day], properties: {day: {type: string}}}
  schedules:
    - {name: morning, cron: "0 8 * * *", timezone: Europe/Paris, paused: true, input: {day: "{{schedule.time}}"}}
  nodes:
    - {id: echo, type: agent, agent_name: Echo, input: {day: "{{workflow.input.day}}"}}
  output_mapping: {day: "{{echo.output.day}}"}
"#;

fn control(schedule: &str, action: ScheduleControl) -> WorkflowScheduleControl {
    WorkflowScheduleControl {
        schedule: schedule.into(),
        action,
        note: None,
        spec: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_start_one_run_per_slot_named_by_the_slot() {
    let m = mesh(STUBS, &[TICK], Config::default()).await;
    let mut others = Vec::new();
    for _ in 0..2 {
        let own = async_nats::connect(m.server.url()).await.expect("connect");
        let node = WorkflowNode::start(own, workflows(&[TICK]), Config::default());
        others.push(node.await.expect("replica"));
    }
    let js = async_nats::jetstream::new(m.client.clone());
    let runs = js.get_key_value(names::runs_bucket("mesh")).await.unwrap();
    let mut watch = runs.watch_with_history("Tick.*").await.expect("watch");
    // Every run of the schedule, by execution id, until four have succeeded.
    let mut seen: BTreeMap<String, RunRecord> = BTreeMap::new();
    let watching = async {
        while let Some(Ok(entry)) = watch.next().await {
            let Ok(record) = RunRecord::from_entry(&entry.value) else {
                continue;
            };
            let execution = entry.key.trim_start_matches("Tick.").to_string();
            seen.insert(execution, record);
            let done = seen
                .values()
                .filter(|r| r.state.status.is_terminal())
                .count();
            if done >= 4 {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), watching)
        .await
        .expect("four scheduled runs end");
    for node in others {
        node.shutdown().await;
    }
    let mut slots = BTreeSet::new();
    for (execution, record) in &seen {
        assert_eq!(
            record.caller.name.as_deref(),
            Some("schedule:tick"),
            "a run shows the schedule that made it"
        );
        let at = record.state.input["at"].as_str().expect("the slot's time");
        assert!(slots.insert(at.to_string()), "slot {at} started twice");
        let derived = names::caller_execution_id("Tick", Some("schedule:tick"), at);
        assert_eq!(execution, &derived.0, "the run id comes from the slot");
        let unix = record.state.input["unix"].as_u64().expect("unix seconds");
        let parsed = chrono::DateTime::parse_from_rfc3339(at).expect("RFC 3339");
        assert_eq!(parsed.timestamp() as u64, unix);
    }
    let ended = seen.values().filter(|r| r.state.status.is_terminal());
    for record in ended {
        assert_eq!(
            record.state.status.as_str(),
            "success",
            "{:?}",
            record.state
        );
    }
    let listed = schedules::list(
        &m.client,
        "mesh",
        Some("Tick"),
        workflow_node::shell::now().0,
    )
    .await
    .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].origin, listed[0].when.as_str()),
        ("file", "every 1s")
    );
    assert!(listed[0].counts.started >= 4, "{:?}", listed[0].counts);
    assert!(listed[0].next.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_pause_trigger_add_and_delete_schedules() {
    let boss = Signer::generate();
    let config = Config {
        operators: vec![boss.public_key().to_string()],
        ..Config::default()
    };
    let m = mesh(STUBS, &[DAILY], config).await;
    let c = &m.client;
    // Only an operator changes schedules.
    let refused = schedules::control(
        c,
        "mesh",
        "Daily",
        &control("morning", ScheduleControl::Trigger),
        None,
    )
    .await
    .expect_err("unsigned");
    assert!(refused.message.contains("operator"), "{}", refused.message);
    let stranger = Signer::generate();
    let trigger = control("morning", ScheduleControl::Trigger);
    let refused = schedules::control(c, "mesh", "Daily", &trigger, Some(&stranger)).await;
    assert!(
        refused.is_err(),
        "a key that is not an operator's is refused"
    );
    // A paused schedule is still started by hand, with its input from the template.
    let text = schedules::control(c, "mesh", "Daily", &trigger, Some(&boss))
        .await
        .expect("triggered");
    let execution = text.rsplit("run ").next().expect("the run id").to_string();
    let js = async_nats::jetstream::new(c.clone());
    let bucket = js.get_key_value(names::runs_bucket("mesh")).await.unwrap();
    let mut watch = bucket
        .watch_with_history(format!("Daily.{execution}"))
        .await
        .expect("watch");
    let ended = async {
        while let Some(Ok(entry)) = watch.next().await {
            let Ok(record) = RunRecord::from_entry(&entry.value) else {
                continue;
            };
            if record.state.status.is_terminal() {
                return record;
            }
        }
        panic!("the watch ended")
    };
    let record = tokio::time::timeout(Duration::from_secs(30), ended)
        .await
        .expect("the triggered run ends");
    assert_eq!(record.state.status.as_str(), "success");
    assert_eq!(record.caller.name.as_deref(), Some("schedule:morning"));
    assert!(record.state.input["day"].is_string());
    // Pause and resume carry a note; a second pause is refused.
    let mut resume = control("morning", ScheduleControl::Resume);
    resume.note = Some("back from holiday".into());
    schedules::control(c, "mesh", "Daily", &resume, Some(&boss))
        .await
        .expect("resumed");
    let again = schedules::control(c, "mesh", "Daily", &resume, Some(&boss)).await;
    assert_eq!(again.expect_err("not paused").kind, RefusalKind::Conflict);
    let now = workflow_node::shell::now().0;
    let listed = schedules::list(c, "mesh", Some("Daily"), now)
        .await
        .unwrap();
    assert_eq!(listed[0].note.as_deref(), Some("back from holiday"));
    assert!(!listed[0].paused);
    assert_eq!(listed[0].when, "cron '0 8 * * *' (Europe/Paris)");
    let next = listed[0].next.as_deref().expect("a next fire time");
    assert!(next.ends_with(":00:00Z"), "{next}");
    assert_eq!(listed[0].counts.started, 1);
    // An added schedule is checked like a file's, every problem at once.
    let mut add = control("hourly", ScheduleControl::Add);
    add.spec = Some(json!({"cron": "61 * * * *", "overlap": "sometimes", "input": "{{input.x}}"}));
    let refused = schedules::control(c, "mesh", "Daily", &add, Some(&boss)).await;
    let message = refused.expect_err("invalid").message;
    for part in ["cron", "overlap", "input"] {
        assert!(message.contains(part), "{part} not in {message}");
    }
    add.spec = Some(json!({"every": "1h", "input": {"day": "{{schedule.time}}"}}));
    schedules::control(c, "mesh", "Daily", &add, Some(&boss))
        .await
        .expect("added");
    let listed = schedules::list(c, "mesh", Some("Daily"), now)
        .await
        .unwrap();
    let names: Vec<(&str, &str)> = listed.iter().map(|s| (s.name.as_str(), s.origin)).collect();
    assert_eq!(names, vec![("hourly", "added"), ("morning", "file")]);
    assert_eq!(listed[0].added_by.as_deref(), Some(boss.public_key()));
    // A file's schedule is not deleted; an added one is.
    let delete = control("morning", ScheduleControl::Delete);
    let refused = schedules::control(c, "mesh", "Daily", &delete, Some(&boss)).await;
    assert!(refused
        .expect_err("declared")
        .message
        .contains("declared in the file"));
    let delete = control("hourly", ScheduleControl::Delete);
    schedules::control(c, "mesh", "Daily", &delete, Some(&boss))
        .await
        .expect("deleted");
    let listed = schedules::list(c, "mesh", Some("Daily"), now)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let _: Value = json!(listed);
}
