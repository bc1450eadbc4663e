//! The clock schedules fire by. One seam, so that fire times can be read against the
//! servers' clock (an estimate from JetStream's message times) where a replica's own may
//! be skewed; for now it is the replica's wall clock. A replica whose clock runs ahead
//! starts a slot early, never twice: the slot's run id is derived from the slot, not
//! from the clock.

/// Now, in Unix milliseconds.
pub(in crate::shell) fn now_ms() -> u64 {
    crate::shell::now().0
}
