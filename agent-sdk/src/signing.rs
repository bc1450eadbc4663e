//! Proving who sends a request: an NKey user key (Ed25519, `U…` public, `SU…` seed) signs
//! it, and the receiver checks the signature against the keys it trusts for the act.
//!
//! Four headers travel with a signed request (names in `messages::headers`):
//! `Mesh-Signer` (the public key), `Mesh-Signed-At` (milliseconds since the Unix epoch),
//! `Mesh-Nonce` (at least 128 random bits, base64url without padding) and
//! `Mesh-Signature` (base64url without padding) over the UTF-8 lines, joined by `\n` with
//! none after the last,
//!
//! ```text
//! mesh-sig-v2
//! {subject}
//! {NATS reply subject, or empty}
//! {Mesh-Reply-To, or empty}
//! {Mesh-Status-To, or empty}
//! {Mesh-Caller, or empty}
//! {Mesh-Signed-At}
//! {Mesh-Nonce}
//! {hex sha256 of the payload, lower case}
//! ```
//!
//! (header values with surrounding whitespace removed). The subject binds the signature to
//! the workflow asked, the reply and status subjects to where answers go, the caller name
//! to the scope of its task ids, the digest to the exact request (the run, the node, the
//! decision), the time to a window of [`MAX_SKEW`] either way. Sent again from another
//! inbox or under another caller name, a request no longer verifies; sent again as it
//! was, it carries a nonce the receiver has seen (a workflow node remembers them for the
//! signature's whole validity) and is refused. The first form, `mesh-sig-v1`, bound
//! none of this and is refused ([`SignatureError::Version1`]).
//!
//! ```
//! # use std::time::SystemTime;
//! use agent_sdk::signing::{verify, Allowed, Signer};
//! let signer = Signer::generate();
//! let subject = "mesh.a2a.v1.agent.request.Gate";
//! let headers = signer.sign(subject, Some("_INBOX.me.1"), b"{}", SystemTime::now());
//! let key = verify(Some(&headers), subject, Some("_INBOX.me.1"), b"{}",
//!     SystemTime::now(), Allowed::Only(&[signer.public_key().to_string()])).unwrap();
//! assert_eq!(key, signer.public_key());
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::HeaderMap;
use data_encoding::BASE64URL_NOPAD;
use messages::headers::{CALLER, NONCE, REPLY_TO, SIGNATURE, SIGNED_AT, SIGNER, STATUS_TO};
use nkeys::{KeyPair, KeyPairType};
use sha2::{Digest, Sha256};

/// The first line of what is signed: a later scheme gets another, so a signature never
/// verifies under the wrong one.
pub const SIGNATURE_SCHEME: &str = "mesh-sig-v2";

/// The fewest bytes a nonce decodes to (128 bits).
pub const MIN_NONCE_BYTES: usize = 16;

/// The most bytes a nonce may decode to.
const MAX_NONCE_BYTES: usize = 64;

/// How far a signature's time may be from the receiver's clock, either way.
pub const MAX_SKEW: Duration = Duration::from_secs(300);

/// An NKey user key that signs requests. Cheap to clone; its `Debug` shows the public key
/// only.
#[derive(Clone)]
pub struct Signer {
    pair: Arc<KeyPair>,
    public: String,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("public_key", &self.public)
            .finish()
    }
}

/// Two signers are the same when their keys are.
impl PartialEq for Signer {
    fn eq(&self, other: &Signer) -> bool {
        self.public == other.public
    }
}

impl Eq for Signer {}

/// Why a seed gives no [`Signer`].
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The seed file could not be read.
    #[error("reading the NKey seed file {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no line that looks like a user seed (`SU…`).
    #[error("the NKey seed file {} holds no user seed (a line starting with SU)", .path.display())]
    NoSeed {
        /// The file.
        path: PathBuf,
    },
    /// The text is not a valid NKey seed.
    #[error("not a valid NKey seed: {0}")]
    Invalid(String),
    /// A valid seed of another kind of key (an account's, an operator's): requests are
    /// signed by user keys.
    #[error("an NKey seed of a {kind} key, not of a user key (SU…)")]
    NotUser {
        /// The kind of key it is.
        kind: String,
    },
}

/// Why a request's signature is refused; the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The request carries none of the signature headers.
    #[error("the request is not signed (no {SIGNER}, {SIGNED_AT} or {SIGNATURE} header)")]
    Unsigned,
    /// It carries some of them, not all.
    #[error("the request's signature is incomplete: no {header} header")]
    MissingHeader {
        /// The header missing.
        header: &'static str,
    },
    /// A header does not hold what it must (a user public key, a time, base64url).
    #[error("the {header} header is malformed: {reason}")]
    BadEncoding {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The signature does not verify with the key named: the request was changed, or not
    /// signed by that key.
    #[error("the signature does not verify with key {key} (the request was altered or signed by another key)")]
    BadSignature {
        /// The key the request names.
        key: String,
    },
    /// Signed with the first scheme, `mesh-sig-v1` (no `Mesh-Nonce`), which binds neither
    /// the reply and status subjects nor the caller name, and can be replayed.
    #[error("the request is signed with mesh-sig-v1 (no {NONCE} header), which a replay can reuse with other reply subjects or caller names: it is refused; sign it with mesh-sig-v2")]
    Version1,
    /// Signed too long ago.
    #[error("the signature is {} s old (at most {} s is accepted: sign the request again)", .age.as_secs(), MAX_SKEW.as_secs())]
    Stale {
        /// How long ago it was signed.
        age: Duration,
    },
    /// Signed in the future (the signer's clock is ahead).
    #[error("the signature is dated {} s in the future (at most {} s is accepted: is the signer's clock right?)", .ahead.as_secs(), MAX_SKEW.as_secs())]
    Future {
        /// How far ahead of the receiver's clock.
        ahead: Duration,
    },
    /// A valid signature, by a key the receiver does not trust for this.
    #[error("key {key} is not allowed to do this")]
    UnknownKey {
        /// The key that signed.
        key: String,
    },
}

/// The keys a receiver accepts.
#[derive(Debug, Clone, Copy)]
pub enum Allowed<'a> {
    /// Any user key (the signer is recorded, as the owner of what it starts).
    AnyUser,
    /// Only these public keys.
    Only(&'a [String]),
}

impl Signer {
    /// A signer from a user seed (`SU…`); surrounding whitespace is ignored.
    pub fn from_seed(seed: &str) -> Result<Signer, SeedError> {
        let pair =
            KeyPair::from_seed(seed.trim()).map_err(|e| SeedError::Invalid(e.to_string()))?;
        if pair.key_pair_type() != KeyPairType::User {
            return Err(SeedError::NotUser {
                kind: format!("{:?}", pair.key_pair_type()).to_lowercase(),
            });
        }
        let public = pair.public_key();
        Ok(Signer {
            pair: Arc::new(pair),
            public,
        })
    }

    /// A signer from a seed file: a file holding the seed (as `nk -gen user` writes it),
    /// or a `.creds` file (its user seed is used).
    pub fn from_seed_file(path: impl AsRef<Path>) -> Result<Signer, SeedError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| SeedError::Read {
            path: path.to_owned(),
            source,
        })?;
        let seed = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("SU"))
            .ok_or_else(|| SeedError::NoSeed {
                path: path.to_owned(),
            })?;
        Signer::from_seed(seed)
    }

    /// A new random user key.
    pub fn generate() -> Signer {
        let pair = KeyPair::new_user();
        let public = pair.public_key();
        Signer {
            pair: Arc::new(pair),
            public,
        }
    }

    /// The seed (secret: whoever has it signs as this key), for writing a seed file.
    pub fn seed(&self) -> String {
        self.pair
            .seed()
            .expect("a signer is made from a seed or generated, so it has one")
    }

    /// The public key (`U…`): what approvers lists and operator settings name.
    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// The signature headers over `bytes`, which the caller made of the time `now` (in ms
    /// since the epoch, as [`SIGNED_AT`] carries it): a scheme without a nonce (cards, in
    /// [`crate::card_trust`]).
    pub(crate) fn sign_headers(
        &self,
        now: SystemTime,
        bytes: impl FnOnce(u64) -> Vec<u8>,
    ) -> HeaderMap {
        let at = millis(now);
        let signature = self
            .pair
            .sign(&bytes(at))
            .expect("a signer has a seed, so it signs");
        let mut headers = HeaderMap::new();
        headers.insert(SIGNER, self.public.as_str());
        headers.insert(SIGNED_AT, at.to_string().as_str());
        headers.insert(SIGNATURE, BASE64URL_NOPAD.encode(&signature).as_str());
        headers
    }

    /// A signer whose seed is the 32 bytes `raw` (a key derived from a secret that several
    /// processes share, so that they sign as one).
    pub fn from_raw_seed(raw: [u8; 32]) -> Signer {
        let pair =
            KeyPair::new_from_raw(KeyPairType::User, raw).expect("32 bytes are an Ed25519 seed");
        let public = pair.public_key();
        Signer {
            pair: Arc::new(pair),
            public,
        }
    }

    /// The signature headers of a request with `payload` on `subject`, answered on `reply`
    /// (its NATS reply subject, if any) and carrying no other header the signature binds,
    /// signed at `now`.
    pub fn sign(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
        now: SystemTime,
    ) -> HeaderMap {
        let mut headers = HeaderMap::new();
        self.sign_into(&mut headers, subject, reply, payload, now);
        headers
    }

    /// Adds (replaces) the signature headers, with a fresh nonce, of a request with
    /// `payload` on `subject`, answered on `reply` (its NATS reply subject, if any), signed
    /// at `now`. `headers` must already hold the `Mesh-Reply-To`, `Mesh-Status-To` and
    /// `Mesh-Caller` the request goes with: the signature binds them.
    pub fn sign_into(
        &self,
        headers: &mut HeaderMap,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
        now: SystemTime,
    ) {
        let at = millis(now);
        let nonce = fresh_nonce();
        let bytes = signed_bytes(&Signed {
            subject,
            reply: reply.unwrap_or_default().trim(),
            reply_to: &value(Some(headers), REPLY_TO),
            status_to: &value(Some(headers), STATUS_TO),
            caller: &value(Some(headers), CALLER),
            at,
            nonce: &nonce,
            payload,
        });
        let signature = self
            .pair
            .sign(&bytes)
            .expect("a signer has a seed, so it signs");
        headers.insert(SIGNER, self.public.as_str());
        headers.insert(SIGNED_AT, at.to_string().as_str());
        headers.insert(NONCE, nonce.as_str());
        headers.insert(SIGNATURE, BASE64URL_NOPAD.encode(&signature).as_str());
    }
}

/// Sends a request with `payload` on `subject` and `headers` (its `Mesh-Reply-To`,
/// `Mesh-Status-To` and `Mesh-Caller` among them), signed by `signer` when given, and
/// waits for the first answer (the client's request timeout, else 10 s). Unlike
/// `Client::request`, the reply subject is chosen before signing, so the signature binds
/// it. Errors are the client's request errors (`NoResponders`, `TimedOut`).
pub async fn request(
    client: &async_nats::Client,
    subject: String,
    mut headers: HeaderMap,
    payload: bytes::Bytes,
    signer: Option<&Signer>,
) -> Result<async_nats::Message, async_nats::RequestError> {
    use async_nats::{RequestError, RequestErrorKind, StatusCode};
    use futures::StreamExt;
    let inbox = client.new_inbox();
    let mut answers = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| RequestError::with_source(RequestErrorKind::Other, e))?;
    if let Some(signer) = signer {
        signer.sign_into(
            &mut headers,
            &subject,
            Some(&inbox),
            &payload,
            SystemTime::now(),
        );
    }
    client
        .publish_with_reply_and_headers(subject, inbox, headers, payload)
        .await
        .map_err(|e| RequestError::with_source(RequestErrorKind::Other, e))?;
    let wait = client.timeout().unwrap_or(Duration::from_secs(10));
    match tokio::time::timeout(wait, answers.next()).await {
        Ok(Some(m)) if m.status == Some(StatusCode::NO_RESPONDERS) => Err(
            RequestError::with_source(RequestErrorKind::NoResponders, "no responders"),
        ),
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err(RequestError::with_source(
            RequestErrorKind::Other,
            "the answer's subscription ended",
        )),
        Err(e) => Err(RequestError::with_source(RequestErrorKind::TimedOut, e)),
    }
}

/// 256 random bits (two v4 UUIDs' random bytes), base64url without padding.
fn fresh_nonce() -> String {
    let bytes: Vec<u8> = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
        .iter()
        .flat_map(|u| u.as_bytes().to_vec())
        .collect();
    BASE64URL_NOPAD.encode(&bytes)
}

/// The value of header `name`, surrounding whitespace removed; empty when absent.
fn value(headers: Option<&HeaderMap>, name: &str) -> String {
    headers
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().trim().to_string())
        .unwrap_or_default()
}

/// The nonce of a signed request (its `Mesh-Nonce`), once [`verify`] accepted it: what a
/// receiver remembers to refuse the same request sent again.
pub fn nonce(headers: Option<&HeaderMap>) -> Option<String> {
    Some(value(headers, NONCE)).filter(|n| !n.is_empty())
}

/// Whether `headers` carry any signature header (a request that tries to be signed, and
/// must then verify).
pub fn is_signed(headers: Option<&HeaderMap>) -> bool {
    headers.is_some_and(|h| {
        [SIGNER, SIGNED_AT, SIGNATURE, NONCE]
            .iter()
            .any(|n| h.get(*n).is_some())
    })
}

/// Whether `text` is an NKey user public key (`U…`, checksum included).
pub fn is_user_public_key(text: &str) -> bool {
    text.starts_with('U')
        && KeyPair::from_public_key(text).is_ok_and(|k| k.key_pair_type() == KeyPairType::User)
}

/// Checks the signature of a request with `payload` on `subject`, answered on `reply` (its
/// NATS reply subject, if any), at `now`: its headers are all there and well formed, the
/// signature verifies with the key named over what the module doc lists, it was made
/// within [`MAX_SKEW`] of `now`, and the key is `allowed`. Returns the signer's public
/// key. Whether the nonce was seen before is the receiver's to check ([`nonce`]).
pub fn verify(
    headers: Option<&HeaderMap>,
    subject: &str,
    reply: Option<&str>,
    payload: &[u8],
    now: SystemTime,
    allowed: Allowed<'_>,
) -> Result<String, SignatureError> {
    verify_signed(headers, now, allowed, |at| {
        let nonce = header(headers, NONCE).map_err(|_| SignatureError::Version1)?;
        let raw = BASE64URL_NOPAD
            .decode(nonce.as_bytes())
            .map_err(|e| bad(NONCE, format!("not base64url without padding ({e})")))?;
        if !(MIN_NONCE_BYTES..=MAX_NONCE_BYTES).contains(&raw.len()) {
            let n = raw.len();
            return Err(bad(
                NONCE,
                format!(
                    "{n} bytes: a nonce is {MIN_NONCE_BYTES} to {MAX_NONCE_BYTES} random bytes"
                ),
            ));
        }
        Ok(signed_bytes(&Signed {
            subject,
            reply: reply.unwrap_or_default().trim(),
            reply_to: &value(headers, REPLY_TO),
            status_to: &value(headers, STATUS_TO),
            caller: &value(headers, CALLER),
            at,
            nonce: &nonce,
            payload,
        }))
    })
}

/// Checks the signature headers in `headers` over the bytes `signed` makes of the signing
/// time (or refuses with its error): all there and well formed, verifying with the key
/// named, made within [`MAX_SKEW`] of `now`, by a key `allowed`. Returns the signer's
/// public key. One check for every scheme (requests here, cards in
/// [`crate::card_trust`]).
pub(crate) fn verify_signed(
    headers: Option<&HeaderMap>,
    now: SystemTime,
    allowed: Allowed<'_>,
    signed: impl FnOnce(u64) -> Result<Vec<u8>, SignatureError>,
) -> Result<String, SignatureError> {
    if !is_signed(headers) {
        return Err(SignatureError::Unsigned);
    }
    let (key, at) = (header(headers, SIGNER)?, header(headers, SIGNED_AT)?);
    let signature = header(headers, SIGNATURE)?;
    let pair = KeyPair::from_public_key(&key)
        .map_err(|e| bad(SIGNER, format!("'{key}' is not an NKey public key ({e})")))?;
    if pair.key_pair_type() != KeyPairType::User {
        return Err(bad(SIGNER, format!("'{key}' is not a user key (U…)")));
    }
    let at: u64 = at.parse().map_err(|_| {
        bad(
            SIGNED_AT,
            format!("'{at}' is not milliseconds since the epoch"),
        )
    })?;
    let signature = BASE64URL_NOPAD
        .decode(signature.as_bytes())
        .map_err(|e| bad(SIGNATURE, format!("not base64url without padding ({e})")))?;
    if signature.len() != 64 {
        let n = signature.len();
        return Err(bad(
            SIGNATURE,
            format!("{n} bytes, not the 64 of an Ed25519 signature"),
        ));
    }
    pair.verify(&signed(at)?, &signature)
        .map_err(|_| SignatureError::BadSignature { key: key.clone() })?;
    let now = millis(now);
    let skew = MAX_SKEW.as_millis() as u64;
    if now > at && now - at > skew {
        return Err(SignatureError::Stale {
            age: Duration::from_millis(now - at),
        });
    }
    if at > now && at - now > skew {
        return Err(SignatureError::Future {
            ahead: Duration::from_millis(at - now),
        });
    }
    match allowed {
        Allowed::Only(keys) if !keys.contains(&key) => Err(SignatureError::UnknownKey { key }),
        _ => Ok(key),
    }
}

/// The value of header `name`, trimmed; missing or empty is [`SignatureError::MissingHeader`].
fn header(headers: Option<&HeaderMap>, name: &'static str) -> Result<String, SignatureError> {
    headers
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().trim().to_string())
        .filter(|v| !v.is_empty())
        .ok_or(SignatureError::MissingHeader { header: name })
}

fn bad(header: &'static str, reason: String) -> SignatureError {
    SignatureError::BadEncoding { header, reason }
}

/// What a signature binds: see the module doc.
struct Signed<'a> {
    subject: &'a str,
    reply: &'a str,
    reply_to: &'a str,
    status_to: &'a str,
    caller: &'a str,
    at: u64,
    nonce: &'a str,
    payload: &'a [u8],
}

/// The bytes signed: see the module doc.
fn signed_bytes(s: &Signed<'_>) -> Vec<u8> {
    let digest = hex::encode(Sha256::digest(s.payload));
    let lines = [
        SIGNATURE_SCHEME,
        s.subject,
        s.reply,
        s.reply_to,
        s.status_to,
        s.caller,
        &s.at.to_string(),
        s.nonce,
        &digest,
    ];
    lines.join("\n").into_bytes()
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
