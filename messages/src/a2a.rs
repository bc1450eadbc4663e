//! A2A 0.3 wire shapes: [`Message`], [`Part`], [`Task`] and [`TaskStatusUpdateEvent`].
//!
//! Field names are camelCase and every object carries its `kind` discriminator. Unknown
//! fields are ignored on input, so messages from newer or richer agents still parse.

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A JSON object: the type of `metadata` fields and of a DataPart's `data`.
pub type JsonObject = Map<String, Value>;

/// Who sent a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The caller (a user, a gateway, or an agent calling another agent).
    User,
    /// The agent answering.
    Agent,
}

/// One A2A message: `{kind:"message", messageId, role, parts, taskId?, contextId?, metadata?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "message", rename_all = "camelCase")]
pub struct Message {
    /// Unique id of this message, chosen by its sender.
    pub message_id: String,
    /// Who sent it.
    pub role: Role,
    /// The content, in order.
    pub parts: Vec<Part>,
    /// The task this message belongs to, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The conversation (context) this message belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

impl Message {
    /// A message from `role` with the given parts and no task, context or metadata.
    pub fn new(message_id: impl Into<String>, role: Role, parts: Vec<Part>) -> Self {
        Message {
            message_id: message_id.into(),
            role,
            parts,
            task_id: None,
            context_id: None,
            metadata: None,
        }
    }

    /// The first DataPart whose `type` is `T::TYPE`, parsed as `T`; `None` when there is none.
    pub fn find_data<T: DataPartType + DeserializeOwned>(
        &self,
    ) -> Option<Result<T, serde_json::Error>> {
        find_data(&self.parts)
    }

    /// The text of every TextPart, joined with newlines.
    pub fn text(&self) -> String {
        joined_text(&self.parts)
    }
}

/// A typed DataPart payload: a struct whose JSON object carries `"type": TYPE`.
pub trait DataPartType {
    /// The value of the payload's `type` field.
    const TYPE: &'static str;
    /// Other `type` values read as this payload (the reference implementation's names).
    const ALIASES: &'static [&'static str] = &[];

    /// Whether `t` names this payload: its [`TYPE`](Self::TYPE) or one of its aliases.
    fn is_type(t: &str) -> bool {
        t == Self::TYPE || Self::ALIASES.contains(&t)
    }
}

/// The first DataPart of `parts` whose `type` is `T::TYPE` (or one of `T::ALIASES`),
/// parsed as `T`.
pub fn find_data<T: DataPartType + DeserializeOwned>(
    parts: &[Part],
) -> Option<Result<T, serde_json::Error>> {
    parts.iter().find_map(|p| match p {
        Part::Data { data, .. }
            if data
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(T::is_type) =>
        {
            Some(serde_json::from_value(Value::Object(data.clone())))
        }
        _ => None,
    })
}

pub(crate) fn joined_text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One piece of content, discriminated by `kind`: text, a file, or a JSON object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Part {
    /// `{kind:"text", text}`.
    Text {
        /// The text; in a request, all text parts together are the instruction.
        text: String,
        /// Free-form metadata.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
    /// `{kind:"file", file:{bytes?|uri?, name?, mimeType?}}`.
    File {
        /// The file, inline or by reference.
        file: FileContent,
        /// Free-form metadata.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
    /// `{kind:"data", data:{...}}`: `data` is always a JSON object.
    Data {
        /// The payload; a value that is not an object travels as `{"value": ...}` with
        /// `mesh_wrapped` in `metadata` (see [`crate::payload`]).
        data: JsonObject,
        /// Free-form metadata.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
}

impl Part {
    /// A TextPart without metadata.
    pub fn text(text: impl Into<String>) -> Self {
        Part::Text {
            text: text.into(),
            metadata: None,
        }
    }

    /// A DataPart without metadata.
    pub fn data(data: JsonObject) -> Self {
        Part::Data {
            data,
            metadata: None,
        }
    }

    /// A DataPart carrying a typed payload (one of the workflow DataParts).
    pub fn data_part<T: DataPartType + Serialize>(payload: &T) -> Self {
        // Every DataPartType is a struct with string keys, so it always serialises to an
        // object; anything else is a bug in this crate, not bad input.
        match serde_json::to_value(payload) {
            Ok(Value::Object(data)) => Part::data(data),
            other => panic!(
                "DataPartType {} must serialise to an object: {other:?}",
                T::TYPE
            ),
        }
    }

    /// A FilePart referring to `uri`.
    pub fn file_uri(
        uri: impl Into<String>,
        name: Option<String>,
        mime_type: Option<String>,
    ) -> Self {
        Part::File {
            file: FileContent {
                bytes: None,
                uri: Some(uri.into()),
                name,
                mime_type,
            },
            metadata: None,
        }
    }

    /// The payload of a DataPart.
    pub fn as_data(&self) -> Option<&JsonObject> {
        match self {
            Part::Data { data, .. } => Some(data),
            _ => None,
        }
    }

    /// The text of a TextPart.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Part::Text { text, .. } => Some(text),
            _ => None,
        }
    }
}

/// The `file` of a FilePart: inline base64 `bytes` or a `uri`, with an optional name and
/// media type.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    /// The content, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
    /// Where the content lives (for us: an object-store reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// The file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The media type, e.g. `application/json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// The lifecycle state of a [`Task`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Received, not yet started.
    Submitted,
    /// Accepted and running: not terminal, more status updates follow.
    Working,
    /// Waiting for more input from the caller (for us: an approval gate).
    InputRequired,
    /// Finished successfully.
    Completed,
    /// Stopped by a `tasks/cancel` before it finished; terminal.
    Canceled,
    /// Finished with an error.
    Failed,
    /// Refused by the agent.
    Rejected,
    /// Waiting for authentication.
    AuthRequired,
    /// Unknown state.
    Unknown,
}

impl TaskState {
    /// Completed, canceled, failed and rejected tasks never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Canceled | TaskState::Failed | TaskState::Rejected
        )
    }
}

/// `status` of a task: its state, an optional message and an ISO 8601 timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    /// Where the task is; once terminal (see [`TaskState::is_terminal`]) it never changes.
    pub state: TaskState,
    /// A message explaining the state (e.g. the error of a failed task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When the state was entered, ISO 8601.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

impl TaskStatus {
    /// A status with only a state.
    pub fn new(state: TaskState) -> Self {
        TaskStatus {
            state,
            message: None,
            timestamp: None,
        }
    }
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Unique id within the task.
    pub artifact_id: String,
    /// A human-readable name for display; the identifier is `artifact_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Human-readable text about the artifact, for display only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The content; [`Task::find_data`] looks here after the status message.
    pub parts: Vec<Part>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// A task: `{kind:"task", id, contextId, status, artifacts?, metadata?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "task", rename_all = "camelCase")]
pub struct Task {
    /// The task's id: what `tasks/get` and `tasks/cancel` name.
    pub id: String,
    /// The context (conversation) id.
    pub context_id: String,
    /// The current status.
    pub status: TaskStatus,
    /// What the task produced, searched after the status message by [`Task::find_data`];
    /// `None` while it produced nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<Artifact>>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

impl Task {
    /// The first DataPart of type `T` in the status message, then in the artifacts.
    pub fn find_data<T: DataPartType + DeserializeOwned>(
        &self,
    ) -> Option<Result<T, serde_json::Error>> {
        self.status
            .message
            .as_ref()
            .and_then(|m| m.find_data())
            .or_else(|| {
                self.artifacts
                    .iter()
                    .flatten()
                    .find_map(|a| find_data(&a.parts))
            })
    }
}

/// A status update: `{kind:"status-update", taskId, contextId, status, final, metadata?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "status-update", rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The task this update is about.
    pub task_id: String,
    /// Its context id.
    pub context_id: String,
    /// The new status (progress DataParts travel in `status.message`).
    pub status: TaskStatus,
    /// True on the last event of the stream.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Anything an agent sends back: a message, a task or a status update, told apart by
/// `kind`.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentReply {
    /// `kind: "message"`.
    Message(Message),
    /// `kind: "task"`.
    Task(Task),
    /// `kind: "status-update"`.
    StatusUpdate(TaskStatusUpdateEvent),
}

impl Serialize for AgentReply {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Each variant's own Serialize already writes its `kind`.
        match self {
            AgentReply::Message(m) => m.serialize(s),
            AgentReply::Task(t) => t.serialize(s),
            AgentReply::StatusUpdate(u) => u.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for AgentReply {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .ok_or_else(|| D::Error::missing_field("kind"))?
            .to_owned();
        let parsed = match kind.as_str() {
            "message" => serde_json::from_value(value).map(AgentReply::Message),
            "task" => serde_json::from_value(value).map(AgentReply::Task),
            "status-update" => serde_json::from_value(value).map(AgentReply::StatusUpdate),
            other => {
                return Err(D::Error::unknown_variant(
                    other,
                    &["message", "task", "status-update"],
                ))
            }
        };
        parsed.map_err(D::Error::custom)
    }
}
