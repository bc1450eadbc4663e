//! The pure part of who may end a run: whether a cancel kept for a run not found yet ends
//! the run that then starts. The checks that read signatures and the clock live in
//! `callers::identity`; this one runs inside the per-event plan, so it takes only records.

use crate::shell::run::envelope::Caller;

/// Whether a cancel sent for a run not found (`kept`: its sender, with the key that signed
/// it) ends the run started by `start`: only when the same key signed both, or neither
/// was signed (the cancel then named the caller's name and task id, as the start did).
pub(in crate::shell) fn kept_cancel_holds(kept: &Caller, start: &Caller) -> bool {
    kept.signer == start.signer
}
