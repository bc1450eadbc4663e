//! A message on a task that waits: A2A's `input-required` pattern, for a workflow run
//! whose `wait` node waits for a signal. The run's task says `input-required` (with what
//! it waits for in the status message); a `message/send` naming that task id delivers
//! the message's data part (or, without one, its text) as the signal, through
//! [`crate::ops::signals`], with the message id as the signal's id (a client that sends
//! the same message again delivers it once). A run waiting for several signals needs the
//! message's `metadata.signal`. A task that waits for nothing takes no further messages
//! (-32004), as before.
//!
//! The answer is the task once the signal was recorded: for a blocking send, once the run
//! ended or waits again (or after the send timeout), as it then is.

use messages::a2a::Message;
use messages::jsonrpc::codes;
use messages::payload::part_value;
use messages::signal::valid_signal_id;
use serde_json::Value;

use super::rpc::RpcError;
use super::tasks::{get, rpc_error, SEND_TIMEOUT};
use crate::ops::call::Callee;
use crate::ops::follow::{Change, Follow};
use crate::ops::runs::RunRef;
use crate::ops::signals::{self, Outgoing, To};
use crate::web::Ctx;

/// Delivers `message`, naming existing task `task` of `workflow`, as the signal its run
/// waits for; the task as it then is.
pub(super) async fn deliver(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    task: &str,
    message: Message,
    blocking: bool,
) -> Result<Value, RpcError> {
    let refused = |r| rpc_error(id, &r);
    let runs = ctx
        .runs()
        .await
        .map_err(|e| RpcError::new(id, codes::INTERNAL_ERROR, e.message))?;
    let which = RunRef {
        id: task,
        workflow: Some(callee.name()),
        caller: None,
    };
    let run = runs.find(which).await.map_err(|_| {
        RpcError::new(
            id,
            codes::TASK_NOT_FOUND,
            format!("task {task} was specified but does not exist"),
        )
    })?;
    let waiting = signals::waiting(&run.record.state);
    let named = message
        .metadata
        .as_ref()
        .and_then(|m| m.get("signal"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let name = match (named, waiting.as_slice()) {
        (Some(name), _) => name,
        (None, [one]) => one.signal.clone(),
        (None, []) => {
            return Err(RpcError::new(
                id,
                codes::UNSUPPORTED_OPERATION,
                format!(
                    "task {task} waits for no signal: it takes no further messages (send a new \
                     message without taskId to start another task)"
                ),
            ))
        }
        (None, several) => {
            let names: Vec<&str> = several.iter().map(|w| w.signal.as_str()).collect();
            return Err(RpcError::new(
                id,
                codes::INVALID_PARAMS,
                format!(
                    "task {task} waits for several signals ({}): name one in the message's \
                     metadata.signal",
                    names.join(", ")
                ),
            ));
        }
    };
    let outgoing = Outgoing {
        name,
        data: payload(&message),
        signal_id: valid_signal_id(&message.message_id).then(|| message.message_id.clone()),
        by: None,
    };
    let before = waiting.iter().map(|w| (w.node.clone(), w.since.clone()));
    let before: Vec<(String, String)> = before.collect();
    signals::send(&runs, To::Run(&run), &outgoing, ctx.signer.as_ref())
        .await
        .map_err(refused)?;
    if blocking {
        let mut follow = Follow::start(&runs, run).await.map_err(refused)?;
        let settled = async {
            while let Ok(Some(change)) = follow.next().await {
                let Change::Run(run) = change else { continue };
                let again = signals::waiting(&run.record.state)
                    .into_iter()
                    .any(|w| !before.contains(&(w.node, w.since)));
                if run.record.state.status.is_terminal() || again {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(SEND_TIMEOUT, settled).await;
    }
    get(ctx, callee, id, task).await
}

/// The signal's payload in a message: its first data part, else its text.
fn payload(message: &Message) -> Value {
    let data = message.parts.iter().find_map(part_value);
    data.unwrap_or_else(|| Value::String(message.text()))
}
