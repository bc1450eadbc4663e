//! One `tools/call`: the tool found among those served (else a JSON-RPC error: the request
//! names nothing), its arguments checked against its schema by `agent_sdk`'s
//! [`ToolCall`](agent_sdk::ToolCall) before anything is sent (a violation is a tool error
//! the model can read and correct), then the call followed to its end:
//!
//! - the client's `_meta.traceparent` (W3C's grammar, else dropped) is the call's trace
//!   context, as a NATS caller's header is;
//! - each progress event of the run goes to the client as `notifications/progress`, only
//!   when it sent a `progressToken` (echoed), with a count that only grows;
//! - the request's cancellation (`notifications/cancelled`, or a modern HTTP client
//!   closing the stream) cancels the call, signed as the door signs;
//! - an approval gate ends the call with a result that says so ([`tools::approval_result`])
//!   and leaves the run waiting for its decision: a client is not left hanging on a
//!   decision nobody at the keyboard can make;
//! - a stored output is read back (up to [`super::MAX_RESOURCE_BYTES`]) and linked.

use agent_sdk::{Call, Output, Progress, ToolError};
use futures::StreamExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::tools::{self, Shape};
use super::{error_chain, Door, MAX_ARGUMENT_BYTES, MAX_RESOURCE_BYTES};

/// Runs the call `request` asks for (see the module doc).
pub(super) async fn call(
    door: &Door,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let name = request.name.to_string();
    let Some((tool, card)) = door.tool(&name) else {
        let known: Vec<String> = door.names();
        return Err(ErrorData::invalid_params(
            format!("no tool {name} here (tools: {})", known.join(", ")),
            None,
        ));
    };
    let arguments = Value::Object(request.arguments.unwrap_or_default());
    let size = arguments.to_string().len();
    if size > MAX_ARGUMENT_BYTES {
        return Ok(tools::failed_result(format!(
            "the arguments of {name} are {size} bytes, over the limit of {MAX_ARGUMENT_BYTES}: \
             store a large input as an artifact and call the workflow with input_artifact"
        )));
    }
    let mut tool_call = door
        .catalog
        .call_tool(&tool.name, arguments)
        .timeout(door.args.timeout);
    // The client's trace context (`_meta.traceparent`), when it is W3C's, is the run's.
    let traceparent = context.meta.get_traceparent();
    if let Some(tp) = traceparent.and_then(messages::inbound::traceparent) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(messages::headers::TRACEPARENT, tp);
        tool_call = tool_call.headers(headers);
    }
    let started = tool_call.start();
    let call = match started {
        Ok(call) => call,
        Err(e) => return Ok(tools::failed_result(e.to_string())),
    };
    let shape = Shape::of(card.schemas().1.as_ref());
    match follow(call, &context).await {
        Followed::Ended(call) => Ok(ended(door, &tool.name, shape, call).await),
        Followed::Approval(call, request) => {
            // The run waits for its decision: the call is kept (dropping it would cancel
            // the run) until it ends or times out.
            tokio::spawn(async move {
                let _ = call.output().await;
            });
            Ok(tools::approval_result(&request))
        }
        Followed::Cancelled(call) => {
            let ended = call.cancel().await;
            let text = match ended {
                Ok(_) => format!("{name} ended before the cancel reached it"),
                Err(e) => format!("the call of {name} was cancelled: {e}"),
            };
            Ok(tools::failed_result(text))
        }
    }
}

/// How following a call stopped.
enum Followed {
    /// Its progress ended: the call has its answer.
    Ended(Call),
    /// Its run waits at an approval gate.
    Approval(Call, messages::workflow::WorkflowApprovalRequest),
    /// The client cancelled the request.
    Cancelled(Call),
}

/// Forwards `call`'s progress to the client until the call ends, waits for an approval, or
/// the request is cancelled.
async fn follow(mut call: Call, context: &RequestContext<RoleServer>) -> Followed {
    let mut progress = call.progress();
    let token = context.meta.get_progress_token();
    let mut count = 0u32;
    loop {
        tokio::select! {
            () = context.ct.cancelled() => return Followed::Cancelled(call),
            next = progress.next() => match next {
                None => return Followed::Ended(call),
                Some(Progress::ApprovalRequested(request)) => {
                    return Followed::Approval(call, request)
                }
                Some(event) => {
                    let Some(token) = &token else { continue };
                    let Some(message) = describe(&event) else { continue };
                    count += 1;
                    let mut note = ProgressNotificationParam::new(token.clone(), f64::from(count));
                    note.message = Some(message);
                    // A client that went away is seen by the cancellation.
                    let _ = context.peer.notify_progress(note).await;
                }
            }
        }
    }
}

/// A progress event in a line, for the client to show (`None`: nothing worth a line).
fn describe(event: &Progress) -> Option<String> {
    Some(match event {
        Progress::RunStarted(s) => format!("run {} started", s.execution_id),
        Progress::NodeStarted(n) => match &n.agent_name {
            Some(agent) => format!("node {} started (agent {agent})", n.node_id),
            None => format!("node {} started", n.node_id),
        },
        Progress::NodeFinished(r) => {
            let status = serde_json::to_value(r.status).unwrap_or(Value::Null);
            format!(
                "node {} ended: {}",
                r.node_id,
                status.as_str().unwrap_or("?")
            )
        }
        Progress::MapProgress(m) => format!(
            "node {}: {} of {} items",
            m.node_id, m.completed_items, m.total_items
        ),
        Progress::AgentStatus(a) => match &a.text {
            Some(text) => format!("node {}: {text}", a.node_id),
            None => format!("node {}: {}", a.node_id, a.state),
        },
        Progress::RunFinished(_) => "run ended".to_owned(),
        Progress::Status { text, .. } => text.clone(),
        _ => return None,
    })
}

/// The result of a call that ended.
async fn ended(door: &Door, tool: &str, shape: Shape, call: Call) -> CallToolResult {
    match call.output().await {
        Ok(Output::Value(v)) => tools::output_result(shape, v),
        Ok(Output::Stored(uri)) => {
            let store = door
                .catalog
                .mesh()
                .artifacts()
                .max_bytes(MAX_RESOURCE_BYTES);
            let read = store.read_reference(&uri).await;
            let size = read.as_ref().ok().map(|b| b.len() as u64);
            let output = read.ok().and_then(|b| serde_json::from_slice(&b).ok());
            tools::stored_result(shape, tool, &uri, size, output)
        }
        Err(e) => tools::failed_result(error_chain(&ToolError::from_call(tool, e))),
    }
}
