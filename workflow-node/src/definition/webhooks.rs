//! A trigger of kind `webhook`: runs started by HTTP deliveries to `POST /hooks/{name}`,
//! signed with a shared secret the way GitHub or Stripe sign theirs. What the file says
//! (the scheme, where the secret is read from, the Stripe tolerance) is read here, and
//! so is what makes a delivery authentic ([`Webhook::verify`]): a pure function of the
//! secret, the headers, the raw body and the time, so that it is tested without a server.
//!
//! The secret is never written in the file (a leaked definition, a `plan`, a card, a log
//! must not carry it): it comes from an environment variable or a file, read when the
//! node starts. Signatures are compared in constant time (`Mac::verify_slice`), over the
//! raw body: a body re-serialised from its JSON would not match.

use std::path::PathBuf;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::fields::Fields;
use super::problem::Sink;

/// How far a Stripe signature's timestamp may be from the servers' clock, by default
/// (what Stripe's own libraries accept).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// The most signatures one `Stripe-Signature` header is read for (several during a
/// secret's rotation).
const MAX_SIGNATURES: usize = 8;

/// How a delivery is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.
    Github,
    /// `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "{t}.{raw body}">`
    /// (several `v1` allowed), `t` within the tolerance of the servers' clock.
    Stripe,
}

impl Scheme {
    /// Its name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Github => "github",
            Scheme::Stripe => "stripe",
        }
    }

    /// The header the signature travels in (lower case, as HTTP/2 writes it).
    pub fn header(self) -> &'static str {
        match self {
            Scheme::Github => "x-hub-signature-256",
            Scheme::Stripe => "stripe-signature",
        }
    }
}

/// Where a webhook's secret is read from when the node starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `secret_env`: an environment variable.
    Env(String),
    /// `secret_file`: a file (its content, without a final newline).
    File(PathBuf),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Env(name) => write!(f, "environment variable {name}"),
            SecretSource::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

/// The webhook part of a trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// `webhook`: the signature scheme.
    pub scheme: Scheme,
    /// `secret_env` or `secret_file`.
    pub secret: SecretSource,
    /// `tolerance` (Stripe only; default [`DEFAULT_TOLERANCE`]).
    pub tolerance: Duration,
}

/// A webhook's secret, loaded. Its `Debug` writes no byte of it.
#[derive(Clone)]
pub struct HookSecret(Vec<u8>);

impl HookSecret {
    /// Reads the secret from `source`: an unset variable, an unreadable or empty file is
    /// an error naming the source, never the value.
    pub fn load(source: &SecretSource) -> Result<HookSecret, String> {
        let text = match source {
            SecretSource::Env(name) => std::env::var(name)
                .map_err(|_| format!("the {source} is not set (or not UTF-8)"))?,
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("the {source} cannot be read: {}", e.kind()))?,
        };
        let secret = text.trim_end_matches(['\n', '\r']);
        if secret.is_empty() {
            return Err(format!("the {source} is empty"));
        }
        Ok(HookSecret(secret.as_bytes().to_vec()))
    }

    /// A secret of these bytes (for tests and tools).
    pub fn from_bytes(bytes: &[u8]) -> HookSecret {
        HookSecret(bytes.to_vec())
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }
}

impl std::fmt::Debug for HookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSecret(..)")
    }
}

/// Why a delivery is not authentic (answered 401; none of them says anything of the
/// secret or of the expected signature).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// The signature header is absent.
    #[error("the {0} header is missing")]
    Missing(&'static str),
    /// The header is not of the scheme's form.
    #[error("the {0} header is not of the form {1}")]
    Malformed(&'static str, &'static str),
    /// The Stripe timestamp is outside the tolerance.
    #[error("the signature's timestamp is {0} s away from the server's clock (tolerance {1} s)")]
    Stale(u64, u64),
    /// No signature matches.
    #[error("the signature does not match")]
    Mismatch,
}

impl Webhook {
    /// Whether `body` with the signature header value `signature` (absent: `None`) was
    /// signed with `secret`, at `now_s` (Unix seconds, the servers' clock).
    pub fn verify(
        &self,
        secret: &HookSecret,
        signature: Option<&str>,
        body: &[u8],
        now_s: u64,
    ) -> Result<(), Unverified> {
        let header = self.scheme.header();
        let signature = signature.ok_or(Unverified::Missing(header))?;
        match self.scheme {
            Scheme::Github => {
                let form = "sha256=<64 hex digits>";
                let hex = signature
                    .strip_prefix("sha256=")
                    .ok_or(Unverified::Malformed(header, form))?;
                let given = hex::decode(hex).map_err(|_| Unverified::Malformed(header, form))?;
                let mut mac = secret.mac();
                mac.update(body);
                mac.verify_slice(&given).map_err(|_| Unverified::Mismatch)
            }
            Scheme::Stripe => self.verify_stripe(secret, signature, body, now_s),
        }
    }

    fn verify_stripe(
        &self,
        secret: &HookSecret,
        signature: &str,
        body: &[u8],
        now_s: u64,
    ) -> Result<(), Unverified> {
        let header = self.scheme.header();
        let malformed = Unverified::Malformed(header, "t=<unix seconds>,v1=<64 hex digits>");
        let mut t = None;
        let mut signatures = Vec::new();
        for part in signature.split(',').take(64) {
            match part.trim().split_once('=') {
                Some(("t", v)) => t = Some(v.parse::<u64>().map_err(|_| malformed.clone())?),
                Some(("v1", v)) if signatures.len() < MAX_SIGNATURES => {
                    signatures.push(hex::decode(v).map_err(|_| malformed.clone())?)
                }
                // Other schemes (`v0`) and further signatures are not read.
                _ => {}
            }
        }
        let t = t.ok_or(malformed.clone())?;
        if signatures.is_empty() {
            return Err(malformed);
        }
        let away = now_s.abs_diff(t);
        if away > self.tolerance.as_secs() {
            return Err(Unverified::Stale(away, self.tolerance.as_secs()));
        }
        let mut mac = secret.mac();
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        // Each comparison is in constant time; which of them matched is not told.
        let matched = signatures
            .iter()
            .fold(false, |any, s| mac.clone().verify_slice(s).is_ok() | any);
        if matched {
            Ok(())
        } else {
            Err(Unverified::Mismatch)
        }
    }
}

/// Reads the webhook fields of a trigger (`webhook`, `secret_env`, `secret_file`,
/// `tolerance`, and an inline `secret`, which is refused): whether it is a webhook (it
/// names a scheme), and the webhook unless a field is wrong (then the problems are in
/// `sink`).
pub(super) fn parse_webhook(f: &mut Fields<'_>, sink: &mut Sink) -> (bool, Option<Webhook>) {
    let scheme = f.string(sink, "webhook", &[]);
    let env = f.string(sink, "secret_env", &[]);
    let file = f.string(sink, "secret_file", &[]);
    let tolerance = f.duration(sink, "tolerance", true);
    if f.string(sink, "secret", &[]).is_some() {
        f.problem(
            sink,
            "secret",
            "a webhook's secret is never written in the file: give secret_env or secret_file",
        );
    }
    let Some(scheme) = scheme else {
        for (given, field) in [
            (env.is_some(), "secret_env"),
            (file.is_some(), "secret_file"),
        ] {
            if given {
                f.problem(sink, field, "only a webhook trigger has a secret (add 'webhook: github' or 'webhook: stripe')");
            }
        }
        if tolerance.is_some() {
            f.problem(sink, "tolerance", "only a stripe webhook has a tolerance");
        }
        return (false, None);
    };
    let scheme = match scheme.as_str() {
        "github" => Some(Scheme::Github),
        "stripe" => Some(Scheme::Stripe),
        other => {
            let message = format!("'{other}' is not a signature scheme: github or stripe");
            f.problem(sink, "webhook", message);
            None
        }
    };
    if tolerance.is_some() && scheme == Some(Scheme::Github) {
        f.problem(
            sink,
            "tolerance",
            "a github signature has no timestamp: only a stripe webhook has a tolerance",
        );
    }
    let secret = match (env, file) {
        (Some(name), None) if valid_env_name(&name) => Some(SecretSource::Env(name)),
        (Some(name), None) => {
            let message = format!("'{name}' is not an environment variable's name");
            f.problem(sink, "secret_env", message);
            None
        }
        (None, Some(path)) if !path.is_empty() => Some(SecretSource::File(path.into())),
        (Some(_), Some(_)) => {
            f.problem(
                sink,
                "secret_env",
                "give secret_env or secret_file, not both",
            );
            None
        }
        _ => {
            let message = "missing field: a webhook needs secret_env or secret_file";
            f.problem(sink, "secret_env", message);
            None
        }
    };
    let webhook = scheme.zip(secret).map(|(scheme, secret)| Webhook {
        scheme,
        secret,
        tolerance: tolerance.unwrap_or(DEFAULT_TOLERANCE),
    });
    (true, webhook)
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(scheme: Scheme) -> Webhook {
        Webhook {
            scheme,
            secret: SecretSource::Env("S".into()),
            tolerance: DEFAULT_TOLERANCE,
        }
    }

    fn hmac_hex(key: &[u8], data: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(data);
        hex::encode(mac.finalize().into_bytes())
    }

    #[test]
    fn a_github_signature_is_checked_over_the_raw_body() {
        let secret = HookSecret::from_bytes(b"It's a Secret to Everybody");
        // The example of GitHub's documentation ("Validating webhook deliveries").
        let body = b"Hello, World!";
        let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let h = hook(Scheme::Github);
        assert_eq!(h.verify(&secret, Some(good), body, 0), Ok(()));
        assert_eq!(
            h.verify(&secret, Some(good), b"Hello, World?", 0),
            Err(Unverified::Mismatch)
        );
        assert_eq!(
            h.verify(&secret, None, body, 0),
            Err(Unverified::Missing("x-hub-signature-256"))
        );
        for bad in ["757107ea", "sha256=zz", "sha1=757107ea"] {
            assert!(matches!(
                h.verify(&secret, Some(bad), body, 0),
                Err(Unverified::Malformed(..))
            ));
        }
        let other = HookSecret::from_bytes(b"another");
        assert_eq!(
            h.verify(&other, Some(good), body, 0),
            Err(Unverified::Mismatch)
        );
    }

    #[test]
    fn a_stripe_signature_is_checked_with_its_timestamp() {
        let secret = HookSecret::from_bytes(b"whsec_test");
        let body = br#"{"id": "evt_1"}"#;
        let t = 1_700_000_000u64;
        let sig = hmac_hex(
            b"whsec_test",
            format!("{t}.{}", "{\"id\": \"evt_1\"}").as_bytes(),
        );
        let h = hook(Scheme::Stripe);
        let header = format!("t={t},v1={sig}");
        assert_eq!(h.verify(&secret, Some(&header), body, t + 10), Ok(()));
        // During a rotation, one of several signatures matches.
        let rotated = format!("t={t},v1={},v1={sig},v0=ab", "00".repeat(32));
        assert_eq!(h.verify(&secret, Some(&rotated), body, t), Ok(()));
        assert_eq!(
            h.verify(&secret, Some(&header), body, t + 301),
            Err(Unverified::Stale(301, 300))
        );
        assert_eq!(
            h.verify(&secret, Some(&header), body, t - 301),
            Err(Unverified::Stale(301, 300))
        );
        // The timestamp is signed: another one with the same signature does not match.
        let moved = format!("t={},v1={sig}", t + 1);
        assert_eq!(
            h.verify(&secret, Some(&moved), body, t),
            Err(Unverified::Mismatch)
        );
        for bad in [format!("v1={sig}"), format!("t={t}"), "t=x,v1=00".into()] {
            assert!(matches!(
                h.verify(&secret, Some(&bad), body, t),
                Err(Unverified::Malformed(..))
            ));
        }
    }

    #[test]
    fn a_secret_is_never_printed() {
        let secret = HookSecret::from_bytes(b"hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
        let e =
            HookSecret::load(&SecretSource::Env("WF_TEST_UNSET_HOOK_SECRET".into())).unwrap_err();
        assert!(e.contains("WF_TEST_UNSET_HOOK_SECRET"), "{e}");
    }
}
