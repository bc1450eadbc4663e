//! Errors of parsing and evaluating expressions.

/// What went wrong in a template, a condition or a duration. The message names the
/// offending text so that a user can find it in the workflow file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// The text does not parse.
    #[error("cannot parse {what} '{text}': {reason}")]
    Parse {
        /// What was being parsed ("template", "condition", "path", "duration").
        what: &'static str,
        /// The offending text (truncated when long).
        text: String,
        /// Why it does not parse.
        reason: String,
    },
    /// The expression parses but cannot be evaluated on these values.
    #[error("cannot evaluate '{text}': {reason}")]
    Eval {
        /// The offending expression (truncated when long).
        text: String,
        /// Why it cannot be evaluated.
        reason: String,
    },
    /// A size or depth limit was exceeded.
    #[error("{what} exceeds the limit of {limit}")]
    Limit {
        /// What was measured, with its unit (e.g. "template string length in bytes").
        what: &'static str,
        /// The limit's value.
        limit: usize,
    },
}

/// The longest excerpt of user text an error message quotes, in characters.
const CLIP_CHARS: usize = 160;

/// `text`, shortened to a readable excerpt for an error message.
pub(crate) fn clip(text: &str) -> String {
    match text.char_indices().nth(CLIP_CHARS) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// The reason part of an error, for quoting it inside another error's message.
pub(crate) fn reason(error: &ExprError) -> String {
    match error {
        ExprError::Parse { reason, .. } | ExprError::Eval { reason, .. } => reason.clone(),
        ExprError::Limit { .. } => error.to_string(),
    }
}
