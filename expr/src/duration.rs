//! Durations as workflow files write them: `"250ms"`, `"5s"`, `"1.5m"`, `"1h"`, `"1d"`, or a
//! bare number of seconds.

use crate::ExprError;
use std::time::Duration;

/// Parses a duration. Negative, non-finite and unit-less garbage values are errors.
pub fn parse(text: &str) -> Result<Duration, ExprError> {
    Err(ExprError::Parse {
        what: "duration",
        text: text.into(),
        reason: "not implemented yet".into(),
    })
}
