//! `workflow-node runs show ID` and `runs watch ID`: one run's nodes (status, attempts,
//! started, duration, error), input, output and error, as a table or JSON; with
//! `--mermaid`, the workflow's diagram with each node coloured by its status. `watch`
//! prints the same, then each change of the run's record (a KV watch of its key) and each
//! status update its agents send, until the run ends.
//!
//! The node list and types come from the run's workflow definition: the one the run names
//! (see [`definition`]), else `--file`, else the card a serving node publishes. Without
//! any, the nodes the run has reached are shown.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;
use serde_json::{json, Value};

use super::runs::{self, refuse, Target};
use super::table::{self, Table};
use crate::core::{Millis, NodeStatus};
use crate::definition::{NodeKind, Workflow};
use crate::shell::{callers::statuses, now};
use crate::shell::{Apart, FoundRun, Inspector};

/// How long `show` waits for a serving node's card, for the definition.
const CARD_WAIT: Duration = Duration::from_secs(2);

/// Inline values longer than this (serialised) are cut in the table view.
const VALUE_MAX: usize = 4096;

/// Arguments of `runs show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// Which run.
    #[command(flatten)]
    pub target: Target,
    /// Print the workflow's Mermaid diagram with each node coloured by its status instead.
    #[arg(long)]
    pub mermaid: bool,
    /// The workflow file, when no node serving the workflow is up to give its definition.
    #[arg(long)]
    pub file: Option<PathBuf>,
}

/// Arguments of `runs watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Which run.
    #[command(flatten)]
    pub target: Target,
    /// The workflow file, when no node serving the workflow is up to give its definition.
    #[arg(long)]
    pub file: Option<PathBuf>,
}

/// Runs `runs show`.
pub(super) async fn show(args: ShowArgs) -> Result<ExitCode> {
    let target = &args.target;
    let (conn, inspector) = runs::open(&target.nats).await?;
    let shown = async {
        let run = match runs::find(inspector.as_ref(), target).await? {
            Ok(run) => run,
            Err(why) => return Ok(Err(why)),
        };
        let inspector = inspector.as_ref().expect("a run was found in it");
        let apart = inspector.apart(&run).await?;
        let ns = &target.nats.namespace;
        let def = definition(&conn.client, ns, &run, args.file.as_ref()).await;
        Ok::<_, anyhow::Error>(Ok((run, apart, def)))
    }
    .await;
    conn.close().await;
    let (run, apart, def) = match shown? {
        Ok(found) => found,
        Err(why) => return refuse(why),
    };
    if args.mermaid {
        let Some(def) = def else {
            return refuse(format!(
                "no definition of {} to draw: no node serving it answered; give --file",
                run.workflow
            ));
        };
        let status = statuses_of(&run, Some(&def));
        print!("{}", crate::visual::mermaid_with_status(&def, &status));
    } else if target.json {
        let v = view(&run, &apart, def.as_ref(), now());
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render(&run, &apart, def.as_ref(), now()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `runs watch`.
pub(super) async fn watch(args: WatchArgs) -> Result<ExitCode> {
    let target = &args.target;
    let (conn, inspector) = runs::open(&target.nats).await?;
    let run = match runs::find(inspector.as_ref(), target).await {
        Ok(Ok(run)) => run,
        Ok(Err(why)) => {
            conn.close().await;
            return refuse(why);
        }
        Err(e) => {
            conn.close().await;
            return Err(e);
        }
    };
    let inspector = inspector.expect("a run was found in it");
    let ns = target.nats.namespace.clone();
    let def = definition(&conn.client, &ns, &run, args.file.as_ref()).await;
    let result = follow(&conn.client, &inspector, &ns, run, def, target.json).await;
    conn.close().await;
    result
}

/// Prints `run`, then its changes and its agents' updates until it ends.
async fn follow(
    client: &async_nats::Client,
    inspector: &Inspector,
    ns: &str,
    mut run: FoundRun,
    def: Option<Workflow>,
    json: bool,
) -> Result<ExitCode> {
    let mut apart = inspector.apart(&run).await?;
    let print_all = |run: &FoundRun, apart: &Apart| {
        if json {
            let v = json!({"event": "snapshot", "run": view(run, apart, def.as_ref(), now())});
            println!("{v}");
        } else {
            print!("{}", render(run, apart, def.as_ref(), now()));
        }
    };
    print_all(&run, &apart);
    if run.record.state.status.is_terminal() {
        return Ok(ExitCode::SUCCESS);
    }
    let mut updates = client
        .subscribe(subjects::agent_status_all(ns, &run.workflow))
        .await?;
    let mut changes = inspector.watch(&run.workflow, &run.execution).await?;
    loop {
        tokio::select! {
            changed = Inspector::changed(&mut changes, &run) => {
                changed?;
                let Some(next) = inspector.read_run(&run.workflow, &run.execution).await? else {
                    return refuse(format!("run {} is gone (its retention passed)", run.execution));
                };
                if !json {
                    print_changes(&run, &next);
                }
                run = next;
                if run.record.state.status.is_terminal() {
                    apart = inspector.apart(&run).await?;
                    if !json {
                        println!();
                    }
                    print_all(&run, &apart);
                    return Ok(ExitCode::SUCCESS);
                }
                if json {
                    print_all(&run, &apart);
                }
            }
            Some(msg) = updates.next() => {
                let Some(u) = statuses::interpret(&msg.subject, &msg.payload) else { continue };
                if u.execution != run.execution {
                    continue;
                }
                if json {
                    let v = json!({"event": "agent_status", "node_id": u.task.node,
                        "sub_task_id": u.sub_task_id, "state": u.state, "text": u.text, "data": u.data});
                    println!("{v}");
                } else {
                    let what = u.text.clone().or_else(|| u.data.as_ref().map(Value::to_string));
                    println!("{}  {} [{}]: {}", table::clock(now()), u.task.node, u.state,
                        table::short(&what.unwrap_or_default(), 120));
                }
            }
        }
    }
}

/// One line per node whose status changed between two records of a run, and one for the
/// run's own status.
fn print_changes(before: &FoundRun, after: &FoundRun) {
    let (b, a) = (&before.record.state, &after.record.state);
    let at = table::clock(now());
    let mut ids: Vec<&String> = a.nodes.keys().collect();
    ids.sort_by_key(|id| a.nodes[*id].started_at);
    for id in ids {
        let (old, new) = (b.node_status(id), a.node_status(id));
        if old == new {
            continue;
        }
        let n = &a.nodes[id];
        let took = if new.is_terminal() {
            format!(" ({})", table::span(n.started_at, n.ended_at, now()))
        } else {
            String::new()
        };
        let why = n
            .error
            .as_deref()
            .filter(|_| new.is_failed())
            .map(|e| format!(": {}", table::short(e, 100)))
            .unwrap_or_default();
        println!("{at}  {id} {} -> {}{took}{why}", old.as_str(), new.as_str());
    }
    if b.status != a.status {
        println!("{at}  run {} -> {}", b.status.as_str(), a.status.as_str());
    }
}

/// The definition `run` was made with, if it can be had: the one the run names (from the
/// definitions bucket), `file`, or the card of a node serving the workflow.
pub(super) async fn definition(
    client: &async_nats::Client,
    ns: &str,
    run: &FoundRun,
    file: Option<&PathBuf>,
) -> Option<Workflow> {
    if let Some(hash) = &run.record.definition {
        match stored_definition(client, ns, &run.workflow, hash).await {
            Ok(wf) => return Some(wf),
            Err(e) => eprintln!("the definition the run names: {e}"),
        }
    }
    if let Some(path) = file {
        return match crate::definition::load_file(path) {
            Ok(wf) if wf.name == run.workflow => Some(wf),
            Ok(wf) => {
                eprintln!(
                    "{} defines {}, not {}: ignored",
                    path.display(),
                    wf.name,
                    run.workflow
                );
                None
            }
            Err(problems) => {
                for p in problems {
                    eprintln!("{p}");
                }
                None
            }
        };
    }
    let card = card_of(client, ns, &run.workflow).await?;
    let card = crate::shell::full_card(&async_nats::jetstream::new(client.clone()), card)
        .await
        .ok()?;
    let doc = json!({"name": run.workflow, "workflow": card.workflow_config()?});
    crate::definition::parse_str(&doc.to_string(), "card.json").ok()
}

/// The stored definition `hash` of `workflow`, parsed.
async fn stored_definition(
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

/// The card of agent `name`, asked for with a discovery ping; `None` when none comes
/// within [`CARD_WAIT`].
async fn card_of(client: &async_nats::Client, ns: &str, name: &str) -> Option<AgentCard> {
    let mut cards = client.subscribe(subjects::agent_cards(ns)).await.ok()?;
    client.flush().await.ok()?;
    client
        .publish(subjects::discovery_ping(ns), "".into())
        .await
        .ok()?;
    let wait = async {
        while let Some(msg) = cards.next().await {
            if let Ok(card) = serde_json::from_slice::<AgentCard>(&msg.payload) {
                if card.name == name {
                    return Some(card);
                }
            }
        }
        None
    };
    tokio::time::timeout(CARD_WAIT, wait).await.ok().flatten()
}

/// Every node's status: the definition's nodes (pending unless reached), else those the
/// run has reached.
pub(super) fn statuses_of(run: &FoundRun, def: Option<&Workflow>) -> BTreeMap<String, NodeStatus> {
    let state = &run.record.state;
    match def {
        Some(def) => def
            .nodes
            .iter()
            .map(|n| (n.id.clone(), state.node_status(&n.id)))
            .collect(),
        None => state
            .nodes
            .iter()
            .map(|(id, n)| (id.clone(), n.status))
            .collect(),
    }
}

/// One node of a run, as shown.
struct NodeRow {
    id: String,
    kind: String,
    status: NodeStatus,
    attempts: u32,
    started: Option<Millis>,
    ended: Option<Millis>,
    error: Option<String>,
}

fn rows(run: &FoundRun, def: Option<&Workflow>) -> Vec<NodeRow> {
    let state = &run.record.state;
    let ids: Vec<(String, String)> = match def {
        Some(def) => def
            .nodes
            .iter()
            .map(|n| (n.id.clone(), kind(&n.kind).to_string()))
            .collect(),
        None => state
            .nodes
            .keys()
            .map(|id| (id.clone(), "-".to_string()))
            .collect(),
    };
    ids.into_iter()
        .map(|(id, kind)| {
            let n = state.nodes.get(&id);
            NodeRow {
                status: state.node_status(&id),
                attempts: run.record.attempts.get(&id).copied().unwrap_or(0),
                started: n.and_then(|n| n.started_at),
                ended: n.and_then(|n| n.ended_at),
                error: n.and_then(|n| n.error.clone()),
                id,
                kind,
            }
        })
        .collect()
}

/// A node's `type` as written in files.
fn kind(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::Call(c) => match c.target {
            crate::definition::CallTarget::Agent(_) => "agent",
            crate::definition::CallTarget::Workflow(_) => "workflow",
        },
        NodeKind::Conditional { .. } => "conditional",
        NodeKind::Switch { .. } => "switch",
        NodeKind::Map(_) => "map",
        NodeKind::Fork { .. } => "fork",
        NodeKind::Join { .. } => "join",
        NodeKind::Loop(_) => "loop",
        NodeKind::Approval(_) => "approval",
    }
}

/// The run for people.
fn render(run: &FoundRun, apart: &Apart, def: Option<&Workflow>, now: Millis) -> String {
    let r = &run.record;
    let s = &r.state;
    let mut out = format!(
        "run {} of {}: {}\n  started {}, took {}, caller {}\n",
        run.execution,
        run.workflow,
        s.shown_status(),
        table::time(Some(s.started_at)),
        table::span(Some(s.started_at), r.ended_at, now),
        runs::caller(run).unwrap_or("-"),
    );
    if let Some(paused) = s.paused.as_ref().filter(|_| s.is_paused()) {
        let why = paused
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  paused since {}{why}\n",
            table::time(Some(paused.since))
        ));
    }
    if let Some(old) = &s.retry_of {
        out.push_str(&format!("  retry of run {old}\n"));
    }
    if let Some(hash) = &r.definition {
        match def.filter(|d| d.hash == *hash) {
            Some(d) => out.push_str(&format!("  definition version {} ({hash})\n", d.version)),
            None => out.push_str(&format!("  definition {hash}\n")),
        }
    }
    if def.is_none() {
        out.push_str("  (no definition at hand: only the nodes the run reached are listed)\n");
    }
    let mut t = Table::new(&[
        "NODE", "TYPE", "STATUS", "ATTEMPTS", "STARTED", "DURATION", "ERROR",
    ]);
    for row in rows(run, def) {
        t.row(vec![
            row.id,
            row.kind,
            row.status.as_str().into(),
            if row.attempts > 0 {
                row.attempts.to_string()
            } else {
                "-".into()
            },
            table::time(row.started),
            table::span(row.started, row.ended, now),
            table::short(row.error.as_deref().unwrap_or(""), 80),
        ]);
    }
    out.push_str(&t.render());
    for (node, ask) in &r.asks {
        let who = if ask.approvers.is_empty() {
            "anyone".into()
        } else {
            ask.approvers.join(", ")
        };
        let message = ask.message.as_deref().map(|m| format!(": {m}"));
        out.push_str(&format!(
            "waiting: {node} for a decision by {who}{}\n",
            message.unwrap_or_default()
        ));
    }
    for (map, m) in &r.maps {
        out.push_str(&format!("map {map}: {} items, kept apart\n", m.total));
    }
    let input = apart.input.as_ref().unwrap_or(&s.input);
    out.push_str(&format!("input:  {}\n", value_line(input)));
    if let Some(output) = apart.output.as_ref().or(s.output.as_ref()) {
        out.push_str(&format!("output: {}\n", value_line(output)));
    }
    if let Some(e) = &s.error {
        out.push_str(&format!("error:  {}\n", e.message));
    }
    out
}

/// A value on one line, cut when long (its size said).
fn value_line(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= VALUE_MAX {
        return text;
    }
    format!(
        "{} ({} bytes; --json prints it whole)",
        table::short(&text, 200),
        text.len()
    )
}

/// The run as `--json` prints it.
pub(super) fn view(run: &FoundRun, apart: &Apart, def: Option<&Workflow>, now: Millis) -> Value {
    let r = &run.record;
    let s = &r.state;
    let nodes: Vec<Value> = rows(run, def)
        .into_iter()
        .map(|row| {
            let duration = row
                .started
                .map(|st| row.ended.unwrap_or(now).0.saturating_sub(st.0));
            json!({
                "id": row.id,
                "type": row.kind,
                "status": row.status.as_str(),
                "attempts": row.attempts,
                "started_at": table::rfc3339(row.started),
                "ended_at": table::rfc3339(row.ended),
                "duration_ms": duration,
                "error": row.error,
            })
        })
        .collect();
    let mut v = runs::summary(run, now);
    v["nodes"] = Value::Array(nodes);
    v["input"] = apart.input.clone().unwrap_or_else(|| s.input.clone());
    v["output"] = apart
        .output
        .clone()
        .or_else(|| s.output.clone())
        .unwrap_or(Value::Null);
    v["error"] = serde_json::to_value(&s.error).unwrap_or(Value::Null);
    v["waiting"] = serde_json::to_value(&r.asks).unwrap_or(Value::Null);
    v["maps"] = json!(r
        .maps
        .iter()
        .map(|(id, m)| (id.clone(), m.total))
        .collect::<BTreeMap<_, _>>());
    v["definition"] = json!(r.definition);
    v["version"] = json!(def
        .filter(|d| r.definition.as_ref() == Some(&d.hash))
        .map(|d| &d.version));
    v
}
