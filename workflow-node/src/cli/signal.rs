//! `workflow-node runs signal RUN NAME --data JSON|@FILE` (or `runs signal --key K
//! --workflow W NAME ...`): sends a signal to a run's wait nodes through
//! [`crate::ops::signals`], which the workflow's nodes check and record.
//!
//! Exit 0 once recorded (delivered, or kept until the node waits), 1 when refused (the run
//! or key is unknown, the run ended, no wait node takes the signal, its payload breaks the
//! node's schema, the key may not send it), 2 on a usage or connection error.

use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};

use super::connect::NatsArgs;
use super::runs::{find, open, refused, Target};
use crate::ops::refusal::Refusal;
use crate::ops::signals::{self, Outgoing, To};

/// The largest `--data @FILE` read (the request must also fit the server's payload limit).
const MAX_DATA_FILE: u64 = 1 << 20;

/// Arguments of `runs signal`.
#[derive(Debug, clap::Args)]
pub struct SignalArgs {
    /// `RUN NAME`: the run (its execution id, or with --workflow the task id it was
    /// started with) and the signal's name; with --key, `NAME` only.
    #[arg(num_args = 1..=2, required = true, value_names = ["RUN", "NAME"])]
    pub words: Vec<String>,
    /// The key a wait node's `correlation` gave the run (needs --workflow), instead of RUN.
    #[arg(long)]
    pub key: Option<String>,
    /// The run's workflow (with --key, or for a task id).
    #[arg(long)]
    pub workflow: Option<String>,
    /// The caller name (`Mesh-Caller`) a task id was started with.
    #[arg(long)]
    pub caller: Option<String>,
    /// The payload: JSON text, or `@PATH` to read it from a file.
    #[arg(long, default_value = "null")]
    pub data: String,
    /// An id for this signal: sent again with the same id, it is applied once.
    #[arg(long)]
    pub signal_id: Option<String>,
    /// Who sends it (for a wait node that lists signers): optional, the signature says.
    #[arg(long)]
    pub by: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// The key the signal is signed with: one of the node's signers, else the one that
    /// started the run or an operator's.
    #[command(flatten)]
    pub sign: super::identity::SignArgs,
}

/// Reads `--data`: JSON text or `@PATH`.
fn read_data(text: &str) -> Result<Value> {
    let text = match text.strip_prefix('@') {
        Some(path) => {
            let len = std::fs::metadata(path)
                .with_context(|| format!("--data @{path}"))?
                .len();
            if len > MAX_DATA_FILE {
                return Err(anyhow!(
                    "--data @{path}: {len} bytes, more than {MAX_DATA_FILE}"
                ));
            }
            std::fs::read_to_string(path).with_context(|| format!("--data @{path}"))?
        }
        None => text.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| anyhow!("--data is not JSON: {e}"))
}

/// Runs `runs signal`.
pub(crate) async fn signal(args: SignalArgs) -> Result<ExitCode> {
    let (run_id, name) = match (&args.key, args.words.as_slice()) {
        (Some(_), [name]) => (None, name.clone()),
        (None, [run, name]) => (Some(run.clone()), name.clone()),
        (Some(_), _) => return Err(anyhow!("with --key, give the signal's NAME only")),
        (None, _) => return Err(anyhow!("give RUN and NAME (or --key K and NAME)")),
    };
    if args.key.is_some() && args.workflow.is_none() {
        return Err(anyhow!("--key needs --workflow"));
    }
    let outgoing = Outgoing {
        name,
        data: read_data(&args.data)?,
        signal_id: args.signal_id.clone(),
        by: args.by.clone(),
    };
    let signer = args.sign.signer()?;
    let (conn, runs) = open(&args.nats).await?;
    let sent = async {
        match (&run_id, &args.key, &args.workflow) {
            (Some(id), _, _) => {
                let target = Target {
                    id: id.clone(),
                    workflow: args.workflow.clone(),
                    caller: args.caller.clone(),
                    json: args.json,
                    nats: args.nats.clone(),
                };
                let run = find(&runs, &target).await?;
                signals::send(&runs, To::Run(&run), &outgoing, signer.as_ref()).await
            }
            (None, Some(key), Some(workflow)) => {
                let to = To::Key { workflow, key };
                signals::send(&runs, to, &outgoing, signer.as_ref()).await
            }
            _ => Err(Refusal::new(
                crate::ops::refusal::RefusalKind::Invalid,
                "give RUN or --key",
            )),
        }
    }
    .await;
    conn.close().await;
    let text = match sent {
        Ok(text) => text,
        Err(r) => return refused(r),
    };
    if args.json {
        println!("{}", json!({"signal": "recorded", "message": text}));
    } else {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}
