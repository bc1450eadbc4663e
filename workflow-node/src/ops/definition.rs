//! The definition a run was made with, found the best way at hand: the one the run names
//! (from the definitions bucket), a file the operator gives, or the card of a node serving
//! the workflow. What went wrong on the way is returned as notes, for the face to show or
//! log: a run is still shown without its definition.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;
use serde_json::json;

use crate::definition::Workflow;
use crate::shell::FoundRun;

/// How long to wait for a serving node's card.
const CARD_WAIT: Duration = Duration::from_secs(2);

/// A run's definition, if one was found, and what went wrong looking.
#[derive(Debug, Default)]
pub struct Found {
    /// The definition.
    pub workflow: Option<Workflow>,
    /// Why a source was passed over, one line each.
    pub notes: Vec<String>,
}

/// The definition `run` was made with, if it can be had: the one the run names, `file`,
/// or the card of a node serving the workflow (taken only when signed as `trust` says).
pub async fn of_run(
    client: &async_nats::Client,
    ns: &str,
    run: &FoundRun,
    file: Option<&Path>,
    trust: &agent_sdk::CardTrust,
) -> Found {
    let mut notes = Vec::new();
    if let Some(hash) = &run.record.definition {
        match stored(client, ns, &run.workflow, hash).await {
            Ok(wf) => return found(wf, notes),
            Err(e) => notes.push(format!("the definition the run names: {e}")),
        }
    }
    if let Some(path) = file {
        let workflow = match crate::definition::load_file(path) {
            Ok(wf) if wf.name == run.workflow => Some(wf),
            Ok(wf) => {
                notes.push(format!(
                    "{} defines {}, not {}: ignored",
                    path.display(),
                    wf.name,
                    run.workflow
                ));
                None
            }
            Err(problems) => {
                notes.extend(problems.iter().map(ToString::to_string));
                None
            }
        };
        return Found { workflow, notes };
    }
    Found {
        workflow: from_card(client, ns, &run.workflow, trust).await,
        notes,
    }
}

fn found(workflow: Workflow, notes: Vec<String>) -> Found {
    Found {
        workflow: Some(workflow),
        notes,
    }
}

/// The definition in the card of a node serving `workflow`, if one answers.
async fn from_card(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    trust: &agent_sdk::CardTrust,
) -> Option<Workflow> {
    let card = card_of(client, ns, workflow, trust).await?;
    let card = crate::shell::full_card(client, ns, card).await.ok()?;
    let doc = json!({"name": workflow, "workflow": card.workflow_config()?});
    crate::definition::parse_str(&doc.to_string(), "card.json").ok()
}

/// The stored definition `hash` of `workflow`, parsed.
async fn stored(
    client: &async_nats::Client,
    ns: &str,
    workflow: &str,
    hash: &str,
) -> anyhow::Result<Workflow> {
    let js = async_nats::jetstream::new(client.clone());
    let bucket = js
        .get_key_value(crate::shell::run::names::versions_bucket(ns))
        .await?;
    let key = crate::shell::store::versions::key(workflow, hash);
    let bytes = bucket
        .get(&key)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{key} is not stored (deleted?)"))?;
    let stored: crate::shell::store::versions::StoredDefinition = serde_json::from_slice(&bytes)?;
    Ok(stored.parse()?)
}

/// The card of agent `name`, asked for with a discovery ping and judged by `trust`;
/// `None` when none comes within [`CARD_WAIT`].
async fn card_of(
    client: &async_nats::Client,
    ns: &str,
    name: &str,
    trust: &agent_sdk::CardTrust,
) -> Option<AgentCard> {
    let mut cards = client.subscribe(subjects::agent_cards(ns)).await.ok()?;
    client.flush().await.ok()?;
    client
        .publish(subjects::discovery_ping(ns), "".into())
        .await
        .ok()?;
    let cache = agent_sdk::CardCache::with_trust(Duration::MAX, trust);
    let wait = async {
        while let Some(msg) = cards.next().await {
            let taken = cache.receive(&msg.payload, msg.headers.as_ref());
            if taken.is_ok_and(|n| n == name) {
                return cache.get(name);
            }
        }
        None
    };
    tokio::time::timeout(CARD_WAIT, wait).await.ok().flatten()
}
