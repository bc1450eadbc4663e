//! `workflow-node schedules list|add|pause|resume|delete|trigger`: a mesh's schedules
//! ([`crate::ops::schedules`]). `list` reads the schedules bucket; the others ask the
//! workflow's nodes, which take them only signed by an operator's key when they have
//! operator keys. Exit 0 when done, 1 when refused, 2 on an error.

use std::process::ExitCode;

use anyhow::{anyhow, Result};
use messages::control::{ScheduleControl, WorkflowScheduleControl};
use serde_json::{json, Map, Value};

use super::connect::{connect, NatsArgs};
use super::runs::refused;
use super::table::Table;
use crate::ops::schedules;

/// Arguments of `schedules`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: SchedulesCommand,
}

/// The subcommands of `schedules`.
#[derive(Debug, clap::Subcommand)]
pub enum SchedulesCommand {
    /// List schedules: workflow, name, when, overlap, paused, next fire time, last run.
    List(ListArgs),
    /// Add a schedule to a workflow (kept by the mesh, beside the file's).
    Add(AddArgs),
    /// Pause a schedule: its slots start nothing until it is resumed.
    Pause(ChangeArgs),
    /// Resume a paused schedule, from its next slot on.
    Resume(ChangeArgs),
    /// Delete a schedule added with `add`.
    Delete(ChangeArgs),
    /// Start one run of a schedule now.
    Trigger(ChangeArgs),
}

/// Arguments of `schedules list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only schedules of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Which schedule, and how to sign.
#[derive(Debug, clap::Args)]
pub struct ChangeArgs {
    /// The workflow.
    pub workflow: String,
    /// The schedule's name.
    pub schedule: String,
    /// Why (kept with the schedule by pause and resume).
    #[arg(long)]
    pub note: Option<String>,
    /// The operator key the request is signed with.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Arguments of `schedules add`.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// Which workflow and name, and how to sign.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// A cron expression (5 fields, or 6 with seconds first), e.g. '0 8 * * 1-5'.
    #[arg(long, conflicts_with = "every")]
    pub cron: Option<String>,
    /// The cron expression's IANA time zone (default UTC).
    #[arg(long)]
    pub timezone: Option<String>,
    /// An interval instead of a cron expression, e.g. 30s, 15m.
    #[arg(long)]
    pub every: Option<String>,
    /// The runs' input: a JSON template that may name {{schedule.time}}, {{schedule.unix}},
    /// {{schedule.name}} and {{schedule.manual}}.
    #[arg(long)]
    pub input: Option<String>,
    /// skip, buffer_one, allow_all or cancel_other (default skip).
    #[arg(long)]
    pub overlap: Option<String>,
    /// How late a missed slot still starts, e.g. 5m (default 60s).
    #[arg(long)]
    pub catchup_window: Option<String>,
    /// Start each slot up to this much later, e.g. 30s.
    #[arg(long)]
    pub jitter: Option<String>,
    /// Add it paused.
    #[arg(long)]
    pub paused: bool,
}

/// Runs `schedules`.
pub fn run(args: Args) -> ExitCode {
    super::block_on(async move {
        match args.command {
            SchedulesCommand::List(a) => list(a).await,
            SchedulesCommand::Add(a) => {
                let spec = spec(&a)?;
                change(a.change, ScheduleControl::Add, Some(spec)).await
            }
            SchedulesCommand::Pause(a) => change(a, ScheduleControl::Pause, None).await,
            SchedulesCommand::Resume(a) => change(a, ScheduleControl::Resume, None).await,
            SchedulesCommand::Delete(a) => change(a, ScheduleControl::Delete, None).await,
            SchedulesCommand::Trigger(a) => change(a, ScheduleControl::Trigger, None).await,
        }
    })
}

/// The schedule's fields as a workflow file writes them.
fn spec(a: &AddArgs) -> Result<Value> {
    let mut spec = Map::new();
    let strings = [
        ("cron", &a.cron),
        ("timezone", &a.timezone),
        ("every", &a.every),
        ("overlap", &a.overlap),
        ("catchup_window", &a.catchup_window),
        ("jitter", &a.jitter),
    ];
    for (name, value) in strings {
        if let Some(v) = value {
            spec.insert(name.into(), Value::String(v.clone()));
        }
    }
    if let Some(input) = &a.input {
        let input: Value =
            serde_json::from_str(input).map_err(|e| anyhow!("--input is not JSON: {e}"))?;
        spec.insert("input".into(), input);
    }
    if a.paused {
        spec.insert("paused".into(), Value::Bool(true));
    }
    Ok(Value::Object(spec))
}

async fn change(a: ChangeArgs, action: ScheduleControl, spec: Option<Value>) -> Result<ExitCode> {
    let signer = a.sign.signer()?;
    let conn = connect(&a.nats).await?;
    let control = WorkflowScheduleControl {
        schedule: a.schedule,
        action,
        note: a.note,
        spec,
    };
    let outcome = schedules::control(
        &conn.client,
        &a.nats.namespace,
        &a.workflow,
        &control,
        signer.as_ref(),
    )
    .await;
    conn.close().await;
    match outcome {
        Ok(text) => {
            println!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(r) => refused(r),
    }
}

async fn list(a: ListArgs) -> Result<ExitCode> {
    let conn = connect(&a.nats).await?;
    let now = crate::shell::now().0;
    let found = schedules::list(&conn.client, &a.nats.namespace, a.workflow.as_deref(), now).await;
    conn.close().await;
    let found = match found {
        Ok(found) => found,
        Err(r) => return refused(r),
    };
    if a.json {
        println!("{}", json!(found));
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "WORKFLOW", "SCHEDULE", "WHEN", "OVERLAP", "PAUSED", "NEXT", "LAST RUN", "STARTED",
    ]);
    for s in &found {
        let paused = match (&s.paused, &s.note) {
            (true, Some(note)) => format!("yes ({note})"),
            (true, None) => "yes".into(),
            (false, _) => "no".into(),
        };
        t.row(vec![
            s.workflow.clone(),
            s.name.clone(),
            s.when.clone(),
            s.overlap.clone(),
            paused,
            s.next.clone().unwrap_or_else(|| "-".into()),
            s.last_run.clone().unwrap_or_else(|| "-".into()),
            s.counts.started.to_string(),
        ]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}
