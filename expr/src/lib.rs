//! The workflow expression language, shared by the workflow node and by agents.
//!
//! - [`Template`]: a JSON value in which strings may hold `{{path}}` templates or
//!   `{{ expression }}`s (bare paths, functions, `a ? b : c`) and objects may be the
//!   operators `{"coalesce": [...]}` and `{"concat": [...]}`.
//! - [`Condition`]: a boolean expression over typed values (`when`, `condition`, switch
//!   cases, loop conditions), with the functions `length`, `contains`, `toJSON`,
//!   `fromJSON`, `coalesce`, `concat` and the ternary `a ? b : c`.
//! - [`Condition::literal_comparisons`], [`Condition::problems`] (and the same on
//!   [`Template`]): what a validator can tell without values.
//! - [`Path`] and [`Scope`]: how a template names a value and how the caller supplies it.
//! - [`duration`]: the duration syntax of workflow files (`"5s"`, `"1m"`, `"250ms"`).
//! - [`to_text`]: how a value reads when interpolated into text; [`limits`]: the bounds.
//!
//! Inside the crate: `lex` turns condition text into evalexpr syntax with every value bound to
//! a generated name (and `a ? b : c` into a call, evalexpr having no ternary), `ast` keeps
//! evalexpr's parse as our own tree and evaluates it on JSON values, `value` holds the
//! comparison and arithmetic rules, `template` the template tree, `check` the static checks.
//!
//! Rules every caller relies on:
//!
//! - A string that is exactly one `{{path}}` resolves to the value with its JSON type; holes
//!   inside longer strings interpolate as text ([`to_text`]: strings raw, numbers and booleans
//!   as JSON, `null` as nothing, arrays and objects as compact JSON).
//! - A missing path is `null` everywhere (also inside `coalesce`). `{{item...}}` means
//!   `_map_item`, and `workflow.parameters.` means `workflow.input.`.
//! - `{"coalesce": [...]}` is the first non-null element; `{"concat": [...]}` joins the non-null
//!   elements as arrays when all are arrays, as text otherwise (`""` when none).
//! - Conditions are typed: `"7" == 7` is false, `7 == 7.0` is true, `null` equals only `null`,
//!   but `< <= > >=` read a numeric string as a number (`"7" > 3`). `'{{p}}'` (a quoted hole)
//!   is the text form of the value. A result that is not a boolean is an error.
//!
//! ```
//! use serde_json::json;
//! use workflow_expr::{Condition, Template};
//!
//! let scope = json!({"fetch": {"output": {"status": "ok", "n": 3}}});
//! let scope = scope.as_object().expect("an object");
//! let t = Template::compile(&json!({"n": "{{fetch.output.n}}", "s": "is {{fetch.output.status}}"}))?;
//! assert_eq!(t.resolve(scope)?, json!({"n": 3, "s": "is ok"}));
//! let c = Condition::compile("{{fetch.output.status}} == 'ok' and {{fetch.output.n}} in [1, 3]")?;
//! assert!(c.evaluate(scope)?);
//! # Ok::<(), workflow_expr::ExprError>(())
//! ```
//!
//! Everything here is pure: no I/O, no clock. Evaluation is bounded (size and depth limits)
//! and fails with an [`ExprError`], never a panic.

mod ast;
mod check;
mod condition;
pub mod duration;
mod error;
mod lex;
mod path;
mod template;
mod value;

pub use condition::Condition;
pub use error::ExprError;
pub use path::{navigate, parse_reference, Path, Segment};
pub use template::{Template, TemplateOptions};
pub use value::{file_type_name, to_text, type_name};

/// Size and depth limits. Exceeding one is an [`ExprError::Limit`], never a crash.
pub mod limits {
    /// The longest template string and the longest condition, in bytes.
    pub const MAX_TEXT_LEN: usize = 16 * 1024;
    /// The deepest nesting of template values and operators, and of brackets in an
    /// expression.
    pub const MAX_NESTING: usize = 64;
    /// The most tokens (values, operators, brackets) in one expression; this also bounds the
    /// depth of evalexpr's parse.
    pub const MAX_EXPR_TOKENS: usize = 1024;
    /// The deepest expression tree (a chain of 100 `or`s is 100 deep).
    pub const MAX_EXPR_DEPTH: usize = 128;
    /// The deepest nesting of arrays and objects in a value a template resolves to (a
    /// scalar is 0 deep, `[]` 1, `{"a": [1]}` 2). Whatever holds such a value (a request to
    /// an agent, a run's record) adds a few levels and must stay readable under
    /// serde_json's recursion limit of 128.
    pub const MAX_VALUE_DEPTH: usize = 64;

    use serde_json::Value;

    /// Whether `value` nests arrays and objects deeper than `limit` (see
    /// [`MAX_VALUE_DEPTH`]). Iterative, so any depth is measured without recursion, and it
    /// stops at the first level past `limit`.
    pub fn deeper_than(value: &Value, limit: usize) -> bool {
        let nested = |c: &&Value| c.is_array() || c.is_object();
        let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
        while let Some((v, depth)) = stack.pop() {
            // `v` is the level below `depth`.
            if (v.is_array() || v.is_object()) && depth + 1 > limit {
                return true;
            }
            match v {
                Value::Array(items) => {
                    stack.extend(items.iter().filter(nested).map(|c| (c, depth + 1)))
                }
                Value::Object(members) => {
                    stack.extend(members.values().filter(nested).map(|c| (c, depth + 1)))
                }
                _ => {}
            }
        }
        false
    }
}

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
