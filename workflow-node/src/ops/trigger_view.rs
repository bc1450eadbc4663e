//! The triggers of a mesh's workflows, for every face: read from the stored definition a
//! replica served last (per workflow), with, for an event trigger, its durable consumer's
//! lag (messages not yet taken) and messages in hand, and for every trigger its dead
//! letters (counted by subject in the dead-letter stream). Nothing is written. A webhook
//! shows its path (`/hooks/{name}`) and scheme, never its secret (the file holds only
//! where the secret is read from).

use std::collections::BTreeMap;

use futures::StreamExt;
use serde::Serialize;

use crate::definition::Trigger;
use crate::shell::run::names;

use super::refusal::Refusal;
use super::runs::Runs;

/// One trigger as every face shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TriggerView {
    /// Its workflow.
    pub workflow: String,
    /// Its name.
    pub name: String,
    /// `subject`, `stream` or `webhook`.
    pub kind: &'static str,
    /// What it reads, in words: `stream ORDERS, subject orders.created`, `POST /hooks/gh`.
    pub source: String,
    /// A webhook's path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A webhook's signature scheme.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<&'static str>,
    /// An event trigger's messages not yet taken by its consumer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
    /// An event trigger's messages taken and not yet acked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_hand: Option<u64>,
    /// Its dead letters.
    pub dead_letters: u64,
    /// Why the lag could not be read (no consumer yet, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The triggers of the workflows stored in `runs`' namespace (of `workflow`, when given).
pub async fn list(runs: &Runs, workflow: Option<&str>) -> Result<Vec<TriggerView>, Refusal> {
    let mut latest = BTreeMap::new();
    for row in super::definitions::list(runs, workflow).await? {
        let stored = row.stored;
        let newer = latest.get(&stored.workflow).is_none_or(
            |s: &crate::shell::store::versions::StoredDefinition| s.served_at < stored.served_at,
        );
        if newer {
            latest.insert(stored.workflow.clone(), stored);
        }
    }
    let js = async_nats::jetstream::new(runs.client().clone());
    let dead = dead_counts(&js, runs.namespace()).await;
    let mut views = Vec::new();
    for stored in latest.values() {
        let Ok(wf) = stored.parse() else {
            continue;
        };
        for t in &wf.triggers {
            let dead_letters = dead.get(&(wf.name.clone(), t.name.clone())).copied();
            let mut view = view_of(&wf.name, t, dead_letters.unwrap_or(0));
            if t.webhook.is_none() {
                lag(&js, runs.namespace(), &wf.name, t, &mut view).await;
            }
            views.push(view);
        }
    }
    Ok(views)
}

/// A trigger's view, before its lag is read.
fn view_of(workflow: &str, t: &Trigger, dead_letters: u64) -> TriggerView {
    let (kind, source) = match (&t.webhook, &t.stream, &t.subject) {
        (Some(_), _, _) => ("webhook", format!("POST /hooks/{}", t.name)),
        (None, Some(stream), Some(subject)) => {
            ("stream", format!("stream {stream}, subject {subject}"))
        }
        (None, Some(stream), None) => ("stream", format!("stream {stream}")),
        (None, None, subject) => ("subject", subject.clone().unwrap_or_default()),
    };
    TriggerView {
        workflow: workflow.to_string(),
        name: t.name.clone(),
        kind,
        source,
        url: t.webhook.as_ref().map(|_| format!("/hooks/{}", t.name)),
        scheme: t.webhook.as_ref().map(|h| h.scheme.name()),
        lag: None,
        in_hand: None,
        dead_letters,
        error: None,
    }
}

/// Reads the lag of event trigger `t` into `view`.
async fn lag(
    js: &async_nats::jetstream::Context,
    ns: &str,
    workflow: &str,
    t: &Trigger,
    view: &mut TriggerView,
) {
    let stream = match &t.stream {
        Some(s) => s.clone(),
        None => names::trigger_stream(ns, workflow, &t.name),
    };
    let durable = names::trigger_consumer(workflow, &t.name);
    let info = match js.get_stream(&stream).await {
        Ok(s) => s.consumer_info(&durable).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match info {
        Ok(info) => {
            view.lag = Some(info.num_pending);
            view.in_hand = Some(info.num_ack_pending as u64);
        }
        Err(e) => view.error = Some(format!("consumer {durable} on {stream}: {e}")),
    }
}

/// The dead letters per (workflow, trigger), counted by subject.
async fn dead_counts(
    js: &async_nats::jetstream::Context,
    ns: &str,
) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    let Ok(stream) = js.get_stream(names::dead_letter_stream(ns)).await else {
        return counts;
    };
    let prefix = format!("{ns}.dead.wf.");
    let Ok(mut subjects) = stream.info_with_subjects(format!("{prefix}>")).await else {
        return counts;
    };
    while let Some(Ok((subject, n))) = subjects.next().await {
        let rest = subject.strip_prefix(&prefix).unwrap_or_default();
        if let Some((workflow, trigger)) = rest.split_once('.') {
            counts.insert((workflow.to_string(), trigger.to_string()), n as u64);
        }
    }
    counts
}
