//! The one way a run starts: its input checked ([`check_input`]), then its `Started` event
//! published into the workflow's stream with a message id derived from its execution id
//! ([`publish_start`]), so that the same start made twice (a request sent again, two
//! replicas carrying out one schedule's slot) is one run. Requests (`requests`) and
//! schedules (`schedules`) both start runs here.

use messages::msg_id;
use serde_json::Value;

use crate::core::{Event, ExecutionId};
use crate::definition::Workflow;
use crate::shell::context::Shared;
use crate::shell::error::{Context, Result};
use crate::shell::run::envelope::{Caller, Envelope};
use crate::shell::store::events::publish_event;
use crate::shell::store::runs;

/// Whether `input` may start a run of `workflow` (its depth, its input schema); the
/// error says what is wrong with it. Every start checks its input here.
pub(in crate::shell) fn check_input(
    workflow: &Workflow,
    input: &Value,
) -> std::result::Result<(), String> {
    crate::limits::check_depth("the input", input).map_err(|e| e.to_string())?;
    if let Some(schema) = &workflow.input_schema {
        let violations = schema.violations(input);
        if !violations.is_empty() {
            return Err(format!(
                "input does not match the input_schema of {}: {}",
                workflow.name,
                violations.join("; ")
            ));
        }
    }
    Ok(())
}

/// Stores the `Started` event of a run (its message id makes a copy sent again within the
/// stream's duplicate window a duplicate): whether it was stored, not a duplicate, and the
/// event.
pub(in crate::shell) async fn publish_start(
    shared: &Shared,
    workflow: &Workflow,
    execution: &ExecutionId,
    caller: &Caller,
    input: Value,
) -> Result<(bool, Envelope)> {
    // An input too large to travel in the event (an input artifact of several MB) is
    // stored beside the run, and the event names it; the worker reads it back.
    let bytes = serde_json::to_vec(&input)?;
    let input = if bytes.len() > shared.config.inline_limit {
        let name = shared.seal.object_name(&execution.0, ".input.json");
        let uri = shared
            .artifacts
            .put_run(&name, &execution.0, bytes)
            .await
            .context(|| format!("storing the input of run {execution}"))?;
        runs::stand_in(uri)
    } else {
        input
    };
    let envelope = Envelope {
        event: Event::Started { input },
        caller: Some(caller.clone()),
        attach: false,
        definition: Some(workflow.hash.clone()),
        wake: None,
    };
    let msg_id = msg_id::run_start(&execution.0);
    let stored = publish_event(shared, &workflow.name, execution, &msg_id, &envelope).await?;
    Ok((stored, envelope))
}
