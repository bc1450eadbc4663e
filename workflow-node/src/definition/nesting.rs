//! A linear pre-scan of YAML text for flow nesting (`[` and `{`). libyaml's scanner is
//! quadratic in it (each token looks at every open level), so a file nested 100 000 deep
//! took minutes to be refused by serde_yaml's own limit of 128 levels (found by fuzzing).
//! Block nesting needs no scan: each level costs a line and more indentation, so its
//! parse stays linear in the file's size.

/// The deepest flow nesting read: serde_yaml refuses anything deeper anyway.
pub(crate) const MAX_FLOW_DEPTH: usize = 128;

/// Where (1-based line and column) flow nesting first goes deeper than `limit`, if it does.
/// Brackets inside quoted scalars and comments do not count; brackets inside plain scalars
/// do, which can only refuse a file with more than `limit` of them open at once.
pub(crate) fn flow_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    #[derive(PartialEq)]
    enum In {
        Plain,
        Single,
        Double,
        Comment,
    }
    let mut state = In::Plain;
    let (mut line, mut column, mut depth) = (1, 0, 0usize);
    // Whether the previous character lets a quote or a comment start here.
    let mut at_token_start = true;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        column += 1;
        if c == '\n' {
            line += 1;
            column = 0;
        }
        match state {
            In::Comment if c == '\n' => state = In::Plain,
            In::Comment => {}
            In::Double if c == '\\' => {
                if chars.next() == Some('\n') {
                    line += 1;
                    column = 0;
                } else {
                    column += 1;
                }
            }
            In::Double if c == '"' => state = In::Plain,
            In::Single if c == '\'' && chars.peek() == Some(&'\'') => {
                chars.next();
                column += 1;
            }
            In::Single if c == '\'' => state = In::Plain,
            In::Double | In::Single => {}
            In::Plain => match c {
                '"' if at_token_start => state = In::Double,
                '\'' if at_token_start => state = In::Single,
                '#' if at_token_start => state = In::Comment,
                '[' | '{' => {
                    depth += 1;
                    if depth > limit {
                        return Some((line, column));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        at_token_start = c.is_whitespace() || matches!(c, '[' | '{' | ',' | ':' | '-' | '?');
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_flow_brackets_outside_quotes_and_comments() {
        assert_eq!(flow_too_deep("[[1]]", 2), None);
        assert_eq!(flow_too_deep("[[[1]]]", 2), Some((1, 3)));
        assert_eq!(flow_too_deep("a:\n  b: {c: [1]}", 1), Some((2, 10)));
        assert_eq!(flow_too_deep("a: '[[[['\nb: \"{{{\\\"{\"", 1), None);
        assert_eq!(flow_too_deep("a: 'it''s [[['", 1), None);
        assert_eq!(flow_too_deep("a: 1 # [[[[\nb: [[2]]", 2), None);
        // A quote inside a plain scalar does not open a string that would hide brackets.
        assert_eq!(flow_too_deep("a: it's\nb: [[[1]]]", 2), Some((2, 6)));
        assert_eq!(flow_too_deep("a: x#[[[", 2), Some((1, 8)));
    }
}
