//! [`Problem`]: one thing wrong with a workflow file, naming the file, the node and the
//! field, and the [`Sink`] that collects them so that a load reports every problem at once.

use std::fmt;

/// One problem found while loading a workflow file.
///
/// Displays as `FILE: node 'ID': FIELD: message`, or `FILE: workflow: FIELD: message` for a
/// problem outside any node; without `FILE: ` when there is no file, and as
/// `FILE: message` when the problem concerns the whole file (unreadable, bad syntax).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Problem {
    /// The file (or other origin) the problem is in.
    pub file: Option<String>,
    /// The id of the node the problem is in, if any.
    pub node: Option<String>,
    /// The field, in snake_case, with a path for nested fields (`retry_strategy.limit`,
    /// `branches[1].agent_name`); empty for problems with the file as a whole.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        match &self.node {
            Some(node) => write!(f, "node '{node}': ")?,
            None if self.field.is_empty() => return f.write_str(&self.message),
            None => f.write_str("workflow: ")?,
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for Problem {}

/// A file that is not well-formed YAML or JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// The YAML parser failed.
    #[error("YAML syntax error{}: {message}", at(*.line, *.column))]
    Yaml {
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// The JSON parser failed.
    #[error("JSON syntax error at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
}

fn at(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

impl SyntaxError {
    /// From a serde_yaml error, keeping its location.
    pub fn from_yaml(e: &serde_yaml::Error) -> SyntaxError {
        let loc = e.location();
        let mut message = e.to_string();
        // serde_yaml appends " at line L column C"; the location is reported separately.
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        SyntaxError::Yaml {
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            message: with_depth_hint(message),
        }
    }

    /// From a serde_json error, keeping its location.
    pub fn from_json(e: &serde_json::Error) -> SyntaxError {
        let mut message = e.to_string();
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        SyntaxError::Json {
            line: e.line(),
            column: e.column(),
            message: with_depth_hint(message),
        }
    }
}

/// Both parsers stop at 128 levels with "recursion limit exceeded": say what that means.
fn with_depth_hint(message: String) -> String {
    if message == "recursion limit exceeded" {
        format!("{message} (the file nests deeper than 128 levels)")
    } else {
        message
    }
}

/// Collects problems for one file.
#[derive(Debug, Default)]
pub(crate) struct Sink {
    file: Option<String>,
    problems: Vec<Problem>,
}

impl Sink {
    /// A sink for problems in `file` (`None`: no file).
    pub(crate) fn new(file: Option<String>) -> Sink {
        Sink {
            file,
            problems: Vec::new(),
        }
    }

    /// Records a problem in `node` (`None`: outside any node) at `field`. An identical
    /// problem is recorded once.
    pub(crate) fn push(&mut self, node: Option<&str>, field: &str, message: impl Into<String>) {
        let p = Problem {
            file: self.file.clone(),
            node: node.map(str::to_string),
            field: field.to_string(),
            message: message.into(),
        };
        if !self.problems.contains(&p) {
            self.problems.push(p);
        }
    }

    /// Whether nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems, in the order found.
    pub(crate) fn into_problems(self) -> Vec<Problem> {
        self.problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(file: Option<&str>, node: Option<&str>, field: &str) -> Problem {
        Problem {
            file: file.map(Into::into),
            node: node.map(Into::into),
            field: field.into(),
            message: "bad".into(),
        }
    }

    #[test]
    fn display_forms() {
        assert_eq!(
            p(Some("f.yaml"), Some("a"), "x").to_string(),
            "f.yaml: node 'a': x: bad"
        );
        assert_eq!(
            p(Some("f.yaml"), None, "x").to_string(),
            "f.yaml: workflow: x: bad"
        );
        assert_eq!(p(None, None, "x").to_string(), "workflow: x: bad");
        assert_eq!(p(None, Some("a"), "x").to_string(), "node 'a': x: bad");
        assert_eq!(p(Some("f.yaml"), None, "").to_string(), "f.yaml: bad");
    }
}
