//! Unit tests of `signing`: what verifies and what each refusal is named, the bytes
//! signed, the skew allowed, and seeds loaded from text and files.

use super::*;

const SUBJECT: &str = "mesh.a2a.v1.agent.request.Gate";
const BODY: &[u8] = br#"{"decision":"approve"}"#;
const REPLY: Option<&str> = Some("_INBOX.ops.1");

fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn only(s: &Signer) -> Vec<String> {
    vec![s.public_key().to_string()]
}

fn check(h: &HeaderMap, allowed: &[String]) -> Result<String, SignatureError> {
    verify(Some(h), SUBJECT, REPLY, BODY, t(10), Allowed::Only(allowed))
}

#[test]
fn a_signed_request_verifies_and_names_its_signer() {
    let s = Signer::generate();
    let h = s.sign(SUBJECT, REPLY, BODY, t(0));
    assert_eq!(check(&h, &only(&s)), Ok(s.public_key().to_string()));
    let any = verify(Some(&h), SUBJECT, REPLY, BODY, t(0), Allowed::AnyUser);
    assert_eq!(any, Ok(s.public_key().to_string()));
    assert!(is_user_public_key(s.public_key()));
    assert!(s.seed().starts_with("SU"));
    assert!(
        !format!("{s:?}").contains(&s.seed()),
        "the seed stays out of Debug"
    );
}

#[test]
fn no_headers_is_unsigned() {
    let s = Signer::generate();
    assert_eq!(
        check(&HeaderMap::new(), &only(&s)),
        Err(SignatureError::Unsigned)
    );
    let none = verify(None, SUBJECT, REPLY, BODY, t(0), Allowed::AnyUser);
    assert_eq!(none, Err(SignatureError::Unsigned));
}

#[test]
fn each_missing_header_is_named() {
    let s = Signer::generate();
    for name in [SIGNER, SIGNED_AT, SIGNATURE] {
        let full = s.sign(SUBJECT, REPLY, BODY, t(0));
        let mut h = HeaderMap::new();
        for n in [SIGNER, SIGNED_AT, SIGNATURE, NONCE]
            .into_iter()
            .filter(|n| *n != name)
        {
            h.insert(n, full.get(n).expect("signed").clone());
        }
        assert_eq!(
            check(&h, &only(&s)),
            Err(SignatureError::MissingHeader { header: name })
        );
    }
}

#[test]
fn malformed_headers_are_bad_encodings() {
    let s = Signer::generate();
    let account = KeyPair::new_account().public_key();
    let cases = [
        (SIGNER, "alice".to_string()),
        (SIGNER, account),
        (SIGNED_AT, "yesterday".to_string()),
        (SIGNATURE, "not base64!".to_string()),
        (SIGNATURE, BASE64URL_NOPAD.encode(b"short")),
        (NONCE, "not base64!".to_string()),
        (NONCE, BASE64URL_NOPAD.encode(b"15 bytes only!!")),
    ];
    for (name, value) in cases {
        let mut h = s.sign(SUBJECT, REPLY, BODY, t(0));
        h.insert(name, value.as_str());
        match check(&h, &only(&s)) {
            Err(SignatureError::BadEncoding { header, reason }) => {
                assert_eq!(header, name, "{reason}")
            }
            other => panic!("{name}={value}: {other:?}"),
        }
    }
}

#[test]
fn a_valid_signature_by_another_key_is_unknown() {
    let (s, other) = (Signer::generate(), Signer::generate());
    let h = s.sign(SUBJECT, REPLY, BODY, t(0));
    assert_eq!(
        check(&h, &only(&other)),
        Err(SignatureError::UnknownKey {
            key: s.public_key().to_string()
        })
    );
}

#[test]
fn a_changed_payload_subject_time_or_claimed_key_is_a_bad_signature() {
    let (s, other) = (Signer::generate(), Signer::generate());
    let h = s.sign(SUBJECT, REPLY, BODY, t(0));
    let bad = |key: &Signer| {
        Err(SignatureError::BadSignature {
            key: key.public_key().to_string(),
        })
    };
    let allowed = vec![s.public_key().to_string(), other.public_key().to_string()];
    let v = |subject: &str, body: &[u8], h: &HeaderMap| {
        verify(
            Some(h),
            subject,
            REPLY,
            body,
            t(10),
            Allowed::Only(&allowed),
        )
    };
    assert_eq!(v(SUBJECT, br#"{"decision":"reject"}"#, &h), bad(&s));
    assert_eq!(v("mesh.a2a.v1.agent.request.Other", BODY, &h), bad(&s));
    let mut moved = h.clone();
    moved.insert(SIGNED_AT, millis(t(5)).to_string().as_str());
    assert_eq!(v(SUBJECT, BODY, &moved), bad(&s));
    // Claiming another key with this key's signature.
    let mut claimed = h.clone();
    claimed.insert(SIGNER, other.public_key());
    assert_eq!(v(SUBJECT, BODY, &claimed), bad(&other));
}

#[test]
fn the_reply_status_and_caller_headers_are_bound_and_each_signature_has_its_own_nonce() {
    let s = Signer::generate();
    let mut h = HeaderMap::new();
    h.insert(REPLY_TO, "_INBOX.ops.r");
    h.insert(STATUS_TO, "_INBOX.ops.s");
    h.insert(CALLER, "ops");
    s.sign_into(&mut h, SUBJECT, REPLY, BODY, t(0));
    let v = |h: &HeaderMap, reply| verify(Some(h), SUBJECT, reply, BODY, t(1), Allowed::AnyUser);
    assert_eq!(v(&h, REPLY), Ok(s.public_key().to_string()));
    let bad = Err(SignatureError::BadSignature {
        key: s.public_key().to_string(),
    });
    assert_eq!(v(&h, Some("_INBOX.thief.1")), bad);
    assert_eq!(v(&h, None), bad);
    for (name, other) in [
        (REPLY_TO, "_INBOX.thief.r"),
        (STATUS_TO, "_INBOX.thief.s"),
        (CALLER, "thief"),
        (NONCE, "AAAAAAAAAAAAAAAAAAAAAA"),
    ] {
        let mut changed = h.clone();
        changed.insert(name, other);
        assert_eq!(v(&changed, REPLY), bad, "{name}");
    }
    let again = s.sign(SUBJECT, REPLY, BODY, t(0));
    assert_ne!(nonce(Some(&again)), nonce(Some(&h)));
    let raw = BASE64URL_NOPAD
        .decode(nonce(Some(&h)).unwrap().as_bytes())
        .unwrap();
    assert!(raw.len() >= MIN_NONCE_BYTES);
}

#[test]
fn a_first_scheme_signature_is_refused_as_such() {
    let s = Signer::generate();
    let digest = hex::encode(Sha256::digest(BODY));
    let at = millis(t(0));
    let v1 = format!("mesh-sig-v1\n{SUBJECT}\n{at}\n{digest}");
    let signature = s.pair.sign(v1.as_bytes()).unwrap();
    let mut h = HeaderMap::new();
    h.insert(SIGNER, s.public_key());
    h.insert(SIGNED_AT, at.to_string().as_str());
    h.insert(SIGNATURE, BASE64URL_NOPAD.encode(&signature).as_str());
    let e = verify(Some(&h), SUBJECT, REPLY, BODY, t(1), Allowed::AnyUser);
    assert_eq!(e, Err(SignatureError::Version1));
    assert!(e.unwrap_err().to_string().contains("mesh-sig-v1"));
}

#[test]
fn the_signed_bytes_are_the_documented_lines() {
    let bytes = signed_bytes(&Signed {
        subject: "mesh.a2a.v1.agent.request.W",
        reply: "_INBOX.a.1",
        reply_to: "",
        status_to: "_INBOX.a.2",
        caller: "cli",
        at: 1700000000000,
        nonce: "n0nce",
        payload: b"{}",
    });
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        "mesh-sig-v2\nmesh.a2a.v1.agent.request.W\n_INBOX.a.1\n\n_INBOX.a.2\ncli\n\
         1700000000000\nn0nce\n\
         44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    );
}

#[test]
fn old_and_future_signatures_are_refused_within_the_skew_they_pass() {
    let s = Signer::generate();
    let at = |secs| s.sign(SUBJECT, REPLY, BODY, t(secs));
    let now = |h: &HeaderMap, secs| {
        verify(
            Some(h),
            SUBJECT,
            REPLY,
            BODY,
            t(secs),
            Allowed::Only(&only(&s)),
        )
    };
    assert!(now(&at(0), 300).is_ok(), "exactly the skew passes");
    assert_eq!(
        now(&at(0), 301),
        Err(SignatureError::Stale {
            age: Duration::from_secs(301)
        })
    );
    assert!(now(&at(600), 300).is_ok());
    assert_eq!(
        now(&at(602), 300),
        Err(SignatureError::Future {
            ahead: Duration::from_secs(302)
        })
    );
    let text = now(&at(0), 1000).unwrap_err().to_string();
    assert!(
        text.contains("1000 s old") && text.contains("sign the request again"),
        "{text}"
    );
}

#[test]
fn seeds_load_from_text_and_files_and_bad_ones_say_why() {
    let s = Signer::generate();
    let again = Signer::from_seed(&format!("  {}\n", s.seed())).unwrap();
    assert_eq!(again.public_key(), s.public_key());
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("user.creds");
    let text = format!(
        "-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        s.seed()
    );
    std::fs::write(&creds, text).unwrap();
    assert_eq!(
        Signer::from_seed_file(&creds).unwrap().public_key(),
        s.public_key()
    );
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "nothing here\n").unwrap();
    assert!(matches!(
        Signer::from_seed_file(&empty),
        Err(SeedError::NoSeed { .. })
    ));
    let missing = Signer::from_seed_file(dir.path().join("absent"));
    assert!(matches!(missing, Err(SeedError::Read { .. })));
    assert!(matches!(
        Signer::from_seed("SUNOTASEED"),
        Err(SeedError::Invalid(_))
    ));
    let account = KeyPair::new_account().seed().unwrap();
    let e = Signer::from_seed(&account).unwrap_err();
    assert!(matches!(e, SeedError::NotUser { .. }), "{e}");
    assert!(e.to_string().contains("account"), "{e}");
    assert!(!is_user_public_key("alice"));
    assert!(!is_user_public_key(&KeyPair::new_account().public_key()));
}
