//! Protocol types for the agent mesh: A2A messages and parts, agent cards, the workflow
//! DataParts, subject names and header names. No I/O and no async runtime.
//!
//! - [`a2a`]: A2A 0.3 [`Message`], [`Part`], [`Task`], [`TaskStatusUpdateEvent`].
//! - [`jsonrpc`]: the JSON-RPC 2.0 envelope ([`Request`], [`Response`], error codes).
//! - [`card`]: the [`AgentCard`] and its extensions (agent type, schemas, visualization).
//! - [`workflow`]: the workflow DataParts (`workflow_node_request`, ...).
//! - [`subjects`]: every NATS subject, built by functions.
//! - [`headers`]: NATS header names.
//!
//! Wire types never deny unknown fields: messages from other agents may carry more.

pub mod a2a;
pub mod card;
pub mod headers;
pub mod jsonrpc;
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
    WorkflowApprovalDecision, WorkflowApprovalRequest, WorkflowDataPart, WorkflowExecutionResult,
    WorkflowExecutionStart, WorkflowMapProgress, WorkflowNodeExecutionResult,
    WorkflowNodeExecutionStart, WorkflowNodeRequest, WorkflowNodeResult,
};
