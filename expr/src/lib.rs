//! The workflow expression language, shared by the workflow node and by agents.
//!
//! - [`Template`]: a JSON value in which strings may hold `{{path}}` templates and objects may
//!   be the operators `{"coalesce": [...]}` and `{"concat": [...]}`.
//! - [`Condition`]: a boolean expression over typed values (`when`, `condition`, switch
//!   cases, loop conditions).
//! - [`Path`] and [`Scope`]: how a template names a value and how the caller supplies it.
//! - [`duration`]: the duration syntax of workflow files (`"5s"`, `"1m"`, `"250ms"`).
//!
//! Everything here is pure: no I/O, no clock. Evaluation is bounded (size and depth limits)
//! and fails with an [`ExprError`], never a panic.

mod condition;
pub mod duration;
mod error;
mod path;
mod template;

pub use condition::Condition;
pub use error::ExprError;
pub use path::{navigate, Path, Segment};
pub use template::{Template, TemplateOptions};

use serde_json::Value;
use std::borrow::Cow;

/// Supplies the values that paths name. Implemented by the engine (workflow input, node
/// outputs, `_map_item`, ...) and by stub agents (`input`, `call`).
pub trait Scope {
    /// The value at `path`, or `None` when nothing is there (a missing value is `null`
    /// everywhere, also inside `coalesce`).
    fn lookup(&self, path: &Path) -> Option<Cow<'_, Value>>;
}

/// A [`Scope`] over one JSON object whose top-level keys are the roots
/// (`{"input": ..., "call": 3}`): handy for agents and tests.
impl Scope for serde_json::Map<String, Value> {
    fn lookup(&self, path: &Path) -> Option<Cow<'_, Value>> {
        let root = self.get(path.root.as_str())?;
        navigate(root, &path.rest).map(Cow::Borrowed)
    }
}
