//! The pure part of who may end a run: whether a cancel kept for a run not found yet ends
//! the run that then starts. The checks that read signatures and the clock live in
//! `callers::identity`; this one runs inside the per-event plan, so it takes only records.

use crate::shell::run::envelope::Caller;

/// Whether a cancel sent for a run not found (`kept`: its sender, with the key that signed
/// it) ends the run started by `start`: only when the same key signed both, or neither
/// was signed (the cancel then named the caller's name and task id, as the start did);
/// and, for a run a calling workflow started with a call token, only when the cancel came
/// with the same token (the caller's name and sub-task id are known to others).
pub(in crate::shell) fn kept_cancel_holds(kept: &Caller, start: &Caller) -> bool {
    kept.signer == start.signer && kept.token_id == start.token_id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_cancel_holds_only_for_the_same_key_and_the_same_call_token() {
        let caller = |signer: Option<&str>, token_id: Option<&str>| Caller {
            name: Some("Parent".into()),
            signer: signer.map(str::to_owned),
            token_id: token_id.map(str::to_owned),
            ..Caller::default()
        };
        assert!(kept_cancel_holds(&caller(None, None), &caller(None, None)));
        assert!(kept_cancel_holds(
            &caller(None, Some("t")),
            &caller(None, Some("t"))
        ));
        assert!(!kept_cancel_holds(
            &caller(None, None),
            &caller(None, Some("t"))
        ));
        assert!(!kept_cancel_holds(
            &caller(None, Some("u")),
            &caller(None, Some("t"))
        ));
        assert!(!kept_cancel_holds(
            &caller(Some("U1"), None),
            &caller(None, None)
        ));
    }
}
