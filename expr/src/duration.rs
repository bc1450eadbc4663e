//! Durations as workflow files write them: `"250ms"`, `"5s"`, `"1.5m"`, `"1h"`, `"1d"`, or a
//! bare number of seconds.

use crate::error::{clip, ExprError};
use std::time::Duration;

/// Parses a duration. Negative, non-finite and unit-less garbage values are errors.
///
/// Units: `ms`, `s`, `m`, `h`, `d`; a bare number is seconds. Whitespace around the number
/// and between number and unit is allowed. The result is rounded to whole nanoseconds.
pub fn parse(text: &str) -> Result<Duration, ExprError> {
    let fail = |reason: &str| ExprError::Parse {
        what: "duration",
        text: clip(text),
        reason: reason.into(),
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(fail("the duration is empty"));
    }
    let split = trimmed
        .find(|c: char| c.is_alphabetic())
        .unwrap_or(trimmed.len());
    let (number, unit) = (trimmed[..split].trim(), &trimmed[split..]);
    let nanos_per_unit: f64 = match unit {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "m" => 60e9,
        "h" => 3_600e9,
        "d" => 86_400e9,
        _ => return Err(fail("unknown unit (use ms, s, m, h or d)")),
    };
    if number.is_empty() {
        return Err(fail("the number is missing"));
    }
    if !number
        .bytes()
        .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-' || b == b'+')
    {
        return Err(fail("not a number followed by a unit"));
    }
    let value: f64 = number.parse().map_err(|_| fail("not a number"))?;
    if value.is_sign_negative() && value != 0.0 {
        return Err(fail("a duration cannot be negative"));
    }
    let nanos = (value * nanos_per_unit).round();
    if !nanos.is_finite() || nanos >= u64::MAX as f64 {
        return Err(fail("the duration is too long"));
    }
    // In range and non-negative (checked above), so the conversion is exact enough.
    Ok(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse(" 2 s "), Ok(Duration::from_secs(2)));
        assert_eq!(parse("0.1"), Ok(Duration::from_millis(100)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("-0"), Ok(Duration::ZERO));
    }

    #[test]
    fn errors() {
        for bad in [
            "",
            "  ",
            "-5s",
            "-1",
            "NaN",
            "nan",
            "inf",
            "1e400",
            "5x",
            "5 sec",
            "ms",
            "s",
            "1.2.3s",
            "1e3",
            "99999999999d",
            "--1",
            "5s5",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
        let msg = parse("-5s").unwrap_err().to_string();
        assert!(msg.contains("negative"), "{msg}");
        let msg = parse("5x").unwrap_err().to_string();
        assert!(msg.contains("unknown unit"), "{msg}");
    }
}
