//! Protocol types for the agent mesh: A2A messages and parts, agent cards, the workflow
//! DataParts, subject names and header names. No I/O and no async runtime.
//!
//! - [`a2a`]: A2A 0.3 [`Message`], [`Part`], [`Task`], [`TaskStatusUpdateEvent`].
//! - [`call_proof`]: the per-call token and the MACs proving replies made with it.
//! - [`jsonrpc`]: the JSON-RPC 2.0 envelope ([`Request`], [`Response`], error codes).
//! - [`card`]: the [`AgentCard`] and its extensions (agent type, schemas, visualization).
//! - [`workflow`]: the workflow DataParts (`workflow_node_request`, ...).
//! - [`control`]: pausing, resuming and retrying a run (`workflow_run_control`, `workflow_retry`).
//! - [`signal`]: data sent into a running run for its `wait` nodes (`workflow_signal`).
//! - [`payload`]: how values travel in parts (wrapping, `nats-object://` references).
//! - [`reply`]: reading a final reply into an output or a failure.
//! - [`sub_task`]: the sub-task id a workflow node gives each attempt of a call.
//! - [`subjects`]: every NATS subject, built by functions (`$KV.` ones included).
//! - [`hooks`]: webhook deliveries forwarded from an HTTP door to the node that
//!   declares the hook.
//! - [`headers`]: NATS header names; [`msg_id`]: the de-duplication ids they carry.
//! - [`inbound`]: header values from outside, capped and checked (trace context to W3C's
//!   grammar) before use.
//!
//! Wire types never deny unknown fields: messages from other agents may carry more.

pub mod a2a;
pub mod call_proof;
pub mod card;
pub mod control;
pub mod headers;
pub mod hooks;
pub mod inbound;
pub mod jsonrpc;
pub mod msg_id;
pub mod payload;
pub mod reply;
pub mod signal;
pub mod sub_task;
pub mod subjects;
pub mod workflow;

pub use a2a::{
    AgentReply, Artifact, DataPartType, FileContent, JsonObject, Message, Part, Role, Task,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
pub use card::{AgentCapabilities, AgentCard, AgentExtension, AgentSkill};
pub use jsonrpc::{ErrorObject, Method, Outcome, Request, RequestId, Response};
pub use subjects::SubjectError;
pub use workflow::{
    ArtifactRef, Decision, MapStatus, NodeOutcome, ResultStatus, RunOutcome, SwitchCaseInfo,
    WorkflowAgentStatus, WorkflowApprovalDecision, WorkflowApprovalRequest, WorkflowDataPart,
    WorkflowExecutionResult, WorkflowExecutionStart, WorkflowMapProgress,
    WorkflowNodeExecutionResult, WorkflowNodeExecutionStart, WorkflowNodeRequest,
    WorkflowNodeResult,
};
