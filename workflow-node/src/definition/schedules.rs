//! `workflow.schedules`: runs that start on a clock. Each schedule names its slots (a cron
//! expression read in an IANA time zone, or a fixed interval since the Unix epoch), the
//! input each run gets (a template over `schedule.*`), what to do when a slot comes while
//! the last run still goes (the overlap policy), how late a missed slot may still start
//! (the catch-up window) and a jitter. The slot arithmetic is here, pure: every replica
//! computes the same slots from the same schedule, whatever its host's zone data, because
//! the zones are compiled in (`chrono-tz`).

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, Value};
use workflow_expr::Template;

use super::fields::{named_item, Fields};
use super::problem::Sink;

/// The most schedules one workflow declares.
pub const MAX_SCHEDULES: usize = 64;

/// The shortest interval: a slot every second at most.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The catch-up window when a schedule gives none: a slot missed by less than this still
/// starts when a replica comes back.
pub const DEFAULT_CATCHUP_WINDOW: Duration = Duration::from_secs(60);

/// What a schedule's `input` template may name below `schedule.`.
const SCHEDULE_FIELDS: [&str; 4] = ["name", "time", "unix", "manual"];

/// One schedule of a workflow.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// `name`: unique in the workflow, a NATS token (it names the runs' caller).
    pub name: String,
    /// When its slots are.
    pub when: When,
    /// `input`: the run's input, resolved with `schedule.name`, `schedule.time` (RFC 3339,
    /// UTC), `schedule.unix` (seconds) and `schedule.manual` (true for a trigger by
    /// hand); `{}` when absent.
    pub input: Option<Template>,
    /// `overlap` (default `skip`).
    pub overlap: Overlap,
    /// `catchup_window` (default [`DEFAULT_CATCHUP_WINDOW`]).
    pub catchup_window: Duration,
    /// `jitter` (default none): each slot starts up to this much later, by an offset
    /// derived from the schedule and the slot (every replica picks the same one).
    pub jitter: Duration,
    /// `paused` (default false): whether it starts paused (until `schedules resume`).
    pub paused: bool,
    /// The schedule as written (for the card and `schedules list`).
    pub source: Value,
}

/// When a schedule's slots are.
#[derive(Debug, Clone)]
pub enum When {
    /// `cron` with `timezone` (default UTC): 5 fields, or 6 with seconds first.
    Cron {
        /// The parsed expression.
        cron: Box<croner::Cron>,
        /// The zone its fields are read in.
        zone: chrono_tz::Tz,
    },
    /// `every`: one slot each interval, counted from the Unix epoch.
    Every(Duration),
}

/// A slot due, from [`Schedule::first_due`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The slot, Unix milliseconds.
    pub slot: u64,
    /// Slots before it, too old to start.
    pub missed: u64,
    /// Whether it is within the catch-up window (else it is missed too).
    pub in_window: bool,
}

/// What a slot does while the schedule's previous run still goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// `skip`: the slot starts nothing.
    Skip,
    /// `buffer_one`: the slot starts once the previous run ends; one slot is kept, later
    /// ones are dropped.
    BufferOne,
    /// `allow_all`: the slot starts at once.
    AllowAll,
    /// `cancel_other`: the previous run is cancelled, and the slot starts once it ended.
    CancelOther,
}

impl Overlap {
    /// The spelling in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::AllowAll => "allow_all",
            Overlap::CancelOther => "cancel_other",
        }
    }

    fn parse(s: &str) -> Option<Overlap> {
        [
            Overlap::Skip,
            Overlap::BufferOne,
            Overlap::AllowAll,
            Overlap::CancelOther,
        ]
        .into_iter()
        .find(|o| o.as_str() == s || o.as_str().replace('_', "-") == s)
    }
}

impl Schedule {
    /// The first slot strictly after `after_ms` (Unix milliseconds), in Unix milliseconds;
    /// `None` when the expression has no later slot.
    pub fn next_slot(&self, after_ms: u64) -> Option<u64> {
        match &self.when {
            When::Every(every) => {
                let every = u64::try_from(every.as_millis()).ok()?.max(1);
                Some((after_ms / every + 1) * every)
            }
            When::Cron { cron, zone } => {
                let after = millis_to_utc(after_ms)?.with_timezone(zone);
                let next = cron.find_next_occurrence(&after, false).ok()?;
                u64::try_from(next.with_timezone(&Utc).timestamp_millis()).ok()
            }
        }
    }

    /// The first slot after `after_ms` that is due at `now_ms` (Unix milliseconds) and
    /// not older than `window` (plus its jitter), with how many slots before it were
    /// older (missed); `None` when no slot after `after_ms` has come. When every slot that
    /// came is too old, the last of them is returned with `in_window` false.
    pub fn first_due(&self, after_ms: u64, now_ms: u64, window: Duration) -> Option<Due> {
        let window = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let too_old =
            |slot: u64| now_ms.saturating_sub(slot) > window.saturating_add(self.jitter_of(slot));
        let mut slot = self.next_slot(after_ms).filter(|s| *s <= now_ms)?;
        let mut missed = 0;
        // An interval jumps to the slots near the window's start, a cron walks.
        if let When::Every(every) = &self.when {
            let every = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
            let oldest = now_ms.saturating_sub(window) / every * every;
            if oldest > slot {
                missed = (oldest - slot) / every;
                slot = oldest;
            }
        }
        let mut steps = 0u32;
        while too_old(slot) {
            match self.next_slot(slot).filter(|s| *s <= now_ms) {
                Some(next) if steps < 100_000 => {
                    missed += 1;
                    slot = next;
                    steps += 1;
                }
                _ => {
                    return Some(Due {
                        slot,
                        missed: missed + 1,
                        in_window: false,
                    })
                }
            }
        }
        Some(Due {
            slot,
            missed,
            in_window: true,
        })
    }

    /// The jitter of `slot`: the same on every replica (a hash of the schedule's name and
    /// the slot), below [`Schedule::jitter`].
    pub fn jitter_of(&self, slot: u64) -> u64 {
        let jitter = u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX);
        if jitter == 0 {
            return 0;
        }
        use sha2::Digest;
        let digest = sha2::Sha256::digest(format!("{}\0{slot}", self.name).as_bytes());
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(eight) % jitter
    }

    /// The input of the run of `slot`: the template resolved over `schedule.*`.
    pub fn input_for(&self, slot: u64, manual: bool) -> Result<Value, String> {
        let Some(template) = &self.input else {
            return Ok(Value::Object(Map::new()));
        };
        let mut schedule = Map::new();
        schedule.insert("name".into(), Value::String(self.name.clone()));
        schedule.insert("time".into(), Value::String(slot_time(slot)));
        schedule.insert("unix".into(), Value::from(slot / 1000));
        schedule.insert("manual".into(), Value::Bool(manual));
        let mut scope = Map::new();
        scope.insert("schedule".into(), Value::Object(schedule));
        template.resolve(&scope).map_err(|e| e.to_string())
    }
}

/// `slot` (Unix milliseconds) as RFC 3339 in UTC, to the second (`2026-11-28T08:00:00Z`).
pub fn slot_time(slot: u64) -> String {
    millis_to_utc(slot)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| slot.to_string())
}

fn millis_to_utc(ms: u64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(i64::try_from(ms).ok()?).single()
}

/// Reads `schedules` from the workflow block: absent is none.
pub(super) fn parse_schedules(w: &mut Fields<'_>, sink: &mut Sink) -> Vec<Schedule> {
    super::fields::named_list(
        w,
        sink,
        ("schedules", "schedule", MAX_SCHEDULES),
        parse_one,
        |e: &Schedule| e.name.as_str(),
    )
}

/// Reads one schedule as `schedules add` sends it (the fields of one item of a file's
/// list); every problem at once.
pub fn parse_schedule(value: &Value) -> Result<Schedule, Vec<super::Problem>> {
    let mut sink = Sink::new(None);
    if let Err(e) = crate::limits::check_depth("the schedule", value) {
        sink.push(None, "", e.to_string());
        return Err(sink.into_problems());
    }
    match parse_one(value, "", &mut sink) {
        Some(s) if sink.is_empty() => Ok(s),
        _ => Err(sink.into_problems()),
    }
}

/// Reads one schedule (from a file's list, or as `schedules add` sends it); `prefix` starts
/// the field names of its problems.
fn parse_one(item: &Value, prefix: &str, sink: &mut Sink) -> Option<Schedule> {
    let expected = "'name' and 'cron' or 'every'";
    let (mut f, name) = named_item(item, prefix, sink, ("schedule", expected))?;
    let when = parse_when(&mut f, sink);
    let input = f.template(sink, "input");
    if let Some(t) = &input {
        check_input_paths(&f, sink, t);
    }
    let overlap = match f.string(sink, "overlap", &[]) {
        None => Some(Overlap::Skip),
        Some(s) => Overlap::parse(&s).or_else(|| {
            f.problem(
                sink,
                "overlap",
                format!(
                    "'{s}' is not an overlap policy: skip, buffer_one, allow_all or cancel_other"
                ),
            );
            None
        }),
    };
    let catchup_window = f.duration(sink, "catchup_window", false);
    let jitter = f.duration(sink, "jitter", false);
    let paused = f.bool(sink, "paused");
    f.finish(sink, "a schedule", &[]);
    let (name, when, overlap) = (name?, when?, overlap?);
    Some(Schedule {
        name,
        when,
        input,
        overlap,
        catchup_window: catchup_window.unwrap_or(DEFAULT_CATCHUP_WINDOW),
        jitter: jitter.unwrap_or_default(),
        paused: paused.unwrap_or(false),
        source: item.clone(),
    })
}

/// `cron` (with `timezone`) or `every`: exactly one.
fn parse_when(f: &mut Fields<'_>, sink: &mut Sink) -> Option<When> {
    let cron = f.string(sink, "cron", &[]);
    let zone = f.string(sink, "timezone", &["time_zone"]);
    let every = f.duration(sink, "every", true);
    let zone = match zone {
        None => Some(chrono_tz::UTC),
        Some(z) => z.parse::<chrono_tz::Tz>().ok().or_else(|| {
            f.problem(
                sink,
                "timezone",
                format!("'{z}' is not an IANA time zone (such as Europe/Paris or UTC)"),
            );
            None
        }),
    };
    match (cron, every) {
        (Some(_), Some(_)) => {
            f.problem(sink, "every", "give either 'cron' or 'every', not both");
            None
        }
        (None, None) => {
            f.problem(
                sink,
                "cron",
                "missing field: a schedule needs 'cron' or 'every'",
            );
            None
        }
        (None, Some(every)) if every < MIN_INTERVAL => {
            f.problem(sink, "every", "must be at least 1s");
            None
        }
        (None, Some(every)) => Some(When::Every(every)),
        (Some(text), None) => {
            let parsed = croner::parser::CronParser::builder()
                .seconds(croner::parser::Seconds::Optional)
                .build()
                .parse(&text);
            match parsed {
                Ok(cron) => zone.map(|zone| When::Cron {
                    cron: Box::new(cron),
                    zone,
                }),
                Err(e) => {
                    f.problem(
                        sink,
                        "cron",
                        format!("'{text}' is not a cron expression: {e}"),
                    );
                    None
                }
            }
        }
    }
}

/// An input template names only `schedule.<field>`.
fn check_input_paths(f: &Fields<'_>, sink: &mut Sink, template: &Template) {
    for p in template.problems() {
        f.problem(sink, "input", p);
    }
    for path in template.paths() {
        let field = match path.rest.first() {
            Some(workflow_expr::Segment::Key(k)) => Some(k.as_str()),
            _ => None,
        };
        if path.root != "schedule" || !field.is_some_and(|k| SCHEDULE_FIELDS.contains(&k)) {
            let fields = SCHEDULE_FIELDS.join(", schedule.");
            f.problem(
                sink,
                "input",
                format!("a schedule's input names only schedule.{fields}; found '{path}'"),
            );
        }
    }
}

#[cfg(test)]
mod tests;
