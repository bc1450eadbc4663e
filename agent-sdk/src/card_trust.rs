//! Cards bound to keys: who may publish the card of a name, decided the same way by every
//! reader of cards (a workflow node's registry, a caller's [`crate::Catalog`], the CLI and
//! the web view, all through [`crate::CardCache`]).
//!
//! Anyone allowed to publish cards can publish one under any name, so a card counts only
//! when signed by the key bound to its name. An agent signs each copy of its card with
//! its NKey ([`sign_card`]): headers `Mesh-Signer`, `Mesh-Signed-At` and
//! `Mesh-Signature` (as a signed request's) over
//! `mesh-card-v1\n{name}\n{signed_at}\n{hex sha256 of the card's bytes}`, the bytes being
//! exactly the message's payload. Its own scheme line keeps a request's signature from
//! ever verifying as a card's, and the time keeps a captured old card of the agent from
//! being replayed for longer than [`crate::signing::MAX_SKEW`].
//!
//! A reader binds names to keys: explicitly ([`CardTrust::agent_keys`], `--agent-key
//! NAME=U…`), or, for a name without a binding, to the first key that signed a valid card
//! of it in this process (trust on first use). A card signed by another key, a card whose
//! signature does not verify, and an unsigned card of a name that has a key are ignored;
//! an unsigned card of a name without one is taken only while
//! [`CardTrust::require_signed_cards`] is off (the demo), never once it is on. An ignored
//! card never replaces the bound one; it is counted, and warned once per name and key.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::time::SystemTime;

use async_nats::HeaderMap;
use sha2::{Digest, Sha256};

use crate::signing::{self, Allowed, SignatureError, Signer};

/// The first line of what a card's signature covers.
pub const CARD_SIGNATURE_SCHEME: &str = "mesh-card-v1";

/// At most this many names are bound on first use in one process; a valid card of a
/// further unbound name is ignored (a flood of names signed by throwaway keys must not
/// grow a reader without bound). Explicit bindings are not counted.
pub const MAX_FIRST_USE_BINDINGS: usize = 4096;

/// At most this many (name, key) pairs are remembered as warned about; beyond it, ignored
/// cards are still counted but logged at debug level only.
const MAX_WARNED: usize = 4096;

/// The signature headers of a card named `name` whose message payload is `card`, signed
/// by `signer` at `now`.
pub fn sign_card(signer: &Signer, name: &str, card: &[u8], now: SystemTime) -> HeaderMap {
    signer.sign_headers(now, |at| card_signed_bytes(name, at, card))
}

/// The key that signed the card named `name` with payload `card`, checked at `now`:
/// `Ok(None)` when the message carries no signature header, an error when it carries any
/// and they do not verify (altered, incomplete, stale, or from the future).
pub fn verify_card(
    headers: Option<&HeaderMap>,
    name: &str,
    card: &[u8],
    now: SystemTime,
) -> Result<Option<String>, SignatureError> {
    if !signing::is_signed(headers) {
        return Ok(None);
    }
    signing::verify_signed(headers, now, Allowed::AnyUser, |at| {
        Ok(card_signed_bytes(name, at, card))
    })
    .map(Some)
}

/// What a card's signature covers: see the module doc.
fn card_signed_bytes(name: &str, at: u64, card: &[u8]) -> Vec<u8> {
    let digest = hex::encode(Sha256::digest(card));
    format!("{CARD_SIGNATURE_SCHEME}\n{name}\n{at}\n{digest}").into_bytes()
}

/// An agent (or workflow) name bound to the NKey user public key that signs its cards:
/// `NAME=U…` on a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentKey {
    /// The agent's name, as its card gives it.
    pub name: String,
    /// The user public key (`U…`).
    pub key: String,
}

impl FromStr for AgentKey {
    type Err = String;

    fn from_str(text: &str) -> Result<AgentKey, String> {
        let (name, key) = text
            .split_once('=')
            .ok_or_else(|| format!("'{text}' is not NAME=UKEY"))?;
        let (name, key) = (name.trim(), key.trim());
        if name.is_empty() {
            return Err(format!("'{text}' names no agent"));
        }
        if !signing::is_user_public_key(key) {
            return Err(format!("'{key}' is not an NKey user public key (U…)"));
        }
        Ok(AgentKey {
            name: name.to_owned(),
            key: key.to_owned(),
        })
    }
}

/// Which keys a reader of cards trusts for which names (see the module doc). One config
/// for the node (`serve`), the CLI and the SDK; with feature `clap`, flags and variables.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct CardTrust {
    /// Binds an agent or workflow name to the NKey user public key that must sign its
    /// cards; a card of the name signed otherwise, or unsigned, is ignored (repeatable).
    /// A name without a binding is bound to the first key seen signing its card.
    #[cfg_attr(
        feature = "clap",
        arg(
            long = "agent-key",
            value_name = "NAME=UKEY",
            env = "MESH_AGENT_KEYS",
            value_delimiter = ',',
            help_heading = "Agent cards"
        )
    )]
    pub agent_keys: Vec<AgentKey>,
    /// Ignores every unsigned card (on in a secured mesh; off, an unsigned card counts
    /// for a name no key is bound to).
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "MESH_REQUIRE_SIGNED_CARDS", help_heading = "Agent cards")
    )]
    pub require_signed_cards: bool,
}

/// Why a card was ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardIgnored {
    /// It carries signature headers that do not verify.
    #[error("the card of {name} is ignored: {source}")]
    BadSignature {
        /// The name the card gives.
        name: String,
        /// Why the signature is refused.
        #[source]
        source: SignatureError,
    },
    /// Unsigned, while signed cards are required.
    #[error("the card of {name} is ignored: it is unsigned, and signed cards are required")]
    Unsigned {
        /// The name the card gives.
        name: String,
    },
    /// Unsigned, or signed by another key, while the name is bound to a key.
    #[error("the card of {name} is ignored: {}, and {name} is bound to key {bound} ({how})",
            .key.as_deref().map_or("it is unsigned".to_owned(), |k| format!("it is signed by key {k}")))]
    NotTheBoundKey {
        /// The name the card gives.
        name: String,
        /// The key that signed it (`None`: unsigned).
        key: Option<String>,
        /// The key the name is bound to.
        bound: String,
        /// How the binding came about: `--agent-key`, or the first card seen.
        how: &'static str,
    },
    /// Signed by a key no name is bound to, while no more names may be bound on first use.
    #[error("the card of {name} is ignored: it would be bound to key {key}, and {} names are bound on first use already", MAX_FIRST_USE_BINDINGS)]
    TooManyNames {
        /// The name the card gives.
        name: String,
        /// The key that signed it.
        key: String,
    },
}

/// The decisions of one reader: its [`CardTrust`], the names bound on first use, the
/// ignored cards warned about, and how many were ignored. Pure: the caller passes what the
/// signature check found.
#[derive(Debug, Default)]
pub(crate) struct Binder {
    explicit: BTreeMap<String, String>,
    require_signed: bool,
    first_seen: HashMap<String, String>,
    warned: HashSet<(String, Option<String>)>,
    ignored: u64,
}

impl Binder {
    pub(crate) fn new(trust: &CardTrust) -> Binder {
        Binder {
            explicit: trust
                .agent_keys
                .iter()
                .map(|b| (b.name.clone(), b.key.clone()))
                .collect(),
            require_signed: trust.require_signed_cards,
            ..Binder::default()
        }
    }

    /// Whether a card named `name`, whose signature check gave `signer`, counts; the key
    /// it is then bound to (`None`: unsigned and accepted). An ignored card is counted,
    /// and logged (a warning the first time for its name and key).
    pub(crate) fn judge(
        &mut self,
        name: &str,
        signer: Result<Option<String>, SignatureError>,
    ) -> Result<Option<String>, CardIgnored> {
        let verdict = self.decide(name, signer.clone());
        if let Err(ignored) = &verdict {
            self.ignored += 1;
            let key = signer.ok().flatten();
            let pair = (name.to_owned(), key);
            if self.warned.contains(&pair) || self.warned.len() >= MAX_WARNED {
                tracing::debug!("{ignored}");
            } else {
                tracing::warn!("{ignored} (warned once per name and key)");
                self.warned.insert(pair);
            }
        }
        verdict
    }

    fn decide(
        &mut self,
        name: &str,
        signer: Result<Option<String>, SignatureError>,
    ) -> Result<Option<String>, CardIgnored> {
        let signer = signer.map_err(|source| CardIgnored::BadSignature {
            name: name.to_owned(),
            source,
        })?;
        let bound = match self.explicit.get(name) {
            Some(key) => Some((key, "--agent-key")),
            None => self
                .first_seen
                .get(name)
                .map(|k| (k, "the first card seen")),
        };
        match (signer, bound) {
            (Some(key), Some((bound, _))) if &key == bound => Ok(Some(key)),
            (key, Some((bound, how))) => Err(CardIgnored::NotTheBoundKey {
                name: name.to_owned(),
                key,
                bound: bound.clone(),
                how,
            }),
            (Some(key), None) if self.first_seen.len() >= MAX_FIRST_USE_BINDINGS => {
                Err(CardIgnored::TooManyNames {
                    name: name.to_owned(),
                    key,
                })
            }
            (Some(key), None) => {
                tracing::info!("agent {name} is bound to key {key}: the first card seen");
                self.first_seen.insert(name.to_owned(), key.clone());
                Ok(Some(key))
            }
            (None, None) if self.require_signed => Err(CardIgnored::Unsigned {
                name: name.to_owned(),
            }),
            (None, None) => Ok(None),
        }
    }

    /// How many cards were ignored.
    pub(crate) fn ignored(&self) -> u64 {
        self.ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const CARD: &[u8] = br#"{"name":"Doubler"}"#;

    fn trust(bindings: &[(&str, &Signer)], require: bool) -> Binder {
        Binder::new(&CardTrust {
            agent_keys: bindings
                .iter()
                .map(|(n, s)| AgentKey {
                    name: (*n).to_owned(),
                    key: s.public_key().to_owned(),
                })
                .collect(),
            require_signed_cards: require,
        })
    }

    fn signed(s: &Signer) -> Result<Option<String>, SignatureError> {
        Ok(Some(s.public_key().to_owned()))
    }

    #[test]
    fn a_signed_card_verifies_and_an_altered_or_renamed_one_does_not() {
        let s = Signer::generate();
        let now = SystemTime::now();
        let h = sign_card(&s, "Doubler", CARD, now);
        let key = s.public_key().to_owned();
        assert_eq!(verify_card(Some(&h), "Doubler", CARD, now), Ok(Some(key)));
        assert_eq!(verify_card(None, "Doubler", CARD, now), Ok(None));
        let bad = Err(SignatureError::BadSignature {
            key: s.public_key().to_owned(),
        });
        assert_eq!(verify_card(Some(&h), "Echo", CARD, now), bad);
        assert_eq!(verify_card(Some(&h), "Doubler", b"{}", now), bad);
        let later = now + Duration::from_secs(3600);
        assert!(matches!(
            verify_card(Some(&h), "Doubler", CARD, later),
            Err(SignatureError::Stale { .. })
        ));
    }

    #[test]
    fn a_request_signature_never_verifies_as_a_card_signature() {
        let s = Signer::generate();
        let now = SystemTime::now();
        let h = s.sign("Doubler", None, CARD, now);
        assert!(matches!(
            verify_card(Some(&h), "Doubler", CARD, now),
            Err(SignatureError::BadSignature { .. })
        ));
    }

    #[test]
    fn an_explicit_binding_takes_only_its_key() {
        let (real, other) = (Signer::generate(), Signer::generate());
        let mut b = trust(&[("Doubler", &real)], false);
        assert_eq!(
            b.judge("Doubler", signed(&real)),
            Ok(Some(real.public_key().to_owned()))
        );
        let e = b.judge("Doubler", signed(&other)).unwrap_err();
        assert!(e.to_string().contains("--agent-key"), "{e}");
        let e = b.judge("Doubler", Ok(None)).unwrap_err();
        assert!(e.to_string().contains("unsigned"), "{e}");
        assert_eq!(b.ignored(), 2);
    }

    #[test]
    fn the_first_key_seen_binds_a_name_without_a_binding() {
        let (first, second) = (Signer::generate(), Signer::generate());
        let mut b = trust(&[], false);
        assert_eq!(
            b.judge("Echo", signed(&first)),
            Ok(Some(first.public_key().to_owned()))
        );
        assert!(matches!(
            b.judge("Echo", signed(&second)),
            Err(CardIgnored::NotTheBoundKey {
                how: "the first card seen",
                ..
            })
        ));
        assert!(b.judge("Echo", Ok(None)).is_err(), "unsigned once bound");
        assert_eq!(
            b.judge("Echo", signed(&first)),
            Ok(Some(first.public_key().to_owned()))
        );
        // Another name is bound on its own.
        assert_eq!(
            b.judge("Other", signed(&second)),
            Ok(Some(second.public_key().to_owned()))
        );
    }

    #[test]
    fn unsigned_cards_count_only_while_signed_ones_are_not_required() {
        let mut demo = trust(&[], false);
        assert_eq!(demo.judge("Echo", Ok(None)), Ok(None));
        let mut secure = trust(&[], true);
        assert!(matches!(
            secure.judge("Echo", Ok(None)),
            Err(CardIgnored::Unsigned { .. })
        ));
        let bad = Err(SignatureError::Unsigned);
        assert!(matches!(
            demo.judge("Echo", bad),
            Err(CardIgnored::BadSignature { .. })
        ));
    }

    #[test]
    fn names_bound_on_first_use_are_bounded() {
        let s = Signer::generate();
        let mut b = trust(&[], false);
        for i in 0..MAX_FIRST_USE_BINDINGS {
            assert!(b.judge(&format!("a{i}"), signed(&s)).is_ok());
        }
        assert!(matches!(
            b.judge("one-more", signed(&s)),
            Err(CardIgnored::TooManyNames { .. })
        ));
        assert!(b.judge("a0", signed(&s)).is_ok(), "bound names still count");
    }

    #[test]
    fn bindings_parse_from_name_equals_key() {
        let s = Signer::generate();
        let b: AgentKey = format!("Doubler={}", s.public_key()).parse().unwrap();
        assert_eq!(b.name, "Doubler");
        assert!("Doubler".parse::<AgentKey>().is_err());
        assert!("Doubler=alice".parse::<AgentKey>().is_err());
        assert!(format!("={}", s.public_key()).parse::<AgentKey>().is_err());
    }
}
