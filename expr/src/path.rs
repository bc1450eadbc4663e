//! Paths: `workflow.input.items[0].id`, `node.output.x`, `_map_item`.
//!
//! [`Path::parse`] is strict (no whitespace, no aliases); templates and conditions go through
//! [`parse_reference`], which also applies the reference system's aliases.

use crate::error::{clip, ExprError};
use serde_json::Value;
use std::fmt;

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

/// Whether `c` may appear in a root or member name.
pub(crate) fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

impl Path {
    /// Parses `a.b[0].c`. Fails on empty segments, unbalanced brackets and bad indexes.
    ///
    /// Names are letters, digits, `_` and `-`; indexes are decimal. No whitespace is allowed
    /// (templates trim the text between `{{` and `}}` before calling this).
    pub fn parse(text: &str) -> Result<Path, ExprError> {
        let fail = |reason: String| ExprError::Parse {
            what: "path",
            text: clip(text),
            reason,
        };
        let root_len = text.find(|c: char| !is_ident_char(c)).unwrap_or(text.len());
        if root_len == 0 {
            return Err(fail(match text.chars().next() {
                None => "the path is empty".into(),
                Some('[') => "a path starts with a name, not an index".into(),
                Some('.') => "empty name before '.'".into(),
                Some(c) => format!("unexpected character '{c}' at the start"),
            }));
        }
        let root = text[..root_len].to_string();
        let mut rest = Vec::new();
        let mut i = root_len;
        while i < text.len() {
            let tail = &text[i..];
            if let Some(after) = tail.strip_prefix('.') {
                let len = after
                    .find(|c: char| !is_ident_char(c))
                    .unwrap_or(after.len());
                if len == 0 {
                    return Err(fail(format!("empty name after '.' at byte {i}")));
                }
                rest.push(Segment::Key(after[..len].to_string()));
                i += 1 + len;
            } else if let Some(after) = tail.strip_prefix('[') {
                let Some(close) = after.find(']') else {
                    return Err(fail(format!("'[' at byte {i} is never closed")));
                };
                let digits = &after[..close];
                if digits.is_empty() {
                    return Err(fail(format!("empty index '[]' at byte {i}")));
                }
                if !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(fail(format!(
                        "index '[{digits}]' at byte {i} is not a non-negative integer"
                    )));
                }
                let index = digits
                    .parse::<usize>()
                    .map_err(|_| fail(format!("index '[{digits}]' is too large")))?;
                rest.push(Segment::Index(index));
                i += 2 + close;
            } else {
                let c = tail.chars().next().unwrap_or(' ');
                let reason = match c {
                    ']' => format!("']' at byte {i} has no matching '['"),
                    _ => format!("unexpected character '{c}' at byte {i}"),
                };
                return Err(fail(reason));
            }
        }
        Ok(Path { root, rest })
    }
}

impl fmt::Display for Path {
    /// Writes the path back in the syntax [`Path::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.root)?;
        for segment in &self.rest {
            match segment {
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for Path {
    type Err = ExprError;

    fn from_str(s: &str) -> Result<Path, ExprError> {
        Path::parse(s)
    }
}

/// Parses the text between `{{` and `}}` as a path, applying the reference system's aliases:
/// `item` (and `item.x`) means `_map_item`, and `workflow.parameters.` means `workflow.input.`.
pub fn parse_reference(text: &str) -> Result<Path, ExprError> {
    let mut path = Path::parse(text.trim())?;
    if path.root == "item" {
        path.root = "_map_item".into();
    }
    if path.root == "workflow" {
        if let Some(Segment::Key(k)) = path.rest.first_mut() {
            if k == "parameters" {
                *k = "input".into();
            }
        }
    }
    Ok(path)
}

/// Follows `segments` below `value`; `None` when a member or index is missing.
pub fn navigate<'a>(value: &'a Value, segments: &[Segment]) -> Option<&'a Value> {
    segments.iter().try_fold(value, |v, s| match s {
        Segment::Key(k) => v.get(k.as_str()),
        Segment::Index(i) => v.get(*i),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_and_indexes() {
        let p = Path::parse("a.b[0].c").unwrap();
        assert_eq!(p.root, "a");
        assert_eq!(
            p.rest,
            vec![
                Segment::Key("b".into()),
                Segment::Index(0),
                Segment::Key("c".into())
            ]
        );
        assert_eq!(p.to_string(), "a.b[0].c");
        let p = Path::parse("node-1.output.items[12][3]").unwrap();
        assert_eq!(p.rest.len(), 4);
        assert_eq!(Path::parse("_map_item").unwrap().rest, vec![]);
    }

    #[test]
    fn rejects_bad_paths() {
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a[",
            "a[]",
            "a[x]",
            "a[-1]",
            "a]",
            "[0]",
            "a b",
            "a.b c",
            "a[0",
            "a[99999999999999999999999]",
            "a.'b'",
        ] {
            let err = Path::parse(bad).unwrap_err();
            assert!(
                matches!(err, ExprError::Parse { what: "path", .. }),
                "{bad}: {err}"
            );
        }
        let msg = Path::parse("a..b").unwrap_err().to_string();
        assert!(msg.contains("empty name"), "{msg}");
        let msg = Path::parse("a[x]").unwrap_err().to_string();
        assert!(msg.contains("not a non-negative integer"), "{msg}");
    }

    #[test]
    fn aliases() {
        assert_eq!(parse_reference(" item ").unwrap().root, "_map_item");
        let p = parse_reference("item.x").unwrap();
        assert_eq!((p.root.as_str(), p.rest.len()), ("_map_item", 1));
        let p = parse_reference("workflow.parameters.x").unwrap();
        assert_eq!(p.to_string(), "workflow.input.x");
        assert_eq!(
            parse_reference("a.parameters").unwrap().to_string(),
            "a.parameters"
        );
    }

    #[test]
    fn navigates() {
        let v = serde_json::json!({"a": [{"b": 1}], "n": null});
        let p = Path::parse("x.a[0].b").unwrap();
        assert_eq!(navigate(&v, &p.rest), Some(&serde_json::json!(1)));
        let p = Path::parse("x.n.deep").unwrap();
        assert_eq!(navigate(&v, &p.rest), None);
        let p = Path::parse("x.a[5]").unwrap();
        assert_eq!(navigate(&v, &p.rest), None);
    }
}
