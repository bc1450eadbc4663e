//! Errors, one enum per boundary: [`AgentError`] (what a handler returns), [`ServeError`]
//! (starting an agent), [`ArtifactError`] (the object store), [`CallError`] (calling an
//! agent or a workflow), and what those carry: [`ConnectionError`] (talking to the NATS
//! server), [`MalformedReply`] (a final reply that cannot be read), [`RoundtripError`].

use std::time::Duration;

use messages::{SubjectError, TaskState};

/// The failure of a handler: a message for people and an optional machine-readable kind
/// (matched by workflows against a node's `non_retryable_errors`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AgentError {
    /// What went wrong.
    pub message: String,
    /// A machine-readable kind such as `transient` or `bad_input`.
    pub kind: Option<String>,
}

impl AgentError {
    /// An error without a kind.
    pub fn new(message: impl Into<String>) -> Self {
        AgentError {
            message: message.into(),
            kind: None,
        }
    }

    /// An error with a kind.
    pub fn with_kind(message: impl Into<String>, kind: impl Into<String>) -> Self {
        AgentError {
            message: message.into(),
            kind: Some(kind.into()),
        }
    }
}

impl From<String> for AgentError {
    fn from(message: String) -> Self {
        AgentError::new(message)
    }
}

impl From<&str> for AgentError {
    fn from(message: &str) -> Self {
        AgentError::new(message)
    }
}

/// Why an agent could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The agent's name is not one subject token.
    #[error("agent name: {0}")]
    InvalidName(SubjectError),
    /// The namespace is not a valid subject prefix.
    #[error("namespace: {0}")]
    InvalidNamespace(SubjectError),
    /// No handler was given to the builder.
    #[error("agent {0}: no handler given")]
    NoHandler(String),
    /// The input or output schema does not compile.
    #[error("agent {agent}: {which} is not a valid JSON Schema: {reason}")]
    InvalidSchema {
        /// The agent's name.
        agent: String,
        /// `input_schema` or `output_schema`.
        which: &'static str,
        /// The schema compiler's complaint.
        reason: String,
    },
    /// A remote agent's URL, token or card did not pass its checks.
    #[error(transparent)]
    Remote(#[from] crate::remote::RemoteError),
    /// An LLM agent cannot start (its API key is missing, ...); the reason never holds
    /// the key.
    #[error("{reason}")]
    Llm {
        /// The agent's name.
        agent: String,
        /// What is missing, naming the variable or file.
        reason: String,
    },
    /// Subscribing or flushing failed.
    #[error("agent {agent}: subscribing to {subject}: {reason}")]
    Subscribe {
        /// The agent's name.
        agent: String,
        /// The request, cancel or ping subject that could not be subscribed to.
        subject: String,
        /// The client's error, as text.
        reason: String,
    },
}

/// A failure reading or writing an artifact in the JetStream object store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// The URI is not `nats-object://{bucket}/{name}`.
    #[error("not an object-store reference: {0:?} (expected nats-object://BUCKET/NAME)")]
    BadUri(String),
    /// The bucket could not be opened or created.
    #[error("object-store bucket {bucket}: {reason}")]
    Bucket {
        /// The bucket (`{ns}_artifacts` unless a URI names another).
        bucket: String,
        /// The client's error, as text.
        reason: String,
    },
    /// The reference names a bucket other than the store's: refused, as a reader may be
    /// able to read buckets (its own among them) that whoever sent the reference may not.
    #[error(
        "artifact '{name}' is in bucket '{bucket}': references may name only the mesh's \
         artifact bucket '{own}'"
    )]
    ForeignBucket {
        /// The bucket the reference names.
        bucket: String,
        /// The object's name in it.
        name: String,
        /// The store's own bucket.
        own: String,
    },
    /// The object does not exist.
    #[error("reading artifact {bucket}/{name}: not found")]
    NotFound {
        /// The bucket.
        bucket: String,
        /// The object's name in the bucket.
        name: String,
    },
    /// Reading the object failed.
    #[error("reading artifact {bucket}/{name}: {reason}")]
    Read {
        /// The bucket (`{ns}_artifacts` unless a URI names another).
        bucket: String,
        /// The object's name in the bucket (`{task_id}/{file}` for an agent's output).
        name: String,
        /// The client's error, as text.
        reason: String,
    },
    /// Writing the object failed.
    #[error("writing artifact {bucket}/{name}: {reason}")]
    Write {
        /// The bucket (`{ns}_artifacts` unless a URI names another).
        bucket: String,
        /// The object's name in the bucket (`{task_id}/{file}` for an agent's output).
        name: String,
        /// The client's error, as text.
        reason: String,
    },
    /// The object is larger than we are willing to load.
    #[error("artifact {bucket}/{name} is {size} bytes, above the limit of {limit}")]
    TooLarge {
        /// The bucket (`{ns}_artifacts` unless a URI names another).
        bucket: String,
        /// The object's name in the bucket (`{task_id}/{file}` for an agent's output).
        name: String,
        /// Its size in bytes, as the object store reports it.
        size: usize,
        /// The largest size loaded, in bytes.
        limit: usize,
    },
    /// The object's content is not JSON.
    #[error("artifact {bucket}/{name} is not JSON: {reason}")]
    NotJson {
        /// The bucket (`{ns}_artifacts` unless a URI names another).
        bucket: String,
        /// The object's name in the bucket (`{task_id}/{file}` for an agent's output).
        name: String,
        /// The parse error.
        reason: String,
    },
}

/// Why a call ([`crate::Call`]) returned no output.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The agent name or namespace cannot be put into a subject.
    #[error("invalid subject: {0}")]
    InvalidSubject(SubjectError),
    /// Nobody serves the agent.
    #[error("no agent {0} is serving on the mesh")]
    NoResponders(String),
    /// No final reply within the timeout, although the request was resent.
    #[error("agent {agent} did not answer in time (request sent {sends} times)")]
    TimedOut {
        /// The agent called.
        agent: String,
        /// How often the request went out (once, plus each resend after silence).
        sends: u32,
    },
    /// The request could not be sent: subscribing, publishing or flushing failed.
    #[error("request to {agent} failed")]
    Connection {
        /// The agent called.
        agent: String,
        /// The operation that failed.
        #[source]
        source: ConnectionError,
    },
    /// The agent answered with a failed or canceled task.
    #[error("agent {agent} failed: {message}")]
    Failed {
        /// The agent called.
        agent: String,
        /// Its error message (`canceled` for a canceled task).
        message: String,
        /// Its error kind (`error_kind`), when given: what a workflow matches against
        /// `non_retryable_errors`.
        kind: Option<String>,
        /// Schema violations, when the failure was a validation failure.
        validation_errors: Vec<String>,
        /// For a workflow, the node whose failure failed the run (from its last progress
        /// update, when the caller received it).
        node: Option<String>,
    },
    /// The agent answered that the call was canceled (after a `tasks/cancel`, ours or
    /// anyone's).
    #[error("the call to {agent} was canceled")]
    Canceled {
        /// The agent called.
        agent: String,
    },
    /// The agent answered with a JSON-RPC error: it refused the request or could not
    /// parse it.
    #[error("agent {agent} answered with error {code}: {message}")]
    Rpc {
        /// The agent called.
        agent: String,
        /// The JSON-RPC error code (see `messages::jsonrpc::codes`).
        code: i64,
        /// The error message.
        message: String,
    },
    /// The reply could not be understood.
    #[error("agent {agent} sent an invalid reply")]
    InvalidReply {
        /// The agent called.
        agent: String,
        /// What was wrong with it.
        #[source]
        source: MalformedReply,
    },
    /// The input or the output artifact could not be transferred.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
}

/// Talking to the NATS server failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The reply or status inbox could not be subscribed to.
    #[error("subscribing to an inbox")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// The request could not be published.
    #[error("publishing the request")]
    Publish(#[source] async_nats::PublishError),
    /// The request could not be flushed to the server.
    #[error("flushing the request")]
    Flush(#[source] async_nats::client::FlushError),
    /// The timeout passed while the client was not connected to any server.
    #[error("lost the connection to the NATS server (not back within {} s)", .timeout.as_secs_f64())]
    Lost {
        /// The exchange's timeout.
        timeout: Duration,
    },
}

/// A final reply that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MalformedReply {
    /// The message on the reply inbox is not a JSON-RPC response.
    #[error("not a JSON-RPC response")]
    NotJsonRpc(#[source] serde_json::Error),
    /// Its `workflow_node_result` DataPart does not parse.
    #[error("malformed workflow_node_result")]
    NodeResult(#[source] serde_json::Error),
    /// The final task is in a state that is not terminal.
    #[error("the final task is in state {0:?}")]
    NotTerminal(TaskState),
}

/// Why [`crate::Mesh::roundtrip`] could not confirm that the server has taken what was sent.
#[derive(Debug, thiserror::Error)]
pub enum RoundtripError {
    /// The inbox for the message could not be subscribed to.
    #[error("subscribing to an inbox")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// The message could not be published.
    #[error("publishing to the server")]
    Publish(#[source] async_nats::PublishError),
    /// The message did not come back within ten seconds.
    #[error("the server did not answer within {} s", crate::roundtrip::ROUNDTRIP_TIMEOUT.as_secs())]
    TimedOut,
}
