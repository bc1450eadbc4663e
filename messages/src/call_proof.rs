//! Proof that a reply or status update comes from whoever received the call.
//!
//! A caller that must know who answers (a workflow node calling an agent or another
//! workflow) sends a per-call secret, the **call token**, in header [`CALL_TOKEN`] of the
//! request, on the callee's request subject, which only callees read. The token appears in
//! no subject, payload or record anyone else reads. The callee proves each reply and status
//! update it publishes for that call with header [`CALL_MAC`]: the HMAC-SHA256, keyed by the
//! token's ASCII bytes, of [`mac_input`] (`mesh-call-v1\n{subject}\n{hex sha256 of the
//! payload}`), so a captured status update cannot pass as a reply (another subject) and a
//! forger without the token can make neither. Its reply's `Nats-Msg-Id` is [`reply_msg_id`],
//! unguessable before the reply, so nobody pre-empts it through a stream's de-duplication.
//! The caller cancels such a call with a `tasks/cancel` carrying [`CALL_MAC`] over the cancel
//! subject and payload. See `docs/protocol.md`, "Call tokens".

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The header of a request carrying the call token (`[0-9a-f]{32,128}`).
pub const CALL_TOKEN: &str = "Mesh-Call-Token";

/// The header of a reply, status update or cancel proving it with the call token: 64
/// lowercase hex characters, [`mac`].
pub const CALL_MAC: &str = "Mesh-Call-Mac";

/// The first line of every MAC input: a proof of this version matches nothing else.
const TAG: &str = "mesh-call-v1";

/// The fixed input of [`reply_msg_id`].
const MSG_ID_TAG: &[u8] = b"mesh-call-msg-id-v1";

/// Shortest and longest call token accepted.
pub const TOKEN_LEN: std::ops::RangeInclusive<usize> = 32..=128;

/// Why a `Mesh-Call-Token` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{CALL_TOKEN} must be 32 to 128 lowercase hex characters (got {len} characters)")]
pub struct BadToken {
    /// The length of the value given.
    pub len: usize,
}

/// Checks a `Mesh-Call-Token` value against its grammar, `[0-9a-f]{32,128}`.
pub fn check_token(token: &str) -> Result<(), BadToken> {
    let hex = token
        .bytes()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if hex && TOKEN_LEN.contains(&token.len()) {
        Ok(())
    } else {
        Err(BadToken { len: token.len() })
    }
}

/// What [`mac`] authenticates: `mesh-call-v1`, the subject the message is published to and
/// the lowercase hex SHA-256 of its payload, joined by `\n` (no trailing newline).
pub fn mac_input(subject: &str, payload: &[u8]) -> String {
    let digest = hex::encode(Sha256::digest(payload));
    format!("{TAG}\n{subject}\n{digest}")
}

fn keyed(token: &str) -> Hmac<Sha256> {
    // An HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC accepts any key length")
}

/// The `Mesh-Call-Mac` of a message published to `subject` with `payload`: lowercase hex
/// HMAC-SHA256 keyed by the token's bytes over [`mac_input`].
pub fn mac(token: &str, subject: &str, payload: &[u8]) -> String {
    let mut m = keyed(token);
    m.update(mac_input(subject, payload).as_bytes());
    hex::encode(m.finalize().into_bytes())
}

/// Whether `given` is [`mac`] of the message (compared in constant time).
pub fn verify(token: &str, subject: &str, payload: &[u8], given: &str) -> bool {
    let Ok(given) = hex::decode(given) else {
        return false;
    };
    let mut m = keyed(token);
    m.update(mac_input(subject, payload).as_bytes());
    m.verify_slice(&given).is_ok()
}

/// The `Nats-Msg-Id` of the reply to a call made with `token`: `call.` and the lowercase
/// hex HMAC-SHA256, keyed by the token's bytes, of `mesh-call-msg-id-v1`. The same for
/// every copy of the reply (a stream stores one), and unknown to anyone without the token.
pub fn reply_msg_id(token: &str) -> String {
    let mut m = keyed(token);
    m.update(MSG_ID_TAG);
    format!("call.{}", hex::encode(m.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn tokens_have_a_grammar() {
        assert_eq!(check_token(TOKEN), Ok(()));
        assert_eq!(check_token(&"a".repeat(128)), Ok(()));
        for bad in [
            "",
            "0123",
            "0123456789ABCDEF0123456789ABCDEF",
            &"a".repeat(129),
        ] {
            assert!(check_token(bad).is_err(), "{bad}");
        }
        let spaced = format!("{TOKEN} ");
        assert!(check_token(&spaced).is_err());
    }

    #[test]
    fn the_mac_input_is_the_documented_string() {
        // The SHA-256 of the empty payload.
        assert_eq!(
            mac_input("mesh.a2a.v1.agent.response.Wf.e1_n_0_1", b""),
            "mesh-call-v1\nmesh.a2a.v1.agent.response.Wf.e1_n_0_1\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn macs_bind_token_subject_and_payload() {
        let subject = "mesh.a2a.v1.agent.response.Wf.e1_n_0_1";
        let m = mac(TOKEN, subject, b"{}");
        assert_eq!(m.len(), 64);
        assert!(verify(TOKEN, subject, b"{}", &m));
        let other_token = "f".repeat(32);
        assert!(!verify(&other_token, subject, b"{}", &m));
        let status = "mesh.a2a.v1.agent.status.Wf.e1_n_0_1";
        assert!(!verify(TOKEN, status, b"{}", &m));
        assert!(!verify(TOKEN, subject, b"[]", &m));
        assert!(!verify(TOKEN, subject, b"{}", "not hex"));
        assert!(!verify(TOKEN, subject, b"{}", &m[..32]));
    }

    #[test]
    fn reply_ids_depend_on_the_token_only() {
        let id = reply_msg_id(TOKEN);
        assert_eq!(id, reply_msg_id(TOKEN));
        assert!(id.starts_with("call.") && id.len() == 5 + 64, "{id}");
        assert_ne!(id, reply_msg_id(&"f".repeat(32)));
    }
}
