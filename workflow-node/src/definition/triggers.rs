//! `workflow.triggers`: runs started by messages. Each trigger reads messages on a NATS
//! subject (captured for it in a stream the node makes) or from an existing JetStream
//! stream (with a subject filter), through a durable consumer, so nothing is lost while
//! no replica runs. A message is an *event* to the trigger's templates:
//! `event.subject`, `event.payload` (the JSON payload, or its text when it is not JSON),
//! `event.headers` (name → first value) and `event.sequence` (its stream sequence).
//!
//! A trigger with `signal` and `key` starts nothing: its event is that signal for the run
//! whose wait node waits under the key (see the `wait` node).

use serde_json::{Map, Value};
use workflow_expr::{Condition, Template};

use super::fields::{named_item, Fields};
use super::parse::is_token;
use super::problem::Sink;
use super::webhooks::{parse_webhook, Webhook};

/// The most triggers one workflow declares.
pub const MAX_TRIGGERS: usize = 16;

/// How many times a message is taken before it is parked as a dead letter, by default.
pub const DEFAULT_MAX_DELIVERIES: u64 = 5;

/// What a trigger's templates may name below `event.`.
const EVENT_FIELDS: [&str; 4] = ["subject", "payload", "headers", "sequence"];

/// What a webhook's templates may name below `event.` (a delivery has no subject or
/// sequence).
const HOOK_FIELDS: [&str; 2] = ["payload", "headers"];

/// One event trigger of a workflow.
#[derive(Debug, Clone)]
pub struct Trigger {
    /// `name`: unique in the workflow, a NATS token (it names the consumer and the runs'
    /// caller, `trigger:{name}`).
    pub name: String,
    /// `stream`: an existing stream to read; `None` for a stream the node makes for
    /// `subject`.
    pub stream: Option<String>,
    /// `subject`: what to read (the filter, with `stream`); wildcards allowed.
    pub subject: Option<String>,
    /// `condition`: an event for which it is false starts nothing.
    pub condition: Option<Condition>,
    /// `input`: the run's input (default: the event's payload).
    pub input: Option<Template>,
    /// `dedup_key`: the run's task id; the same key starts no second run (default: the
    /// stream and sequence of the message, so a redelivery starts none).
    pub dedup_key: Option<Template>,
    /// `max_deliveries` (default [`DEFAULT_MAX_DELIVERIES`]): takes before a message that
    /// keeps failing is parked as a dead letter.
    pub max_deliveries: u64,
    /// `webhook` (with its secret): runs started by signed HTTP deliveries to
    /// `/hooks/{name}` instead of messages; then `stream` and `subject` are `None`.
    pub webhook: Option<Webhook>,
    /// `signal` and `key`: the event is this signal for the run whose wait node waits
    /// under the key, instead of a run's start (`input` is its payload, `dedup_key` its
    /// id).
    pub signal: Option<RouteSignal>,
}

/// A trigger that routes its events to a waiting run as a signal.
#[derive(Debug, Clone)]
pub struct RouteSignal {
    /// `signal`: the signal's name (a wait node's `signal`).
    pub name: String,
    /// `key`: the key the run's wait node waits under (its `correlation`, resolved).
    pub key: Template,
}

impl Trigger {
    /// The scope of an event, for the trigger's templates.
    pub fn scope(
        subject: &str,
        payload: &[u8],
        headers: Map<String, Value>,
        sequence: u64,
    ) -> Map<String, Value> {
        let payload = serde_json::from_slice::<Value>(payload)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(payload).into_owned()));
        let mut event = Map::new();
        event.insert("subject".into(), Value::String(subject.to_string()));
        event.insert("payload".into(), payload);
        event.insert("headers".into(), Value::Object(headers));
        event.insert("sequence".into(), Value::from(sequence));
        let mut scope = Map::new();
        scope.insert("event".into(), Value::Object(event));
        scope
    }
}

impl Trigger {
    /// The scope of a webhook's delivery: `event.payload` (the JSON body) and
    /// `event.headers` (lower-case name → value).
    pub fn hook_scope(payload: Value, headers: Map<String, Value>) -> Map<String, Value> {
        let mut event = Map::new();
        event.insert("payload".into(), payload);
        event.insert("headers".into(), Value::Object(headers));
        let mut scope = Map::new();
        scope.insert("event".into(), Value::Object(event));
        scope
    }
}

/// Reads `triggers` from the workflow block: absent is none.
pub(super) fn parse_triggers(w: &mut Fields<'_>, sink: &mut Sink) -> Vec<Trigger> {
    super::fields::named_list(
        w,
        sink,
        ("triggers", "trigger", MAX_TRIGGERS),
        parse_one,
        |e: &Trigger| e.name.as_str(),
    )
}

fn parse_one(item: &Value, prefix: &str, sink: &mut Sink) -> Option<Trigger> {
    let expected = "'name' and 'subject' or 'stream'";
    let (mut f, name) = named_item(item, prefix, sink, ("trigger", expected))?;
    let stream = f.string(sink, "stream", &[]);
    if let Some(s) = stream.as_deref().filter(|s| !is_token(s)) {
        f.problem(sink, "stream", format!("'{s}' is not a stream name"));
    }
    let subject = f.string(sink, "subject", &[]);
    if let Some(s) = subject.as_deref().filter(|s| !valid_subject(s)) {
        f.problem(sink, "subject", format!("'{s}' is not a NATS subject (tokens split by '.', '*' and a last '>' as wildcards)"));
    }
    let (is_hook, webhook) = parse_webhook(&mut f, sink);
    if is_hook {
        for (given, field) in [(stream.is_some(), "stream"), (subject.is_some(), "subject")] {
            if given {
                let message = "a webhook trigger reads HTTP deliveries, not a stream or subject";
                f.problem(sink, field, message);
            }
        }
    } else if stream.is_none() && subject.is_none() {
        f.problem(
            sink,
            "subject",
            "missing field: a trigger needs 'subject', 'stream' or both",
        );
    }
    let condition = f.condition(sink, "condition", &[]);
    let input = f.template(sink, "input");
    let dedup_key = f.template(sink, "dedup_key");
    let signal = f.string(sink, "signal", &[]);
    if let Some(n) = signal.as_deref().filter(|n| !super::valid_signal_name(n)) {
        f.problem(sink, "signal", format!("'{n}' is not a signal name"));
    }
    if is_hook && signal.is_some() {
        let message = "a webhook trigger starts runs: routing to a waiting run is for event \
                       triggers (publish the delivery on a subject one reads)";
        f.problem(sink, "signal", message);
    }
    let key = f.template(sink, "key");
    match (&signal, &key) {
        (Some(_), None) => f.problem(
            sink,
            "key",
            "missing field: a trigger with 'signal' needs 'key' (which run's wait takes it)",
        ),
        (None, Some(_)) => f.problem(sink, "key", "a 'key' needs 'signal'"),
        _ => {}
    }
    let paths = condition.iter().flat_map(|c| c.paths());
    let paths = paths.chain(key.iter().flat_map(|t| t.paths()));
    let paths = paths.chain(input.iter().flat_map(|t| t.paths()));
    let paths: Vec<_> = paths
        .chain(dedup_key.iter().flat_map(|t| t.paths()))
        .collect();
    let allowed: &[&str] = if is_hook { &HOOK_FIELDS } else { &EVENT_FIELDS };
    for path in paths {
        let field = match path.rest.first() {
            Some(workflow_expr::Segment::Key(k)) => Some(k.as_str()),
            _ => None,
        };
        if path.root != "event" || !field.is_some_and(|k| allowed.contains(&k)) {
            let fields = allowed.join(", event.");
            f.problem(
                sink,
                "input",
                format!("a trigger's templates name only event.{fields}; found '{path}'"),
            );
        }
    }
    let max_deliveries = f.int(sink, "max_deliveries", 1);
    if is_hook && max_deliveries.is_some() {
        let message = "a webhook's sender retries: it has no max_deliveries";
        f.problem(sink, "max_deliveries", message);
    }
    let max_deliveries = max_deliveries.unwrap_or(DEFAULT_MAX_DELIVERIES);
    f.finish(sink, "a trigger", &[]);
    let name = name?;
    if is_hook && webhook.is_none() {
        return None;
    }
    Some(Trigger {
        name,
        stream,
        subject,
        condition,
        input,
        dedup_key,
        max_deliveries: max_deliveries.min(100),
        webhook,
        signal: match (signal, key) {
            (Some(name), Some(key)) => Some(RouteSignal { name, key }),
            _ => None,
        },
    })
}

/// A subject a consumer may filter on.
fn valid_subject(s: &str) -> bool {
    let tokens: Vec<&str> = s.split('.').collect();
    s.len() <= 256
        && tokens.iter().enumerate().all(|(i, t)| {
            !t.is_empty()
                && (*t == "*"
                    || (*t == ">" && i == tokens.len() - 1)
                    || t.chars()
                        .all(|c| c.is_ascii_graphic() && c != '*' && c != '>'))
        })
}

#[cfg(test)]
mod tests {
    use crate::definition::parse_str;

    fn problems(triggers: &str) -> String {
        let text = format!(
            "name: T\nworkflow:\n  description: d\n  triggers:\n{triggers}  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
        );
        let p = parse_str(&text, "t.yaml").unwrap_err();
        p.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_trigger_problem_is_reported_at_once() {
        let text = problems(
            "    - {name: a}\n    - {name: b, subject: 'a..b', stream: 'x y'}\n    - {name: c, subject: x, input: '{{input.x}}', condition: '{{event.payload.n >'}\n    - {name: c, subject: y}\n    - {name: d, subject: 'a.>.b', max_deliveries: 0, colour: red}\n",
        );
        for expected in [
            "triggers[0].subject: missing field",
            "triggers[1].subject: 'a..b' is not a NATS subject",
            "triggers[1].stream: 'x y' is not a stream name",
            "triggers[2].input: a trigger's templates name only event.",
            "triggers[2].condition",
            "triggers[3].name: trigger 'c' is declared twice",
            "triggers[4].subject",
            "triggers[4].max_deliveries",
            "triggers[4].colour",
        ] {
            assert!(text.contains(expected), "{expected} not in:\n{text}");
        }
    }

    #[test]
    fn every_webhook_problem_is_reported_at_once() {
        let text = problems(
            "    - {name: a, webhook: gitlab, secret_env: S}\n    - {name: b, webhook: github, secret: hunter2, subject: x}\n    - {name: c, webhook: github, secret_env: S, secret_file: /f, tolerance: 1m, max_deliveries: 2}\n    - {name: d, webhook: stripe, secret_env: '1X', input: '{{event.subject}}'}\n    - {name: e, subject: x, secret_env: S}\n    - {name: '<img src=x onerror=alert(1)>', webhook: github, secret_env: S}\n    - {name: f, webhook: github, secret_env: S, signal: paid, key: '{{event.payload.id}}'}\n",
        );
        for expected in [
            "triggers[0].webhook: 'gitlab' is not a signature scheme",
            "triggers[1].secret: a webhook's secret is never written in the file",
            "triggers[1].subject: a webhook trigger reads HTTP deliveries",
            "triggers[1].secret_env: missing field",
            "triggers[2].secret_env: give secret_env or secret_file, not both",
            "triggers[2].tolerance: a github signature has no timestamp",
            "triggers[2].max_deliveries",
            "triggers[3].secret_env: '1X' is not an environment variable's name",
            "triggers[3].input: a trigger's templates name only event.payload, event.headers",
            "triggers[4].secret_env: only a webhook trigger has a secret",
            // Markup never becomes a name the pages or a hook's URL would carry.
            "triggers[5].name: '<img src=x onerror=alert(1)>' is not a trigger name",
            "triggers[6].signal: a webhook trigger starts runs",
        ] {
            assert!(text.contains(expected), "{expected} not in:\n{text}");
        }
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn a_webhook_is_read_with_its_secret_source() {
        let text = "name: T\nworkflow:\n  description: d\n  triggers:\n    - {name: pay, webhook: stripe, secret_file: /run/s, tolerance: 2m, dedup_key: '{{event.payload.id}}'}\n  nodes:\n    - {id: a, type: agent, agent_name: A}\n  output_mapping: {a: \"{{a.output}}\"}\n";
        let wf = parse_str(text, "t.yaml").unwrap();
        let hook = wf.triggers[0].webhook.as_ref().unwrap();
        assert_eq!(hook.scheme, crate::definition::Scheme::Stripe);
        assert_eq!(hook.tolerance.as_secs(), 120);
        let plan = crate::visual::plan(&wf).to_string();
        let line = "pay: webhook POST /hooks/pay (stripe signature, secret from file /run/s); one run per {{event.payload.id}}";
        assert!(plan.contains(line), "{plan}");
    }

    #[test]
    fn the_plan_shows_each_trigger_in_words() {
        let text = "name: T\nworkflow:\n  description: d\n  triggers:\n    - {name: big, stream: ORDERS, subject: orders.created, condition: '{{event.payload.n}} > 1', dedup_key: '{{event.payload.id}}'}\n  nodes:\n    - {id: a, type: agent, agent_name: A}\n  output_mapping: {a: \"{{a.output}}\"}\n";
        let wf = parse_str(text, "t.yaml").unwrap();
        let plan = crate::visual::plan(&wf).to_string();
        let line = "big: stream ORDERS, subject orders.created; if {{event.payload.n}} > 1; one run per {{event.payload.id}}; parked after 5 deliveries";
        assert!(plan.contains(line), "{plan}");
    }

    #[test]
    fn an_event_is_read_as_json_or_text() {
        let scope = super::Trigger::scope("s.x", b"{\"n\": 1}", serde_json::Map::new(), 7);
        assert_eq!(scope["event"]["payload"]["n"], 1);
        assert_eq!(scope["event"]["sequence"], 7);
        let scope = super::Trigger::scope("s.x", b"plain", serde_json::Map::new(), 7);
        assert_eq!(scope["event"]["payload"], "plain");
    }
}
