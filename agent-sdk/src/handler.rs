//! What an agent implements: the [`Handler`] trait (or a closure through [`handler_fn`]),
//! called with a [`NodeRequest`] that the SDK has already decoded and validated.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::HeaderMap;
use serde_json::Value;

use crate::error::AgentError;

/// The result of a handler: the output, or an error with an optional kind.
pub type HandlerResult = Result<Value, AgentError>;

/// One decoded request, as a handler sees it.
#[derive(Debug, Clone)]
pub struct NodeRequest {
    /// The input: unwrapped when it travelled wrapped, loaded when it travelled as an
    /// object-store reference, and valid against the effective input schema.
    pub input: Value,
    /// The instruction (the request's text parts), when there is one.
    pub instruction: Option<String>,
    /// Who called, when the caller is a workflow (the request carried a
    /// `workflow_node_request`).
    pub workflow: Option<WorkflowCallInfo>,
    /// The task id of this call (a workflow's sub-task id, or the caller's task or request
    /// id); a `tasks/cancel` names it.
    pub task_id: String,
    /// The A2A context id (a workflow's execution id).
    pub context_id: String,
    /// The request message's id.
    pub message_id: String,
    /// The request's NATS headers (trace context, call depth, ...).
    pub headers: HeaderMap,
    /// The name of the agent serving the request (empty in [`NodeRequest::new`]): the
    /// `Mesh-Caller` of its onward calls.
    pub agent: String,
    /// Where [`NodeRequest::send_status`] publishes (none in [`NodeRequest::new`], or when
    /// the caller asked for no status updates).
    pub(crate) status: Option<StatusSink>,
}

/// Where a running call's status updates go: the caller's `Mesh-Status-To`, with the
/// JSON-RPC id and task the updates must name.
#[derive(Clone)]
pub(crate) struct StatusSink {
    pub(crate) client: async_nats::Client,
    pub(crate) subject: String,
    pub(crate) request_id: messages::RequestId,
    pub(crate) headers: HeaderMap,
    /// The call's token, which proves each update (see [`messages::call_proof`]).
    pub(crate) token: Option<String>,
}

impl std::fmt::Debug for StatusSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusSink")
            .field("subject", &self.subject)
            .finish()
    }
}

/// The workflow side of a call: which run, node and attempt asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowCallInfo {
    /// The calling workflow.
    pub workflow_name: String,
    /// The node being run.
    pub node_id: String,
    /// The run's execution id (also the request's context id).
    pub execution_id: String,
    /// `{execution}_{node}_{slot}_{attempt}`: deterministic per attempt.
    pub sub_task_id: String,
    /// The attempt (1-based), from the request or the sub-task id's last token.
    pub attempt: Option<u32>,
    /// The map item index, inside a map.
    pub map_index: Option<u64>,
    /// The loop iteration, inside a loop.
    pub loop_iteration: Option<u64>,
}

impl WorkflowCallInfo {
    /// The sub-task id without its attempt: the same for every attempt of one node in one
    /// run, map item and loop iteration.
    pub fn slot_key(&self) -> &str {
        messages::sub_task::slot_key(&self.sub_task_id)
    }
}

impl NodeRequest {
    /// A request with `input` and nothing else (for unit tests of handlers).
    pub fn new(input: Value) -> Self {
        NodeRequest {
            input,
            instruction: None,
            workflow: None,
            task_id: String::new(),
            context_id: String::new(),
            message_id: String::new(),
            headers: HeaderMap::new(),
            agent: String::new(),
            status: None,
        }
    }

    /// Tells the caller how the call is going: a `working` status update whose message
    /// carries `text`, published to the request's `Mesh-Status-To`. A workflow node
    /// forwards it to the run's callers (`workflow_agent_status`), and `workflow-node run`
    /// and `runs watch` show it. Best effort, like every status update: `Ok(false)` when
    /// the caller asked for none (or the request was made with [`NodeRequest::new`]).
    pub async fn send_status(
        &self,
        text: impl Into<String>,
    ) -> Result<bool, async_nats::PublishError> {
        self.send_status_parts(vec![messages::Part::text(text)])
            .await
    }

    /// [`NodeRequest::send_status`] with any parts (a DataPart with structured progress,
    /// for instance).
    pub async fn send_status_parts(
        &self,
        parts: Vec<messages::Part>,
    ) -> Result<bool, async_nats::PublishError> {
        let Some(sink) = &self.status else {
            return Ok(false);
        };
        let mut message = messages::Message::new(
            format!("{}-status-{}", self.task_id, uuid::Uuid::new_v4().simple()),
            messages::Role::Agent,
            parts,
        );
        message.task_id = Some(self.task_id.clone());
        message.context_id = Some(self.context_id.clone());
        let mut status = messages::TaskStatus::new(messages::TaskState::Working);
        status.message = Some(message);
        let update = messages::TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status,
            is_final: false,
            metadata: None,
        };
        let response = messages::Response::result(
            sink.request_id.clone(),
            messages::AgentReply::StatusUpdate(update),
        );
        let bytes = serde_json::to_vec(&response).expect("a status update serialises to JSON");
        let mut headers = sink.headers.clone();
        if let Some(token) = &sink.token {
            let mac = messages::call_proof::mac(token, &sink.subject, &bytes);
            headers.insert(messages::call_proof::CALL_MAC, mac.as_str());
        }
        sink.client
            .publish_with_headers(sink.subject.clone(), headers, bytes.into())
            .await?;
        Ok(true)
    }

    /// What identifies "the same call" across retries: for a workflow's call the sub-task
    /// id without the attempt (run, node, map index, loop iteration); for a plain call the
    /// message id.
    pub fn call_key(&self) -> &str {
        match &self.workflow {
            Some(w) => w.slot_key(),
            None => &self.message_id,
        }
    }

    /// Headers for a call this handler makes onward (an agent calling a workflow as a
    /// tool): the trace context (the current span's, when traces are exported: called
    /// from the handler, its `agent.handle` span; else the request's, passed through),
    /// `Mesh-Call-Depth` one higher, and this
    /// agent's name as `Mesh-Caller` (so the workflow keeps its task ids apart from other
    /// callers').
    pub fn onward_headers(&self) -> HeaderMap {
        let mut out = HeaderMap::new();
        crate::protocol::pass_trace_context(&self.headers, &mut out);
        crate::telemetry::inject_current(&mut out);
        let depth = self
            .headers
            .get(messages::headers::CALL_DEPTH)
            .and_then(|v| v.as_str().trim().parse::<u32>().ok())
            .unwrap_or(0);
        out.insert(
            messages::headers::CALL_DEPTH,
            depth.saturating_add(1).to_string().as_str(),
        );
        if !self.agent.is_empty() {
            out.insert(messages::headers::CALLER, self.agent.as_str());
        }
        out
    }
}

/// An agent's behaviour. Implement it with `async fn handle(&self, req: NodeRequest) ->
/// HandlerResult`; each request runs in its own tokio task, so `&self` is shared between
/// concurrent calls.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request: the output, or an error (with a kind when the caller should be
    /// able to tell failures apart).
    fn handle(&self, req: NodeRequest) -> impl Future<Output = HandlerResult> + Send;
}

/// A [`Handler`] made from an async closure; see [`handler_fn`].
#[derive(Clone)]
pub struct FnHandler<F>(F);

impl<F> std::fmt::Debug for FnHandler<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnHandler")
    }
}

/// A handler from a closure returning a future:
/// `handler_fn(|req| async move { Ok(req.input) })`.
pub fn handler_fn<F, Fut>(f: F) -> FnHandler<F>
where
    F: Fn(NodeRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    FnHandler(f)
}

impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(NodeRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn handle(&self, req: NodeRequest) -> impl Future<Output = HandlerResult> + Send {
        (self.0)(req)
    }
}

/// A boxed handler future.
pub(crate) type BoxedResult = Pin<Box<dyn Future<Output = HandlerResult> + Send + 'static>>;

/// The object-safe form of [`Handler`] that the server stores.
pub(crate) trait DynHandler: Send + Sync + 'static {
    fn call(self: Arc<Self>, req: NodeRequest) -> BoxedResult;
}

impl<H: Handler> DynHandler for H {
    fn call(self: Arc<Self>, req: NodeRequest) -> BoxedResult {
        Box::pin(async move { self.handle(req).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onward_headers_pass_trace_and_count_the_hop() {
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut req = NodeRequest::new(Value::Null);
        req.headers.insert("traceparent", TP);
        req.headers.insert("tracestate", "rojo=00f067aa0ba902b7");
        req.headers.insert(messages::headers::CALL_DEPTH, "2");
        let h = req.onward_headers();
        assert_eq!(h.get("traceparent").unwrap().as_str(), TP);
        assert_eq!(
            h.get("tracestate").unwrap().as_str(),
            "rojo=00f067aa0ba902b7"
        );
        assert_eq!(h.get(messages::headers::CALL_DEPTH).unwrap().as_str(), "3");
    }

    #[test]
    fn a_malformed_trace_context_is_not_passed_on() {
        let mut req = NodeRequest::new(Value::Null);
        req.headers.insert("traceparent", "00-abc-def-01");
        req.headers.insert("tracestate", "Not A Tracestate");
        let h = req.onward_headers();
        assert_eq!(h.get("traceparent"), None);
        assert_eq!(h.get("tracestate"), None);
    }
}
