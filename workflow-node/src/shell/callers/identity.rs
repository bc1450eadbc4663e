//! Who is asking: approvals and cancels depend on an identity proven by an NKey signature
//! (see `agent_sdk::signing`), never on what a request says of itself.
//!
//! - An approval node's `approvers` name user keys, or names that the node's config binds
//!   to keys (`Config::approvers`); a node without approvers is decided by the operators
//!   (`Config::operators`). A decision counts only when signed by one of those keys, and
//!   its `by` is the entry the key matched (for an operator, a name bound to its key, else
//!   the key): the core checks `by` against the list, so it must be the list's spelling.
//! - A run belongs to whoever started it: the key that signed its start (kept in
//!   `Caller::signer`) or, for an unsigned start, whoever presents its caller name
//!   (`Mesh-Caller`) and task id, which only the caller knows (the SDK, the CLI and the node
//!   make unguessable ones). Naming a run by its execution id, which every agent the run
//!   calls sees, proves nothing: that takes the key that started it, or an operator's.
//!   An operator may cancel any run.
//! - A cancel for a run not found (not started yet: its start may still be in the
//!   stream) goes, unchecked, under the execution its caller name and task id make, with
//!   its sender's key (or none) in the event; the worker lets it end the run only if the
//!   start was signed by that same key (or both are unsigned), whichever of the two the
//!   stream holds first: see [`crate::shell::run::identity::kept_cancel_holds`].

use std::collections::BTreeMap;

use agent_sdk::signing::{self, Allowed, SignatureError};
use async_nats::HeaderMap;

use crate::core::ExecutionId;
use crate::definition::{ApprovalNode, Approver, NodeKind, Workflow};
use crate::shell::callers::nonces;
use crate::shell::config::Config;
use crate::shell::context::Shared;
use crate::shell::error::{Error, Result};
use crate::shell::run::envelope::Caller;

/// Checks that the keys of `config` are user public keys and that every name an approval
/// node of `workflows` lists is bound to one; the error names the workflow, node and name.
pub(in crate::shell) fn check_config(config: &Config, workflows: &[Workflow]) -> Result<()> {
    let key = |what: String, key: &str| {
        if signing::is_user_public_key(key) {
            Ok(())
        } else {
            Err(Error::Definition(format!(
                "{what}: '{key}' is not an NKey user public key (U…)"
            )))
        }
    };
    for (name, k) in &config.approvers {
        match Approver::parse(name) {
            Ok(Approver::Name(_)) => {}
            _ => {
                return Err(Error::Definition(format!(
                    "approver name '{name}': a name is letters, digits, _ . @ - (not a key)"
                )))
            }
        }
        key(format!("approver {name}"), k)?;
    }
    for k in &config.operators {
        key("operator key".into(), k)?;
    }
    for workflow in workflows {
        for node in &workflow.nodes {
            let (listed, role) = match &node.kind {
                NodeKind::Approval(def) => (&def.approvers, "approver"),
                NodeKind::Wait(def) => (&def.signers, "signer"),
                _ => continue,
            };
            for entry in listed {
                if let Ok(Approver::Name(name)) = Approver::parse(entry) {
                    if !config.approvers.contains_key(name) {
                        return Err(Error::Definition(format!(
                            "{} node '{}' of {} names {role} '{name}', whose key this node does \
                             not know: bind it with --approver {name}=U… (or list the key itself)",
                            node.kind.type_name(),
                            node.id,
                            workflow.name
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whose decision on approval node `node_id` (defined as `def`) a request with `headers`
/// and `payload` on `subject` is: its `by`, or why it does not count. `claimed` is the
/// `by` the decision gives itself: it must name the signer (or be absent).
pub(in crate::shell) fn approver(
    config: &Config,
    node_id: &str,
    def: &ApprovalNode,
    signed: (Option<&HeaderMap>, &str, Option<&str>, &[u8]),
    claimed: Option<&str>,
) -> std::result::Result<String, String> {
    let act = Act {
        listed: &def.approvers,
        thing: "decision",
        verb: "decide on",
        who: "approvers",
        hint: "workflow-node approve --nkey-seed-file",
    };
    listed_signer(config, node_id, act, signed, claimed)
}

/// Who sends a signal to wait node `node_id`, which lists `signers` (not empty): its
/// `by`, or why it does not count, as for an approval's decision (see [`approver`]).
pub(in crate::shell) fn signal_sender(
    config: &Config,
    node_id: &str,
    signers: &[String],
    signed: (Option<&HeaderMap>, &str, Option<&str>, &[u8]),
    claimed: Option<&str>,
) -> std::result::Result<String, String> {
    let act = Act {
        listed: signers,
        thing: "signal",
        verb: "send a signal to",
        who: "signers",
        hint: "workflow-node runs signal --nkey-seed-file",
    };
    listed_signer(config, node_id, act, signed, claimed)
}

/// What a node lists as the identities that may act on it, and the words for the act.
struct Act<'a> {
    listed: &'a [String],
    thing: &'a str,
    verb: &'a str,
    who: &'a str,
    hint: &'a str,
}

/// The entry of `act.listed` (or, when it is empty, the operator) whose key signed the
/// request: see [`approver`].
fn listed_signer(
    config: &Config,
    node_id: &str,
    act: Act<'_>,
    signed: (Option<&HeaderMap>, &str, Option<&str>, &[u8]),
    claimed: Option<&str>,
) -> std::result::Result<String, String> {
    let Act {
        listed,
        thing,
        verb,
        who,
        hint,
    } = act;
    // Each allowed key, with the `by` it is recorded as.
    let allowed: Vec<(String, String)> = if listed.is_empty() {
        config
            .operators
            .iter()
            .map(|k| {
                (
                    k.clone(),
                    bound_name(&config.approvers, k).unwrap_or(k).to_owned(),
                )
            })
            .collect()
    } else {
        listed
            .iter()
            .filter_map(|entry| match Approver::parse(entry) {
                Ok(Approver::Key(k)) => Some((k.to_owned(), entry.clone())),
                Ok(Approver::Name(n)) => {
                    config.approvers.get(n).map(|k| (k.clone(), entry.clone()))
                }
                Err(_) => None,
            })
            .collect()
    };
    let who = if listed.is_empty() {
        "the node's operators (an approval without approvers)".to_string()
    } else {
        format!("{who}: {}", listed.join(", "))
    };
    if allowed.is_empty() {
        return Err(format!(
            "nobody can {verb} '{node_id}' here: no key is known for {who} (serve \
             --operator-key U…, --approver NAME=U…)"
        ));
    }
    let keys: Vec<String> = allowed.iter().map(|(k, _)| k.clone()).collect();
    let (headers, subject, reply, payload) = signed;
    let key = signing::verify(
        headers,
        subject,
        reply,
        payload,
        crate::shell::clock::system_now(),
        Allowed::Only(&keys),
    )
    .map_err(|e| match e {
        SignatureError::Unsigned => format!(
            "the {thing} on '{node_id}' is not signed: {who} sign it with their NKey ({hint})"
        ),
        SignatureError::UnknownKey { key } => {
            let known = bound_name(&config.approvers, &key)
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            format!("{key}{known} may not {verb} '{node_id}' ({who})")
        }
        other => format!("the {thing} on '{node_id}' is refused: {other}"),
    })?;
    let by = allowed
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, by)| by.clone())
        .expect("verify accepts only allowed keys");
    if let Some(claimed) = claimed.map(str::trim).filter(|c| !c.is_empty()) {
        let names_signer = claimed == by
            || claimed == key
            || config.approvers.get(claimed).is_some_and(|k| *k == key);
        if !names_signer {
            return Err(format!(
                "the {thing} says it is by '{claimed}', but it is signed by {by} ({key}): \
                 leave `by` out, the signature says who sends it"
            ));
        }
    }
    Ok(by)
}

/// A name `config` binds to `key`, if any (the first in order).
fn bound_name<'a>(approvers: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    approvers
        .iter()
        .find(|(_, k)| *k == key)
        .map(|(n, _)| n.as_str())
}

/// Why a request's signature does not count.
#[derive(Debug, thiserror::Error)]
pub(in crate::shell) enum Refused {
    /// It does not verify (or is of the first, replayable scheme).
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// It verifies, but was accepted before.
    #[error(transparent)]
    Replay(#[from] nonces::Replay),
}

/// The key that signed request `msg` (a start, a get, a cancel, a steering request),
/// `None` when it is unsigned; an error when it tries to be signed and the signature does
/// not hold, or is one accepted before (its nonce is remembered here: see `nonces`).
pub(in crate::shell) async fn signer(
    shared: &Shared,
    msg: &async_nats::Message,
) -> std::result::Result<Option<String>, Refused> {
    let headers = msg.headers.as_ref();
    let reply = msg.reply.as_ref().map(|r| r.as_str());
    let Some(key) = signer_of(headers, msg.subject.as_str(), reply, &msg.payload)? else {
        return Ok(None);
    };
    nonces::first_use(shared, headers).await?;
    Ok(Some(key))
}

/// The key that signed a request (a start, a cancel) answered on `reply`, `None` when it
/// is unsigned; an error when it tries to be signed and the signature does not hold.
/// Whether it was accepted before is [`signer`]'s to check.
pub(in crate::shell) fn signer_of(
    headers: Option<&HeaderMap>,
    subject: &str,
    reply: Option<&str>,
    payload: &[u8],
) -> std::result::Result<Option<String>, SignatureError> {
    if !signing::is_signed(headers) {
        return Ok(None);
    }
    signing::verify(
        headers,
        subject,
        reply,
        payload,
        crate::shell::clock::system_now(),
        Allowed::AnyUser,
    )
    .map(Some)
}

/// How a cancel named the run it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::shell) enum Named {
    /// By the task id its caller started it with (under the cancel's `Mesh-Caller`).
    TaskId,
    /// By its execution id.
    ExecutionId,
}

/// Whether a cancel signed by `signer` (`None`: unsigned) that named run `execution`
/// (started by `started_by`) as `named` may cancel it; else why not.
pub(in crate::shell) fn may_cancel(
    config: &Config,
    execution: &ExecutionId,
    started_by: &Caller,
    named: Named,
    signer: Option<&str>,
) -> std::result::Result<(), String> {
    if signer.is_some_and(|k| config.operators.iter().any(|o| o == k)) {
        return Ok(());
    }
    match (&started_by.signer, named) {
        (Some(owner), _) if signer == Some(owner.as_str()) => Ok(()),
        (Some(owner), _) => Err(format!(
            "run {execution} was started by key {owner}: only a cancel signed by that key, \
             or by an operator's, may stop it{}",
            signer
                .map(|k| format!(" (this one is signed by {k})"))
                .unwrap_or_default()
        )),
        (None, Named::TaskId) => Ok(()),
        (None, Named::ExecutionId) => Err(format!(
            "naming run {execution} by its execution id takes an operator's signature \
             (workflow-node runs cancel --nkey-seed-file); its caller cancels it by the task \
             id it started it with"
        )),
    }
}

/// Whether a request signed by `signer` (`None`: unsigned) may join or read run
/// `execution` (started by `started_by`): its final reply and its state are the owner's.
/// A run started unsigned is open to whoever names it by its caller's name and task id (or
/// its execution id), as before; a signed one only to its key and the operators'.
pub(in crate::shell) fn may_see(
    config: &Config,
    execution: &ExecutionId,
    started_by: &Caller,
    signer: Option<&str>,
) -> std::result::Result<(), String> {
    let Some(owner) = &started_by.signer else {
        return Ok(());
    };
    if signer == Some(owner.as_str())
        || signer.is_some_and(|k| config.operators.iter().any(|o| o == k))
    {
        return Ok(());
    }
    Err(format!(
        "run {execution} was started by key {owner}: only a request signed by that key, or by an operator's, may join or read it{}",
        signer
            .map(|k| format!(" (this one is signed by {k})"))
            .unwrap_or_else(|| " (this one is unsigned)".into())
    ))
}

/// Checks the mesh headers a request, cancel or steering message may carry (see
/// [`messages::inbound::check_headers`]), before any is read, stored in a record or
/// passed on.
pub(in crate::shell) fn check_headers(
    h: Option<&HeaderMap>,
) -> std::result::Result<(), messages::inbound::HeaderError> {
    messages::inbound::check_headers(|name| Some(h?.get(name)?.as_str()))
}

/// The caller's name (`Mesh-Caller`), which scopes its task ids; `None` when absent or
/// blank. Requests, cancels and steering all name their caller by it.
pub(in crate::shell) fn caller_name(msg: &async_nats::Message) -> Option<String> {
    let h = msg.headers.as_ref()?;
    h.get(messages::headers::CALLER)
        .map(|c| c.as_str().trim().to_string())
        .filter(|c| !c.is_empty())
}

/// The key that signed `msg`, if the node takes it for an operator's change (`what`, for
/// the refusal): when the node has operator keys, only a request signed by one of them;
/// a node without any (a local mesh with no identities) takes any.
pub(in crate::shell) async fn operator_only(
    shared: &Shared,
    msg: &async_nats::Message,
    what: &str,
) -> std::result::Result<Option<String>, String> {
    let signer = signer(shared, msg)
        .await
        .map_err(|e| format!("the request's signature is refused: {e}"))?;
    let operators = &shared.config.operators;
    if !operators.is_empty() && !signer.as_ref().is_some_and(|k| operators.contains(k)) {
        return Err(format!(
            "{what} only by a request signed by an operator's key (--nkey-seed-file)"
        ));
    }
    Ok(signer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_sdk::Signer;

    fn config(operators: &[&Signer], approvers: &[(&str, &Signer)]) -> Config {
        Config {
            operators: operators
                .iter()
                .map(|s| s.public_key().to_string())
                .collect(),
            approvers: approvers
                .iter()
                .map(|(n, s)| (n.to_string(), s.public_key().to_string()))
                .collect(),
            ..Config::default()
        }
    }

    fn gate(approvers: &[&str]) -> ApprovalNode {
        ApprovalNode {
            approvers: approvers.iter().map(|a| a.to_string()).collect(),
            message: None,
            timeout: None,
            on_timeout: crate::definition::OnTimeout::Reject,
        }
    }

    const SUBJECT: &str = "mesh.a2a.v1.agent.request.Gate";

    fn decide(
        c: &Config,
        def: &ApprovalNode,
        by: Option<&Signer>,
        claimed: Option<&str>,
    ) -> std::result::Result<String, String> {
        let h = by.map(|s| {
            s.sign(
                SUBJECT,
                Some("_INBOX.r"),
                b"d",
                std::time::SystemTime::now(),
            )
        });
        let signed = (h.as_ref(), SUBJECT, Some("_INBOX.r"), &b"d"[..]);
        approver(c, "gate", def, signed, claimed)
    }

    #[test]
    fn a_decision_is_by_the_entry_its_key_matches() {
        let (alice, bob, op) = (Signer::generate(), Signer::generate(), Signer::generate());
        let c = config(&[&op], &[("alice", &alice), ("boss", &op)]);
        let listed = gate(&["alice", bob.public_key()]);
        assert_eq!(decide(&c, &listed, Some(&alice), None), Ok("alice".into()));
        assert_eq!(
            decide(&c, &listed, Some(&alice), Some("alice")),
            Ok("alice".into())
        );
        assert_eq!(
            decide(&c, &listed, Some(&bob), None),
            Ok(bob.public_key().into())
        );
        let e = decide(&c, &listed, Some(&op), None).unwrap_err();
        assert!(e.contains("(boss) may not decide on 'gate'"), "{e}");
        let e = decide(&c, &listed, None, None).unwrap_err();
        assert!(e.contains("not signed"), "{e}");
        let e = decide(&c, &listed, Some(&bob), Some("alice")).unwrap_err();
        assert!(
            e.contains("says it is by 'alice', but it is signed by"),
            "{e}"
        );
        // Without approvers: the operators, by their bound name.
        assert_eq!(decide(&c, &gate(&[]), Some(&op), None), Ok("boss".into()));
        let e = decide(&c, &gate(&[]), Some(&alice), None).unwrap_err();
        assert!(e.contains("operators"), "{e}");
        let none = config(&[], &[]);
        let e = decide(&none, &gate(&[]), Some(&op), None).unwrap_err();
        assert!(e.contains("nobody can decide"), "{e}");
    }

    #[test]
    fn cancels_need_the_starting_key_an_operator_or_for_unsigned_runs_the_task_id() {
        let (owner, other, op) = (Signer::generate(), Signer::generate(), Signer::generate());
        let c = config(&[&op], &[]);
        let e = ExecutionId("e1".into());
        let signed = Caller {
            signer: Some(owner.public_key().into()),
            ..Caller::default()
        };
        let unsigned = Caller::default();
        let k = |s: &Signer| Some(s.public_key().to_string());
        let may =
            |by: &Caller, named, s: Option<String>| may_cancel(&c, &e, by, named, s.as_deref());
        assert!(may(&signed, Named::TaskId, k(&owner)).is_ok());
        assert!(may(&signed, Named::ExecutionId, k(&owner)).is_ok());
        assert!(may(&signed, Named::TaskId, k(&op)).is_ok());
        assert!(may(&signed, Named::TaskId, None).is_err());
        let why = may(&signed, Named::TaskId, k(&other)).unwrap_err();
        assert!(why.contains("only a cancel signed by that key"), "{why}");
        assert!(may(&unsigned, Named::TaskId, None).is_ok());
        assert!(may(&unsigned, Named::ExecutionId, k(&op)).is_ok());
        let why = may(&unsigned, Named::ExecutionId, None).unwrap_err();
        assert!(why.contains("operator's signature"), "{why}");
        assert!(may(&unsigned, Named::ExecutionId, k(&other)).is_err());
    }

    #[test]
    fn a_signed_run_is_seen_only_by_its_key_and_operators() {
        let (owner, other, op) = (Signer::generate(), Signer::generate(), Signer::generate());
        let config = config(&[&op], &[]);
        let e = ExecutionId("e".into());
        let signed = Caller {
            signer: Some(owner.public_key().into()),
            ..Caller::default()
        };
        let k = |s: &Signer| Some(s.public_key().to_string());
        assert_eq!(may_see(&config, &e, &signed, k(&owner).as_deref()), Ok(()));
        assert_eq!(may_see(&config, &e, &signed, k(&op).as_deref()), Ok(()));
        let refused = may_see(&config, &e, &signed, k(&other).as_deref()).unwrap_err();
        assert!(
            refused.contains("only a request signed by that key"),
            "{refused}"
        );
        assert!(may_see(&config, &e, &signed, None)
            .unwrap_err()
            .contains("unsigned"));
        assert_eq!(may_see(&config, &e, &Caller::default(), None), Ok(()));
    }

    #[test]
    fn config_keys_and_bound_names_are_checked() {
        let alice = Signer::generate();
        let wf = crate::definition::parse_str(
            "name: W\nworkflow:\n  description: d\n  nodes:\n    - {id: gate, type: approval, approvers: [alice]}\n  output_mapping: {}\n",
            "t.yaml",
        )
        .unwrap();
        let unbound = check_config(&Config::default(), std::slice::from_ref(&wf)).unwrap_err();
        assert!(
            unbound.to_string().contains("names approver 'alice'"),
            "{unbound}"
        );
        assert!(
            unbound.to_string().contains("--approver alice=U"),
            "{unbound}"
        );
        let bound = config(&[], &[("alice", &alice)]);
        check_config(&bound, std::slice::from_ref(&wf)).unwrap();
        let mut bad = bound.clone();
        bad.operators.push("alice".into());
        assert!(check_config(&bad, &[])
            .unwrap_err()
            .to_string()
            .contains("operator key"));
        let mut bad = bound;
        bad.approvers.insert("bob".into(), "not-a-key".into());
        assert!(check_config(&bad, &[])
            .unwrap_err()
            .to_string()
            .contains("approver bob"));
    }
}
