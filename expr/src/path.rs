//! Paths: `workflow.input.items[0].id`, `node.output.x`, `_map_item`.

use crate::ExprError;
use serde_json::Value;

/// One step below a path's root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// An object member.
    Key(String),
    /// An array element.
    Index(usize),
}

/// A parsed path: a root name (`workflow`, a node id, `_map_item`, ...) and the steps below.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Path {
    /// The first name of the path.
    pub root: String,
    /// The members and indexes below the root.
    pub rest: Vec<Segment>,
}

impl Path {
    /// Parses `a.b[0].c`. Fails on empty segments, unbalanced brackets and bad indexes.
    pub fn parse(text: &str) -> Result<Path, ExprError> {
        let _ = text;
        Err(ExprError::Parse {
            what: "path",
            text: text.into(),
            reason: "not implemented yet".into(),
        })
    }
}

/// Follows `segments` below `value`; `None` when a member or index is missing.
pub fn navigate<'a>(value: &'a Value, segments: &[Segment]) -> Option<&'a Value> {
    segments.iter().try_fold(value, |v, s| match s {
        Segment::Key(k) => v.get(k.as_str()),
        Segment::Index(i) => v.get(*i),
    })
}
