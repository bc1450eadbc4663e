//! The clock schedules fire by: the servers' wall clock as this replica estimates it
//! (`shell::clock`), not its own, so that a replica whose clock is skewed fires slots when
//! the others would. Every schedule entry read is a sample of it (see
//! `store::schedules::read`). A replica whose estimate runs ahead starts a slot early,
//! never twice: the slot's run id is derived from the slot, not from the clock.

/// Now, in Unix milliseconds.
pub(in crate::shell) fn now_ms() -> u64 {
    crate::shell::clock::now().0
}
