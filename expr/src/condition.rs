//! Conditions: boolean expressions over typed values.
//!
//! `{{path}}` is the typed value; a string literal holding templates (`'{{path}}'`, the
//! reference system's quoted form) is the text form of the values. Either way a value is
//! bound, never pasted into the source, so quotes inside values are harmless.

use crate::ast::Compiled;
use crate::error::clip;
use crate::lex::Mode;
use crate::limits::MAX_TEXT_LEN;
use crate::value::describe;
use crate::{ExprError, Path, Scope};
use serde_json::Value;

/// A compiled condition.
#[derive(Debug, Clone)]
pub struct Condition {
    source: String,
    compiled: Compiled,
}

impl Condition {
    /// Compiles a condition such as `{{a.output.status}} == 'ok' && {{a.output.n}} > 3`.
    pub fn compile(text: &str) -> Result<Condition, ExprError> {
        if text.len() > MAX_TEXT_LEN {
            return Err(ExprError::Limit {
                what: "condition length in bytes",
                limit: MAX_TEXT_LEN,
            });
        }
        Ok(Condition {
            compiled: Compiled::compile(text, Mode::Condition)?,
            source: text.to_string(),
        })
    }

    /// Evaluates the condition against `scope`; a non-boolean result is an error.
    pub fn evaluate(&self, scope: &dyn Scope) -> Result<bool, ExprError> {
        let fail = |reason: String| ExprError::Eval {
            text: clip(&self.source),
            reason,
        };
        match &*self.compiled.eval(scope).map_err(fail)? {
            Value::Bool(b) => Ok(*b),
            other => Err(fail(format!(
                "the result is {}, not true or false",
                describe(other)
            ))),
        }
    }

    /// Every path the condition names.
    pub fn paths(&self) -> Vec<&Path> {
        self.compiled.paths().collect()
    }

    /// The text the condition was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }
}
