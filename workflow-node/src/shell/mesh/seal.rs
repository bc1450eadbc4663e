//! Proof that what arrives on a workflow's subjects comes from whoever may send it.
//!
//! Every replica of a deployment shares one secret, kept in KV bucket `{ns}_wf_secrets`
//! (made by the first replica, read by the others; under the shipped permissions only
//! workflow-node users can read it). From it come:
//! - **call tokens**: a call goes out with header `Mesh-Call-Token`, an HMAC of the
//!   workflow and the sub-task id, which any replica derives again (nothing is stored).
//!   Only the agent that received the call learns it (the request subject is read by
//!   callees only; the sub-task id itself carries no secret), and a reply or status update
//!   for the call counts only with its `Mesh-Call-Mac` (see `messages::call_proof`).
//! - **wrapped tokens**: a call token this node received as a callee (a workflow called by
//!   another) is kept in the run's record encrypted, so that readers of the runs bucket
//!   and the event stream never learn it, while any replica can prove the run's answers.
//! - **event MACs**: an event a replica publishes into a run's stream carries an HMAC of
//!   its subject, de-duplication id and payload in header `Mesh-Event-Mac`; an event
//!   without a valid one (a forged start, cancel, decision or timer) is refused.
//! - **de-duplication ids**: what a replica publishes into a stream goes with
//!   `Nats-Msg-Id: {fact}.{tag}` ([`Seal::msg_id`]), the tag an HMAC of the fact. JetStream
//!   de-duplicates ids across a whole stream, and a run's stream also takes agents'
//!   replies: an id anyone could write (`approval.{execution}.{node}`) could be published
//!   first by an agent, or by a caller asking an agent to reply there, and the real event
//!   would be dropped as its duplicate. Only a replica can make the tag.
//! - **the card key**: the NKey that signs the deployment's workflow cards
//!   ([`Seal::card_signer`]), its seed an HMAC of a fixed label. Every replica derives the
//!   same key with no key file to distribute, and it changes when the secret does.

use async_nats::jetstream::{self, kv};
use async_nats::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::shell::error::{Context, Error, Result};
use crate::shell::run::envelope::Caller;
use crate::shell::run::names;

/// The key under which the secret is stored.
const SECRET_KEY: &str = "calls";
/// Hex characters of a call token (128 bits of HMAC).
const TOKEN_HEX: usize = 32;
/// The prefix of a wrapped token (the version of its format).
const WRAPPED: &str = "v1:";
/// Hex characters of a de-duplication id's tag (128 bits of HMAC).
const MSG_ID_TAG_HEX: usize = 32;

/// The header carrying an event's MAC.
pub const EVENT_MAC: &str = "Mesh-Event-Mac";

/// Why a call's reply or status update is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The message carries no `Mesh-Call-Mac`.
    #[error("it carries no Mesh-Call-Mac: only the agent that received the call can answer it")]
    NoMac,
    /// The MAC is not the one the call's token gives for this subject and payload.
    #[error("its Mesh-Call-Mac does not match: forged, altered or meant for another subject")]
    WrongMac,
}

/// The deployment's secret, and what is derived from it.
#[derive(Clone)]
pub struct Seal {
    key: Vec<u8>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal(..)")
    }
}

impl Seal {
    /// A seal with the given secret (tests, and the bucket's value).
    pub fn new(secret: &[u8]) -> Seal {
        Seal {
            key: secret.to_vec(),
        }
    }

    /// Reads the deployment's secret from its bucket, making both on first use. Two
    /// replicas starting at once agree: the second `create` fails and it reads the first's.
    pub async fn open_or_create(
        js: &jetstream::Context,
        ns: &str,
        replicas: usize,
        max_bytes: u64,
    ) -> Result<Seal> {
        let bucket = names::secrets_bucket(ns);
        let setup = |e: async_nats::Error| Error::Setup {
            resource: format!("bucket {bucket}"),
            source: e,
        };
        let store = match js.get_key_value(&bucket).await {
            Ok(store) => store,
            Err(_) => js
                .create_key_value(kv::Config {
                    bucket: bucket.clone(),
                    history: 1,
                    num_replicas: replicas,
                    max_bytes: crate::shell::mesh::setup::bytes_limit(max_bytes),
                    ..Default::default()
                })
                .await
                .map_err(|e| setup(e.into()))?,
        };
        let what = || format!("reading the deployment secret in {bucket}");
        if let Some(secret) = store.get(SECRET_KEY).await.context(what)? {
            return Ok(Seal::new(&secret));
        }
        let fresh: Vec<u8> = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
            .iter()
            .flat_map(|u| u.as_bytes().to_vec())
            .collect();
        if store.create(SECRET_KEY, fresh.clone().into()).await.is_ok() {
            return Ok(Seal::new(&fresh));
        }
        match store.get(SECRET_KEY).await.context(what)? {
            Some(secret) => Ok(Seal::new(&secret)),
            None => Err(Error::Missing(format!(
                "the deployment secret in {bucket} (neither created nor found)"
            ))),
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // An HMAC takes a key of any length: `new_from_slice` cannot fail for it.
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts any key length");
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// The key that signs the deployment's workflow cards: the same on every replica (see
    /// the module doc).
    pub fn card_signer(&self) -> agent_sdk::Signer {
        let seed: [u8; 32] = self.mac(&[b"card-key-v1"]).finalize().into_bytes().into();
        agent_sdk::Signer::from_raw_seed(seed)
    }

    /// The call token of `sub_task_id` of `workflow`: 32 lowercase hex characters, sent
    /// only in the request's `Mesh-Call-Token`.
    pub fn call_token(&self, workflow: &str, sub_task_id: &str) -> String {
        let bytes = self
            .mac(&[b"call", workflow.as_bytes(), sub_task_id.as_bytes()])
            .finalize()
            .into_bytes();
        hex::encode(&bytes[..TOKEN_HEX / 2])
    }

    /// The name of an object the node stores for `stem` (a run's input or output, a call's
    /// input, a record too large for its key): `{stem}.{tag}{suffix}`, the tag 128 bits of
    /// HMAC of both. The name is the only key to the object, so whoever knows the run or
    /// call id cannot make it; and it is the same at every replica and after a crash, so a
    /// second write replaces the first.
    pub fn object_name(&self, stem: &str, suffix: &str) -> String {
        let bytes = self
            .mac(&[b"object", stem.as_bytes(), suffix.as_bytes()])
            .finalize()
            .into_bytes();
        format!("{stem}.{}{suffix}", hex::encode(&bytes[..16]))
    }

    /// Whether a reply or status update of call `sub_task_id` of `workflow`, published to
    /// `subject` with `payload`, carries the MAC its token gives (`mac`, the message's
    /// `Mesh-Call-Mac`).
    pub fn check_call(
        &self,
        workflow: &str,
        sub_task_id: &str,
        subject: &str,
        payload: &[u8],
        mac: Option<&str>,
    ) -> std::result::Result<(), SealError> {
        let mac = mac.ok_or(SealError::NoMac)?;
        let token = self.call_token(workflow, sub_task_id);
        if messages::call_proof::verify(&token, subject, payload, mac) {
            Ok(())
        } else {
            Err(SealError::WrongMac)
        }
    }

    /// `token` encrypted under the deployment secret, to be kept where others read:
    /// `v1:{nonce}:{token XOR pad}` in hex, the nonce random (16 bytes) and the pad the
    /// HMAC of the nonce (extended by counter), so equal tokens wrap differently.
    pub fn wrap_token(&self, token: &str) -> String {
        let nonce = uuid::Uuid::new_v4();
        let sealed = self.xor_pad(nonce.as_bytes(), token.as_bytes());
        format!(
            "{WRAPPED}{}:{}",
            hex::encode(nonce.as_bytes()),
            hex::encode(sealed)
        )
    }

    /// The token [`Seal::wrap_token`] wrapped; `None` for anything else (what another
    /// secret unwraps is no token).
    pub fn unwrap_token(&self, wrapped: &str) -> Option<String> {
        let (nonce, sealed) = wrapped.strip_prefix(WRAPPED)?.split_once(':')?;
        let (nonce, sealed) = (hex::decode(nonce).ok()?, hex::decode(sealed).ok()?);
        String::from_utf8(self.xor_pad(&nonce, &sealed))
            .ok()
            .filter(|t| messages::call_proof::check_token(t).is_ok())
    }

    fn xor_pad(&self, nonce: &[u8], data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len());
        for (n, chunk) in data.chunks(32).enumerate() {
            let block = (n as u64).to_be_bytes();
            let pad = self.mac(&[b"wrap", nonce, &block]).finalize().into_bytes();
            out.extend(chunk.iter().zip(pad.iter()).map(|(d, p)| d ^ p));
        }
        out
    }

    /// The call token `caller` sent (its `Mesh-Call-Token`), unwrapped from its record;
    /// `None` for a caller that sent none, or whose wrapped token this deployment cannot
    /// read (its answers then go unproven, and that caller drops them).
    pub(in crate::shell) fn token_of(&self, caller: &Caller) -> Option<String> {
        let wrapped = caller.call_token.as_deref()?;
        let token = self.unwrap_token(wrapped);
        if token.is_none() {
            tracing::warn!("a caller's wrapped call token cannot be read: its answers go unproven");
        }
        token
    }

    /// Headers of an answer to a caller that sent `token`, published to `subject` with
    /// `payload`: its `Mesh-Call-Mac` (none without a token).
    pub(in crate::shell) fn answer_headers(
        &self,
        token: Option<&str>,
        subject: &str,
        payload: &[u8],
    ) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(token) = token {
            let mac = messages::call_proof::mac(token, subject, payload);
            h.insert(messages::call_proof::CALL_MAC, mac.as_str());
        }
        h
    }

    /// The de-duplication id of `fact` (one of `messages::msg_id`'s readable ids):
    /// `{fact}.{tag}`, the tag the first 128 bits of an HMAC of the fact, in hex. The same
    /// fact gives the same id on every replica; nobody without the secret can make it.
    pub fn msg_id(&self, fact: &str) -> String {
        let bytes = self
            .mac(&[b"msg-id", fact.as_bytes()])
            .finalize()
            .into_bytes();
        format!("{fact}.{}", hex::encode(&bytes[..MSG_ID_TAG_HEX / 2]))
    }

    /// The MAC of an event published to `subject` with de-duplication id `msg_id`.
    pub fn event_mac(&self, subject: &str, msg_id: &str, payload: &[u8]) -> String {
        let bytes = self
            .mac(&[b"event", subject.as_bytes(), msg_id.as_bytes(), payload])
            .finalize()
            .into_bytes();
        hex::encode(bytes)
    }

    /// Whether `mac` is [`Seal::event_mac`] of the event (compared in constant time).
    pub fn check_event(&self, subject: &str, msg_id: &str, payload: &[u8], mac: &str) -> bool {
        let Ok(given) = hex::decode(mac) else {
            return false;
        };
        self.mac(&[b"event", subject.as_bytes(), msg_id.as_bytes(), payload])
            .verify_slice(&given)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replica_derives_the_same_card_key_and_another_secret_another() {
        let key = |secret: &[u8]| Seal::new(secret).card_signer().public_key().to_owned();
        assert_eq!(key(b"secret"), key(b"secret"));
        assert_ne!(key(b"secret"), key(b"other"));
        assert!(agent_sdk::signing::is_user_public_key(&key(b"secret")));
    }

    #[test]
    fn replies_verify_only_with_their_calls_token() {
        let seal = Seal::new(b"secret");
        let token = seal.call_token("Wf", "e1_check-stock_0_2");
        assert_eq!(token.len(), TOKEN_HEX);
        assert_eq!(messages::call_proof::check_token(&token), Ok(()));
        let subject = "mesh.a2a.v1.agent.response.Wf.e1_check-stock_0_2";
        let mac = messages::call_proof::mac(&token, subject, b"{}");
        let check = |wf: &str, id: &str, subject: &str, payload: &[u8], mac: Option<&str>| {
            seal.check_call(wf, id, subject, payload, mac)
        };
        assert_eq!(
            check("Wf", "e1_check-stock_0_2", subject, b"{}", Some(&mac)),
            Ok(())
        );
        // Another workflow, call, subject, payload or secret, or no MAC: refused.
        let wrong = Err(SealError::WrongMac);
        assert_eq!(
            check("Other", "e1_check-stock_0_2", subject, b"{}", Some(&mac)),
            wrong
        );
        assert_eq!(
            check("Wf", "e1_check-stock_0_3", subject, b"{}", Some(&mac)),
            wrong
        );
        let status = "mesh.a2a.v1.agent.status.Wf.e1_check-stock_0_2";
        assert_eq!(
            check("Wf", "e1_check-stock_0_2", status, b"{}", Some(&mac)),
            wrong
        );
        assert_eq!(
            check("Wf", "e1_check-stock_0_2", subject, b"[]", Some(&mac)),
            wrong
        );
        let other = Seal::new(b"other");
        assert_eq!(
            other.check_call("Wf", "e1_check-stock_0_2", subject, b"{}", Some(&mac)),
            wrong
        );
        assert_eq!(
            check("Wf", "e1_check-stock_0_2", subject, b"{}", None),
            Err(SealError::NoMac)
        );
    }

    #[test]
    fn wrapped_tokens_hide_the_token_and_unwrap_only_under_the_secret() {
        let seal = Seal::new(b"secret");
        let token = "0123456789abcdef0123456789abcdef0123456789abcdef";
        let wrapped = seal.wrap_token(token);
        assert!(
            !wrapped.contains(token) && !wrapped.contains(&token[..16]),
            "{wrapped}"
        );
        assert_ne!(wrapped, seal.wrap_token(token), "a fresh nonce each time");
        assert_eq!(seal.unwrap_token(&wrapped).as_deref(), Some(token));
        assert_eq!(Seal::new(b"other").unwrap_token(&wrapped), None);
        for garbage in ["", "v1:", "v1:zz:00", "v2:00:00", token] {
            assert_eq!(seal.unwrap_token(garbage), None, "{garbage}");
        }
    }

    #[test]
    fn msg_ids_carry_a_tag_only_the_secret_makes() {
        let seal = Seal::new(b"secret");
        let id = seal.msg_id("approval.e1.gate");
        let tag = id
            .strip_prefix("approval.e1.gate.")
            .expect("the fact comes first");
        assert_eq!(tag.len(), MSG_ID_TAG_HEX);
        assert_eq!(id, Seal::new(b"secret").msg_id("approval.e1.gate"));
        assert_ne!(id, Seal::new(b"other").msg_id("approval.e1.gate"));
        assert_ne!(id, seal.msg_id("approval.e1.gate2"));
    }

    #[test]
    fn event_macs_bind_subject_id_and_payload() {
        let seal = Seal::new(b"secret");
        let mac = seal.event_mac("mesh.wf.Wf.events.e1", "cancel.e1", b"{}");
        assert!(seal.check_event("mesh.wf.Wf.events.e1", "cancel.e1", b"{}", &mac));
        assert!(!seal.check_event("mesh.wf.Wf.events.e2", "cancel.e1", b"{}", &mac));
        assert!(!seal.check_event("mesh.wf.Wf.events.e1", "cancel.e2", b"{}", &mac));
        assert!(!seal.check_event("mesh.wf.Wf.events.e1", "cancel.e1", b"[]", &mac));
        assert!(!seal.check_event("mesh.wf.Wf.events.e1", "cancel.e1", b"{}", "00"));
        assert!(!seal.check_event("mesh.wf.Wf.events.e1", "cancel.e1", b"{}", "not hex"));
    }
}
