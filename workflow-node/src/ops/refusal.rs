//! Why an operation did not happen, as a kind a face can `match` on (the CLI turns it into
//! an exit code, the web view into an HTTP status) and the message people read. The kind
//! never comes from the message's wording: it is the node's JSON-RPC code when the node
//! answered with one, else what the operation itself found.

use messages::jsonrpc::{codes, ErrorObject};

/// What kind of refusal: the faces map each to their own words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The run, definition or workflow named does not exist (or no longer does).
    NotFound,
    /// The key the request is signed with (or its absence) may not do this.
    NotPermitted,
    /// The run (or definition) is not in a state that allows it: already ended, already
    /// paused, not waiting, still in use.
    Conflict,
    /// No workflow node serves the workflow now: nothing was sent.
    NoResponder,
    /// What was asked is malformed or names something that cannot be asked for.
    Invalid,
    /// The mesh could not be reached or read (a connection, a request, a stream).
    Unavailable,
    /// Something failed that is nobody's refusal: an answer that cannot be read, an
    /// internal error of the node.
    Failed,
}

impl RefusalKind {
    /// The kind the node means by JSON-RPC error `code`.
    pub fn of_code(code: i64) -> RefusalKind {
        match code {
            codes::TASK_NOT_FOUND => RefusalKind::NotFound,
            codes::NOT_PERMITTED => RefusalKind::NotPermitted,
            codes::TASK_NOT_CANCELABLE | codes::CONFLICT => RefusalKind::Conflict,
            codes::PARSE_ERROR
            | codes::INVALID_REQUEST
            | codes::METHOD_NOT_FOUND
            | codes::INVALID_PARAMS
            | codes::UNSUPPORTED_OPERATION
            | codes::CONTENT_TYPE_NOT_SUPPORTED => RefusalKind::Invalid,
            _ => RefusalKind::Failed,
        }
    }

    /// Whether this is a refusal of what was asked (the faces say so and stop), rather
    /// than a failure to ask at all (the mesh or the node broke).
    pub fn is_refusal(self) -> bool {
        !matches!(self, RefusalKind::Unavailable | RefusalKind::Failed)
    }
}

/// An operation that did not happen: its kind, what to tell people, and the node's
/// JSON-RPC code when the node answered with one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// What kind of refusal.
    pub kind: RefusalKind,
    /// What to tell people.
    pub message: String,
    /// The node's JSON-RPC error code, when the refusal is the node's JSON-RPC error.
    pub code: Option<i64>,
}

impl Refusal {
    /// A refusal of `kind` found here (no node's code).
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            message: message.into(),
            code: None,
        }
    }

    /// [`RefusalKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::NotFound, message)
    }

    /// [`RefusalKind::Conflict`].
    pub fn conflict(message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Conflict, message)
    }

    /// [`RefusalKind::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Invalid, message)
    }

    /// [`RefusalKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Unavailable, message)
    }

    /// [`RefusalKind::Failed`].
    pub fn failed(message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Failed, message)
    }

    /// The node's JSON-RPC error, with its code kept and its kind read from it.
    pub fn from_node(error: &ErrorObject) -> Refusal {
        Refusal {
            kind: RefusalKind::of_code(error.code),
            message: error.message.clone(),
            code: Some(error.code),
        }
    }
}

impl From<crate::shell::Error> for Refusal {
    fn from(e: crate::shell::Error) -> Refusal {
        Refusal::unavailable(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_codes_name_their_kinds() {
        let kind = RefusalKind::of_code;
        assert_eq!(kind(codes::TASK_NOT_FOUND), RefusalKind::NotFound);
        assert_eq!(kind(codes::NOT_PERMITTED), RefusalKind::NotPermitted);
        assert_eq!(kind(codes::TASK_NOT_CANCELABLE), RefusalKind::Conflict);
        assert_eq!(kind(codes::INVALID_PARAMS), RefusalKind::Invalid);
        assert_eq!(kind(codes::INVALID_REQUEST), RefusalKind::Invalid);
        assert_eq!(kind(codes::INTERNAL_ERROR), RefusalKind::Failed);
        assert_eq!(kind(-1), RefusalKind::Failed);
    }

    #[test]
    fn a_node_error_keeps_its_code_and_message() {
        let e = ErrorObject::new(codes::NOT_PERMITTED, "takes an operator's signature");
        let r = Refusal::from_node(&e);
        assert_eq!(r.kind, RefusalKind::NotPermitted);
        assert_eq!(r.code, Some(codes::NOT_PERMITTED));
        assert_eq!(r.to_string(), "takes an operator's signature");
    }

    #[test]
    fn only_failures_to_ask_are_not_refusals() {
        assert!(RefusalKind::Conflict.is_refusal());
        assert!(RefusalKind::NoResponder.is_refusal());
        assert!(!RefusalKind::Unavailable.is_refusal());
        assert!(!RefusalKind::Failed.is_refusal());
    }
}
