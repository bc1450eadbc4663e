//! Templates: JSON values whose strings may hold `{{...}}` and whose objects may be
//! `coalesce`/`concat` operators.

use crate::{ExprError, Path, Scope};
use serde_json::Value;

/// What a template may contain beyond plain paths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TemplateOptions {
    /// Allow arithmetic (`+ - * /`) over paths and literals inside `{{ }}` (stub agents).
    pub arithmetic: bool,
}

/// A compiled template.
#[derive(Debug, Clone)]
pub struct Template {
    source: Value,
}

impl Template {
    /// Compiles `value` with the default options (paths only).
    pub fn compile(value: &Value) -> Result<Template, ExprError> {
        Template::compile_with(value, TemplateOptions::default())
    }

    /// Compiles `value` with `options`.
    pub fn compile_with(value: &Value, options: TemplateOptions) -> Result<Template, ExprError> {
        let _ = options;
        Ok(Template {
            source: value.clone(),
        })
    }

    /// Resolves the template against `scope`.
    pub fn resolve(&self, scope: &dyn Scope) -> Result<Value, ExprError> {
        let _ = scope;
        Ok(self.source.clone())
    }

    /// Every path the template names, in order of appearance.
    pub fn paths(&self) -> Vec<&Path> {
        Vec::new()
    }

    /// The JSON value the template was compiled from.
    pub fn source(&self) -> &Value {
        &self.source
    }
}
