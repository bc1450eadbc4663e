//! `workflow-node runs show ID` and `runs watch ID`: one run's nodes (status, attempts,
//! started, duration, error), input, output and error, as a table or JSON; with
//! `--mermaid`, the workflow's diagram with each node coloured by its status. `watch`
//! prints the same, then each change [`crate::ops::follow`] reports (the run's record, and
//! the status updates its agents send) until the run ends.
//!
//! The node list and types come from the run's workflow definition
//! ([`crate::ops::definition`]); without one, the nodes the run has reached are shown.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{json, Value};

use super::runs::{self, refuse, refused, Target};
use super::table::{self, Table};
use crate::core::Millis;
use crate::definition::Workflow;
use crate::ops::follow::{Change, Follow};
use crate::ops::refusal::Refusal;
use crate::ops::runs::Runs;
use crate::ops::words::AgentWords;
use crate::ops::{definition, view};
use crate::shell::callers::statuses::AgentUpdate;
use crate::shell::now;
use crate::shell::{Apart, FoundRun};

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

/// The definition of `run` (see [`definition::of_run`]), its notes said on stderr.
async fn definition_of(
    runs: &Runs,
    run: &FoundRun,
    file: Option<&PathBuf>,
    cards: &agent_sdk::CardTrust,
) -> Option<Workflow> {
    let found = definition::of_run(
        runs.client(),
        runs.namespace(),
        run,
        file.map(PathBuf::as_path),
        cards,
    )
    .await;
    for note in &found.notes {
        eprintln!("{note}");
    }
    found.workflow
}

/// Runs `runs show`.
pub(super) async fn show(args: ShowArgs) -> Result<ExitCode> {
    let target = &args.target;
    let (conn, runs) = runs::open(&target.nats).await?;
    let shown = async {
        let run = runs::find(&runs, target).await?;
        let apart = runs.apart(&run).await?;
        let def = definition_of(&runs, &run, args.file.as_ref(), &target.nats.cards).await;
        Ok::<_, Refusal>((run, apart, def))
    }
    .await;
    conn.close().await;
    let (run, apart, def) = match shown {
        Ok(found) => found,
        Err(r) => return refused(r),
    };
    if args.mermaid {
        let Some(def) = def else {
            return refuse(format!(
                "no definition of {} to draw: no node serving it answered; give --file",
                run.workflow
            ));
        };
        let status = view::statuses_of(&run, &def);
        print!("{}", crate::visual::mermaid_with_status(&def, &status));
    } else if target.json {
        let v = view::view(&run, &apart, def.as_ref(), now());
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render(&run, &apart, def.as_ref(), now()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `runs watch`.
pub(super) async fn watch(args: WatchArgs) -> Result<ExitCode> {
    let target = &args.target;
    let (conn, runs) = runs::open(&target.nats).await?;
    let watched = async {
        let run = runs::find(&runs, target).await?;
        let def = definition_of(&runs, &run, args.file.as_ref(), &target.nats.cards).await;
        follow(&runs, run, def, target.json).await
    }
    .await;
    conn.close().await;
    match watched {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(r) => refused(r),
    }
}

/// Prints `run`, then its changes and its agents' updates until it ends.
async fn follow(
    runs: &Runs,
    run: FoundRun,
    def: Option<Workflow>,
    json: bool,
) -> Result<(), Refusal> {
    let mut apart = runs.apart(&run).await?;
    let print_all = |run: &FoundRun, apart: &Apart| {
        if json {
            let v =
                json!({"event": "snapshot", "run": view::view(run, apart, def.as_ref(), now())});
            println!("{v}");
        } else {
            print!("{}", render(run, apart, def.as_ref(), now()));
        }
    };
    print_all(&run, &apart);
    let mut before = run.clone();
    let mut changes = Follow::start(runs, run).await?;
    while let Some(change) = changes.next().await? {
        let next = match change {
            Change::Status(u) => {
                print_update(&u, def.as_ref(), json);
                continue;
            }
            Change::Run(next) => *next,
        };
        if !json {
            print_changes(&before, &next);
        }
        if next.record.state.status.is_terminal() {
            apart = runs.apart(&next).await?;
            if !json {
                println!();
            }
            print_all(&next, &apart);
        } else if json {
            print_all(&next, &apart);
        }
        before = next;
    }
    Ok(())
}

/// A status update of one of the run's agents, on one line: its words, quoted after its
/// name (see [`AgentWords`]), never as a line of ours.
fn print_update(u: &AgentUpdate, def: Option<&Workflow>, json: bool) {
    let words = AgentWords::of(u, def);
    if json {
        let agent = words.as_ref().and_then(|w| w.agent.clone());
        let v = json!({"event": "agent_status", "node_id": u.task.node, "agent": agent,
            "sub_task_id": u.sub_task_id, "state": u.state, "text": u.text, "data": u.data});
        println!("{v}");
    } else if let Some(words) = words {
        let at = table::clock(now());
        println!("{at}  {} [{}] {words}", u.task.node, u.state);
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

/// The run for people.
fn render(run: &FoundRun, apart: &Apart, def: Option<&Workflow>, now: Millis) -> String {
    let r = &run.record;
    let s = &r.state;
    let mut out = format!(
        "run {} of {}: {}\n  started {}, took {}, caller {}\n",
        run.execution,
        run.workflow,
        s.shown_status(),
        crate::ops::view::time(Some(s.started_at)),
        table::span(Some(s.started_at), r.ended_at, now),
        view::caller(run).unwrap_or("-"),
    );
    if let Some(paused) = s.paused.as_ref().filter(|_| s.is_paused()) {
        let why = paused
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  paused since {}{why}\n",
            crate::ops::view::time(Some(paused.since))
        ));
    }
    if let Some(line) = crate::ops::view::queue_line(s) {
        out.push_str(&format!("  {line}\n"));
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
    out.push_str(&nodes_table(run, def, now).render());
    out.push_str(&render_rest(run, apart));
    out
}

/// The run's nodes as a table.
fn nodes_table(run: &FoundRun, def: Option<&Workflow>, now: Millis) -> Table {
    let mut t = Table::new(&[
        "NODE", "TYPE", "STATUS", "ATTEMPTS", "STARTED", "DURATION", "ERROR",
    ]);
    for row in view::rows(run, def) {
        t.row(vec![
            row.id,
            row.kind,
            row.status.as_str().into(),
            if row.attempts > 0 {
                row.attempts.to_string()
            } else {
                "-".into()
            },
            crate::ops::view::time(row.started),
            table::span(row.started, row.ended, now),
            table::short(row.error.as_deref().unwrap_or(""), 80),
        ]);
    }
    t
}

/// What follows the nodes: the gates waiting, the maps, the input, output and error.
fn render_rest(run: &FoundRun, apart: &Apart) -> String {
    let (r, s) = (&run.record, &run.record.state);
    let mut out = String::new();
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
    for w in crate::ops::signals::waiting(s) {
        out.push_str(&format!("waiting: {}\n", w.line()));
    }
    for k in &s.signals.kept {
        out.push_str(&format!("kept: signal '{}' (id {})\n", k.name, k.id));
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
