//! Header values that arrive from outside, checked before anything uses, stores or
//! forwards them. (Subjects to answer on are [`crate::subjects::check_reply`]'s.)
//!
//! A header a requester sets is read by the receiver and may be stored in a run's record or
//! passed on to every agent a run calls, so each is capped ([`MAX_HEADER_LEN`]) and free of
//! control characters ([`check_value`]); a request carrying one that is not is refused. The
//! W3C trace context is optional and only ever passed along: one that does not follow its
//! grammar ([`traceparent`], [`tracestate`]) is dropped, never forwarded as it came.

use crate::headers;

/// The longest value of a mesh header a receiver accepts (`Mesh-Caller`,
/// `Mesh-Call-Depth`, `Mesh-Signer`, …), in bytes. W3C recommends passing on at most 512
/// bytes of `tracestate`; no mesh header needs more.
pub const MAX_HEADER_LEN: usize = 512;

/// Why a header value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header {name} is refused: {why}")]
pub struct HeaderError {
    /// The header's name.
    pub name: &'static str,
    /// What is wrong with its value.
    pub why: String,
}

/// Checks the value of header `name`: at most [`MAX_HEADER_LEN`] bytes, printable (no
/// control character: a tab, a line break or a NUL is refused).
pub fn check_value(name: &'static str, value: &str) -> Result<(), HeaderError> {
    if value.len() > MAX_HEADER_LEN {
        return Err(HeaderError {
            name,
            why: format!(
                "its value is {} bytes long, over the limit of {MAX_HEADER_LEN}",
                value.len()
            ),
        });
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(HeaderError {
            name,
            why: format!("its value holds the control character {c:?}"),
        });
    }
    Ok(())
}

/// The mesh headers a receiver reads from a request, each checked by [`check_value`] (the
/// subjects `Mesh-Reply-To` and `Mesh-Status-To` are
/// [`crate::subjects::check_reply`]'s; the trace context is [`traceparent`]'s and
/// [`tracestate`]'s).
pub const CHECKED: [&str; 5] = [
    headers::CALLER,
    headers::CALL_DEPTH,
    headers::SIGNER,
    headers::SIGNED_AT,
    headers::SIGNATURE,
];

/// Checks every header of [`CHECKED`] that `get` finds (by name) with [`check_value`]: the
/// first refused.
pub fn check_headers<'a>(get: impl Fn(&'static str) -> Option<&'a str>) -> Result<(), HeaderError> {
    CHECKED
        .iter()
        .filter_map(|name| Some((*name, get(name)?)))
        .try_for_each(|(name, value)| check_value(name, value))
}

/// At most the first `max` bytes of `text` (cut on a character boundary), with `…` when
/// cut: how a refusal quotes what it refuses without carrying all of it.
pub fn excerpt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    format!("{}…", &text[..at])
}

/// `value` if it is a W3C `traceparent`
/// (`{version:2 hex}-{trace-id:32 hex}-{parent-id:16 hex}-{flags:2 hex}`, lowercase, a
/// version other than `ff`, ids not all zeros; version `00` exactly 55 characters, a later
/// version possibly followed by `-` and more, up to [`MAX_HEADER_LEN`]); `None` otherwise,
/// and the header is dropped.
pub fn traceparent(value: &str) -> Option<&str> {
    let b = value.as_bytes();
    if b.len() < 55 || b.len() > MAX_HEADER_LEN {
        return None;
    }
    let hex = |s: &[u8]| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let zeros = |s: &[u8]| s.iter().all(|c| *c == b'0');
    let (version, trace, parent, flags) = (&b[0..2], &b[3..35], &b[36..52], &b[53..55]);
    let dashes = b[2] == b'-' && b[35] == b'-' && b[52] == b'-';
    let fields = [version, trace, parent, flags].iter().all(|f| hex(f));
    let tail = match version {
        b"00" => b.len() == 55,
        _ => b.len() == 55 || (b[55] == b'-' && !value[55..].chars().any(char::is_control)),
    };
    let ok = dashes && fields && version != b"ff" && !zeros(trace) && !zeros(parent) && tail;
    ok.then_some(value)
}

/// `value` if it is a W3C `tracestate`: at most [`MAX_HEADER_LEN`] bytes, at most 32
/// comma-separated `key=value` members (blank members allowed); a key of lowercase
/// letters, digits and `_-*/`, starting with a letter or digit, 256 bytes at most, with at
/// most one `@` (`tenant@system`); a value of 1 to 256 printable ASCII characters other
/// than `,` and `=`, not ending with a space. `None` otherwise, and the header is dropped.
pub fn tracestate(value: &str) -> Option<&str> {
    if value.len() > MAX_HEADER_LEN {
        return None;
    }
    let members: Vec<&str> = value
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    let ok = members.len() <= 32 && members.iter().all(|m| member(m));
    ok.then_some(value)
}

/// One `key=value` member of a `tracestate`.
fn member(m: &str) -> bool {
    let Some((key, value)) = m.split_once('=') else {
        return false;
    };
    let key_ok = !key.is_empty()
        && key.len() <= 256
        && key.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key.matches('@').count() <= 1
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-*/@".contains(c));
    let value_ok = !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .chars()
            .all(|c| (' '..='~').contains(&c) && c != ',' && c != '=');
    key_ok && value_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_passes_and_anything_else_is_dropped() {
        assert_eq!(traceparent(TP), Some(TP));
        let future = format!("cc{}-what-comes-next", &TP[2..]);
        assert_eq!(traceparent(&future), Some(future.as_str()));
        for bad in [
            "",
            "garbage",
            &TP.to_uppercase(),
            &format!("{TP}-more"),
            &TP.replace("00-4bf9", "ff-4bf9"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            &TP.replace('-', "_"),
            &format!("cc{}\n", &TP[2..]),
            &format!("cc{}-{}", &TP[2..], "x".repeat(600)),
        ] {
            assert_eq!(traceparent(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_w3c_tracestate_passes_and_anything_else_is_dropped() {
        for ok in [
            "rojo=00f067aa0ba902b7",
            "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE",
            "tenant@vendor=x,,  a-b_c*/d=1 2",
        ] {
            assert_eq!(tracestate(ok), Some(ok), "{ok}");
        }
        let many = (0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>();
        for bad in [
            "novalue".to_owned(),
            "Upper=1".to_owned(),
            "a=b=c".to_owned(),
            "a=inner\ttab".to_owned(),
            "a@b@c=1".to_owned(),
            "a=\u{7f}".to_owned(),
            format!("a={}", "v".repeat(257)),
            many.join(","),
            format!("a=1,{}", "b=2,".repeat(200)),
        ] {
            assert_eq!(tracestate(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn excerpts_cut_on_a_character_boundary() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("ééé", 3), "é…");
    }

    #[test]
    fn header_values_are_capped_and_printable() {
        assert_eq!(check_value("Mesh-Caller", "alice"), Ok(()));
        let long = "x".repeat(MAX_HEADER_LEN + 1);
        let e = check_value("Mesh-Caller", &long).unwrap_err();
        assert_eq!(
            e.to_string(),
            "header Mesh-Caller is refused: its value is 513 bytes long, over the limit of 512"
        );
        let e = check_value("Mesh-Caller", "a\0b").unwrap_err();
        assert!(e.to_string().contains("control character"), "{e}");
    }
}
