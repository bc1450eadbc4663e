//! The shell's error: one enum whose kinds a caller can match, each keeping its cause.

use crate::core::ExecutionId;

/// What went wrong in the shell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// What `WorkflowNode::start` was given cannot be served: an invalid namespace, two
    /// workflows of one name.
    #[error("{0}")]
    Definition(String),
    /// A stream, consumer or bucket could not be created or found. When the server could
    /// not reserve its byte limit, the message says how to make room.
    #[error("setting up {resource}: {source}{}", no_room_hint(.source.as_ref()))]
    Setup {
        /// The resource, e.g. "stream mesh_WF_Orders".
        resource: String,
        /// The server's or the client's error.
        #[source]
        source: async_nats::Error,
    },
    /// Talking to NATS failed: a publish, a KV read or write, an ack, a lost connection.
    /// Worth retrying.
    #[error("{context}: {source}")]
    Connection {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: async_nats::Error,
    },
    /// A run's entry is larger than may be stored: the server's max payload, or less
    /// when the node is configured so (`Config::max_state_bytes`).
    #[error("run {execution}: its state is {size} bytes, over the limit of {limit} bytes")]
    StateTooLarge {
        /// The run whose commit was refused; it is failed at once (the error is permanent).
        execution: ExecutionId,
        /// Bytes of the encoded entry, after large values were moved to keys of their own.
        size: usize,
        /// Bytes allowed: the smaller of the server's max payload and `max_state_bytes`.
        limit: usize,
    },
    /// A workflow's agent card does not fit in one message even with its visualization
    /// stored apart (its schemas or skills alone are too large).
    #[error(
        "the agent card of {workflow} is {size} bytes without its diagram, over the \
         server's limit of {limit} bytes"
    )]
    CardTooLarge {
        /// Name of the workflow (and of its card).
        workflow: String,
        /// Bytes of the encoded card with its visualization replaced by a reference.
        size: usize,
        /// The server's max payload in bytes (1 MiB when the server reports none).
        limit: usize,
    },
    /// Other replicas moved the run first this many times in a row.
    #[error("run {execution}: {tries} conflicting writes in a row")]
    ConflictsExhausted {
        /// The run whose event is given back to the stream, to be tried again after a delay.
        execution: ExecutionId,
        /// Compare-and-swap attempts made on the one event, all lost to other writers.
        tries: usize,
    },
    /// Another replica claimed the run's final reply a moment ago and is sending it.
    #[error("another replica is sending the final reply of run {0}")]
    FinalReplyClaimed(ExecutionId),
    /// Something a run's entry refers to is not in KV.
    #[error("{0} is missing")]
    Missing(String),
    /// A reference names what the node may not read for it (another bucket than the
    /// mesh's artifacts, or an object over the size limit).
    #[error("{0}")]
    Refused(String),
    /// A stored or received value could not be encoded or decoded.
    #[error("{context}: {source}")]
    Encoding {
        /// What was being encoded or decoded.
        context: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Whether trying again cannot help: the same event would fail the same way.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Error::StateTooLarge { .. } | Error::Encoding { .. } | Error::Definition(_)
        )
    }
}

impl Error {
    /// Whether JetStream refused a write because its store is full: the server's file or
    /// memory store (`max_file_store`, the disk), the account's share, or a stream's
    /// `max_bytes`. It passes once space is made (see `docs/faults.md`), so an event that
    /// met it is tried again for as long as it lasts, never abandoned for it.
    pub fn is_store_full(&self) -> bool {
        store_full(std::error::Error::source(self))
    }

    /// Whether the server refused to make a stream or bucket because it cannot reserve its
    /// byte limit (see `StoreLimits`): trying again does not help until a limit is lowered
    /// or the server's store raised.
    pub(in crate::shell) fn is_no_room(&self) -> bool {
        matches!(self, Error::Setup { .. }) && no_room(std::error::Error::source(self))
    }

    /// A commit refused by a full store, as the client reports a KV write's refusal.
    #[cfg(test)]
    pub(in crate::shell) fn store_full_for_tests() -> Error {
        let api: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": 503, "err_code": 10077, "description": "maximum bytes exceeded"
        }))
        .expect("an API error");
        let publish = async_nats::jetstream::context::PublishError::with_source(
            async_nats::jetstream::context::PublishErrorKind::Other,
            api,
        );
        Error::Connection {
            context: "writing".into(),
            source: publish.into(),
        }
    }
}

/// The shell's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches what was being done to a client or serializer error.
pub(crate) trait Context<T> {
    /// Converts the error into the shell's, saying what was being done.
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<async_nats::Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| {
            let source: async_nats::Error = e.into();
            match source.downcast::<serde_json::Error>() {
                Ok(json) => Error::Encoding {
                    context: what(),
                    source: *json,
                },
                Err(source) => Error::Connection {
                    context: what(),
                    source,
                },
            }
        })
    }
}

impl From<serde_json::Error> for Error {
    fn from(source: serde_json::Error) -> Self {
        Error::Encoding {
            context: "encoding a run".into(),
            source,
        }
    }
}

/// The first JetStream API error in the chain from `cause`: an error's source, or the kind
/// of a stream's creation or update.
fn jetstream_error(
    mut cause: Option<&(dyn std::error::Error + 'static)>,
) -> Option<async_nats::jetstream::Error> {
    use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
    while let Some(e) = cause {
        if let Some(js) = e.downcast_ref::<async_nats::jetstream::Error>() {
            return Some(js.clone());
        }
        if let Some(create) = e.downcast_ref::<CreateStreamError>() {
            if let CreateStreamErrorKind::JetStream(js) = create.kind() {
                return Some(js);
            }
        }
        cause = e.source();
    }
    None
}

/// The codes of the server's refusal to reserve a new stream's byte limit: its file or
/// memory store, or the account's share, is spoken for by the limits of the streams it
/// holds. Nothing passing clears it.
const NO_ROOM: [async_nats::jetstream::ErrorCode; 3] = [
    async_nats::jetstream::ErrorCode::STORAGE_RESOURCES_EXCEEDED,
    async_nats::jetstream::ErrorCode::MEMORY_RESOURCES_EXCEEDED,
    async_nats::jetstream::ErrorCode::ACCOUNT_RESOURCES_EXCEEDED,
];

/// Whether the first JetStream API error in the chain from `cause` is a full store (see
/// [`Error::is_store_full`]).
fn store_full(cause: Option<&(dyn std::error::Error + 'static)>) -> bool {
    use async_nats::jetstream::ErrorCode;
    let Some(js) = jetstream_error(cause) else {
        return false;
    };
    let code = js.error_code();
    let bytes =
        code == ErrorCode::STREAM_STORE_FAILED && js.to_string().contains("maximum bytes exceeded");
    bytes || code == ErrorCode::INSUFFICIENT_RESOURCES || NO_ROOM.contains(&code)
}

/// Whether the first JetStream API error in the chain from `cause` is one of [`NO_ROOM`].
fn no_room(cause: Option<&(dyn std::error::Error + 'static)>) -> bool {
    jetstream_error(cause).is_some_and(|js| NO_ROOM.contains(&js.error_code()))
}

/// What to do when a stream or bucket could not be made for want of room: every one the
/// node makes reserves its byte limit against the server's store when it is made.
fn no_room_hint(source: &(dyn std::error::Error + Send + Sync + 'static)) -> &'static str {
    let source: &(dyn std::error::Error + 'static) = source;
    if no_room(Some(source)) {
        "; the server cannot reserve this store's byte limit beside the limits it already \
         holds: lower the node's limits (`serve --store-limit NAME=BYTES`, listed in \
         docs/security.md) or raise the server's JetStream `max_file_store`"
    } else {
        ""
    }
}
