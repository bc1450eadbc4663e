//! Proof that what arrives on a workflow's subjects comes from whoever may send it.
//!
//! Every replica of a deployment shares one secret, kept in KV bucket `{ns}_wf_secrets`
//! (made by the first replica, read by the others; under the shipped permissions only
//! workflow-node users can read it). From it come:
//! - **call tokens**: a call's sub-task id goes on the wire as `{id}-{token}`, the token an
//!   HMAC of the workflow and the id. Only whoever received the call knows it, so a reply
//!   or status update for a call is accepted only with the right token; and since agents
//!   use the task id as the reply's de-duplication id, a forger cannot pre-empt the real
//!   reply in the stream either.
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
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::shell::error::{Context, Error, Result};
use crate::shell::run::names;

/// The key under which the secret is stored.
const SECRET_KEY: &str = "calls";
/// Hex characters of a call token (128 bits of HMAC).
const TOKEN_HEX: usize = messages::sub_task::TOKEN_HEX;
/// Hex characters of a de-duplication id's tag (128 bits of HMAC).
const MSG_ID_TAG_HEX: usize = 32;

/// The header carrying an event's MAC.
pub const EVENT_MAC: &str = "Mesh-Event-Mac";

/// Why a call's reply or status update is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The sub-task id has no token (`{id}-{token}`).
    #[error("sub-task id '{0}' carries no call token")]
    NoToken(String),
    /// The token is not the one the call was sent with.
    #[error("sub-task id '{0}' carries a wrong call token")]
    WrongToken(String),
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

    fn token(&self, workflow: &str, sub_task_id: &str) -> String {
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

    /// The id a call of `workflow` goes out with: `{sub_task_id}-{token}`.
    pub fn call_id(&self, workflow: &str, sub_task_id: &str) -> String {
        format!("{sub_task_id}-{}", self.token(workflow, sub_task_id))
    }

    /// The sub-task id inside `wire_id`, when its token is the one [`Seal::call_id`] gave.
    pub fn check_call<'a>(
        &self,
        workflow: &str,
        wire_id: &'a str,
    ) -> std::result::Result<&'a str, SealError> {
        let id = plain_id(wire_id);
        if id.len() == wire_id.len() {
            return Err(SealError::NoToken(wire_id.to_owned()));
        }
        let Ok(given) = hex::decode(&wire_id[id.len() + 1..]) else {
            return Err(SealError::NoToken(wire_id.to_owned()));
        };
        self.mac(&[b"call", workflow.as_bytes(), id.as_bytes()])
            .verify_truncated_left(&given)
            .map(|()| id)
            .map_err(|_| SealError::WrongToken(wire_id.to_owned()))
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

/// The sub-task id of a wire id, token or not, for routing before the token is checked.
pub fn plain_id(wire_id: &str) -> &str {
    messages::sub_task::without_token(wire_id)
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
    fn call_ids_verify_only_with_their_token() {
        let seal = Seal::new(b"secret");
        let id = seal.call_id("Wf", "e1_check-stock_0_2");
        assert!(id.starts_with("e1_check-stock_0_2-"), "{id}");
        assert_eq!(seal.check_call("Wf", &id), Ok("e1_check-stock_0_2"));
        assert_eq!(plain_id(&id), "e1_check-stock_0_2");
        // Another workflow, another secret, another id, or no token: refused.
        assert!(matches!(
            seal.check_call("Other", &id),
            Err(SealError::WrongToken(_))
        ));
        assert!(Seal::new(b"other").check_call("Wf", &id).is_err());
        let forged = format!("e1_check-stock_0_3-{}", &id[id.len() - TOKEN_HEX..]);
        assert!(seal.check_call("Wf", &forged).is_err());
        assert!(matches!(
            seal.check_call("Wf", "e1_check-stock_0_2"),
            Err(SealError::NoToken(_))
        ));
        assert!(matches!(
            seal.check_call("Wf", "e1_n_0_2-zz"),
            Err(SealError::NoToken(_))
        ));
        // Retries of one call share their slot key.
        assert_eq!(
            messages::sub_task::slot_key(&seal.call_id("Wf", "e1_n_0_1")),
            messages::sub_task::slot_key(&seal.call_id("Wf", "e1_n_0_2"))
        );
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
