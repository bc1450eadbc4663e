//! The schedule fields read from a file, and the slots they give (time zones and daylight
//! saving time included).

use std::time::Duration;

use crate::definition::{parse_str, Due, Overlap, Problem, Workflow};

fn with(schedules: &str) -> Result<Workflow, Vec<Problem>> {
    parse_str(
        &format!(
            "name: S\nworkflow:\n  description: d\n  schedules:\n{schedules}  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
        ),
        "s.yaml",
    )
}

fn problems(schedules: &str) -> String {
    let p = with(schedules).unwrap_err();
    p.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// 2026-03-29 in Unix milliseconds at `h:m` UTC.
fn march_29(h: u64, m: u64) -> u64 {
    (1_774_742_400 + h * 3600 + m * 60) * 1000
}

#[test]
fn a_cron_schedule_reads_its_zone_and_gives_its_slots() {
    let wf = with(
        "    - {name: nightly, cron: '30 2 * * *', timezone: Europe/Paris, overlap: buffer_one,\n       input: {day: '{{schedule.time}}', by: '{{schedule.name}}'}, catchup_window: 10m, jitter: 30s}\n",
    )
    .unwrap();
    let s = &wf.schedules[0];
    assert_eq!(s.overlap, Overlap::BufferOne);
    assert_eq!(s.catchup_window.as_secs(), 600);
    // 02:30 in Paris on 2026-03-28 is 01:30 UTC (winter time).
    let before = march_29(0, 0) - 86_400_000;
    assert_eq!(s.next_slot(before), Some(march_29(1, 30) - 86_400_000));
    // On the spring-forward day (2026-03-29) 02:30 does not exist: croner starts it at the
    // first valid time after it, 03:00 local = 01:00 UTC, the same day.
    assert_eq!(s.next_slot(march_29(0, 0)), Some(march_29(1, 0)));
    let input = s.input_for(march_29(1, 0), false).unwrap();
    assert_eq!(input["day"], "2026-03-29T01:00:00Z");
    assert_eq!(input["by"], "nightly");
    assert!(s.jitter_of(march_29(1, 0)) < 30_000);
    assert_eq!(s.jitter_of(march_29(1, 0)), s.jitter_of(march_29(1, 0)));
}

#[test]
fn an_interval_counts_from_the_epoch_and_the_first_due_slot_is_within_the_window() {
    let wf = with("    - {name: tick, every: 10s}\n").unwrap();
    let s = &wf.schedules[0];
    assert_eq!(s.overlap, Overlap::Skip);
    assert_eq!(s.next_slot(25_000), Some(30_000));
    let window = Duration::from_secs(20);
    let due = |after, now| s.first_due(after, now, window);
    assert_eq!(due(70_000, 71_000), None);
    // Every slot within the window comes in turn, the older ones are counted missed.
    let first = Due {
        slot: 60_000,
        missed: 3,
        in_window: true,
    };
    assert_eq!(due(20_000, 71_000), Some(first));
    assert_eq!(
        due(60_000, 71_000),
        Some(Due {
            slot: 70_000,
            missed: 0,
            in_window: true
        })
    );
    let wf = with("    - {name: m, cron: '*/5 * * * *'}\n").unwrap();
    let s = &wf.schedules[0];
    let gone = s.first_due(0, 16 * 60_000 + 1, Duration::from_secs(60));
    assert_eq!(
        gone,
        Some(Due {
            slot: 15 * 60_000,
            missed: 3,
            in_window: false
        })
    );
    let caught = s.first_due(0, 16 * 60_000, Duration::from_secs(600));
    assert_eq!(
        caught,
        Some(Due {
            slot: 10 * 60_000,
            missed: 1,
            in_window: true
        })
    );
    assert_eq!(s.input_for(0, true).unwrap(), serde_json::json!({}));
}

#[test]
fn every_schedule_problem_is_reported_at_once() {
    let text = problems(
        "    - {name: a, cron: 'not cron'}\n    - {name: b, every: 1s, cron: '* * * * *'}\n    - {name: 'c d', every: 0s}\n    - {name: e, cron: '0 * * * *', timezone: Mars/Olympus, overlap: sometimes}\n    - {name: f, every: 5s, input: '{{input.x}}'}\n    - {name: f, every: 5s, colour: red}\n    - 3\n",
    );
    for expected in [
        "schedules[0].cron",
        "is not a cron expression",
        "schedules[1].every: give either 'cron' or 'every'",
        "schedules[2].name",
        "schedules[2].every: must be greater than zero",
        "schedules[3].timezone: 'Mars/Olympus' is not an IANA time zone",
        "schedules[3].overlap: 'sometimes' is not an overlap policy",
        "schedules[4].input: a schedule's input names only schedule.",
        "schedules[5].colour",
        "schedules[6]: expected a mapping",
    ] {
        assert!(text.contains(expected), "{expected} not in:\n{text}");
    }
    let text = problems("    - {name: a, every: 5s}\n    - {name: a, every: 6s}\n");
    assert!(text.contains("schedule 'a' is declared twice"), "{text}");
}

#[test]
fn the_plan_shows_each_schedule_in_words() {
    let wf = with(
        "    - {name: nightly, cron: '30 2 * * *', timezone: Europe/Paris, jitter: 30s, paused: true}\n    - {name: tick, every: 90s, overlap: cancel_other, input: {at: '{{schedule.time}}'}}\n",
    )
    .unwrap();
    let text = crate::visual::plan(&wf).to_string();
    assert!(
        text.contains("Schedules (runs started on a clock):"),
        "{text}"
    );
    assert!(
        text.contains("nightly: cron '30 2 * * *' in Europe/Paris; overlap skip; catch-up 1m; jitter 30s; paused"),
        "{text}"
    );
    assert!(
        text.contains(
            "tick: every 1m30s; overlap cancel_other; catch-up 1m; input from a template"
        ),
        "{text}"
    );
}
