//! LLM agents on an `https://` endpoint, as every hosted provider is: the scripted
//! provider served over TLS with a certificate of a CA made for the test (by the shipped
//! `deploy/secure/gen-local.sh`), called by an LLM agent through a real nats-server. With
//! that CA as the endpoint's `ca_file` the call is answered; with another CA's file, or
//! with the system's roots, the certificate is refused before any request is sent, and
//! the caller gets a clear, permanent error.

mod common;

use std::path::Path;

use agent_sdk::{serve_stubs, CallError, Mesh, StubFile};
use common::*;
use serde_json::json;
use test_harness::openai::{Provider, Reply};
use test_harness::tls::local_ca;

const KEY: &str = "sk-tls-5e1d9b3c77";

fn agent(name: &str, provider: &Provider, key: &Path, ca: Option<&Path>) -> String {
    let ca = ca
        .map(|c| format!("\n      ca_file: {}", c.display()))
        .unwrap_or_default();
    format!(
        r#"
  - name: {name}
    model:
      base_url: {}
      name: test-model
      api_key_file: {}{ca}
"#,
        provider.base_url(),
        key.display()
    )
}

#[tokio::test]
async fn an_https_endpoint_is_called_with_its_ca_and_refused_with_another() {
    let (_server, client) = setup().await.unwrap();
    let dirs = tempfile::tempdir().unwrap();
    let ours = local_ca(&dirs.path().join("ours"));
    let other = local_ca(&dirs.path().join("other"));
    let provider =
        Provider::start_tls(&ours.join("server-cert.pem"), &ours.join("server-key.pem")).await;
    assert!(provider.base_url().starts_with("https://127.0.0.1:"));
    let key = dirs.path().join("key");
    std::fs::write(&key, KEY).unwrap();
    let yaml = format!(
        "agents:{}{}{}",
        agent("Trusting", &provider, &key, Some(&ours.join("ca.pem"))),
        agent("WrongCa", &provider, &key, Some(&other.join("ca.pem"))),
        agent("SystemRoots", &provider, &key, None),
    );
    let file = StubFile::parse(&yaml, "inline").unwrap_or_else(|e| panic!("{e:#?}"));
    let _agents = serve_stubs(client.clone(), "mesh", file).await.unwrap();
    let mesh = Mesh::new(client.clone());

    provider.push(Reply::text("over TLS"));
    let out = mesh
        .agent("Trusting")
        .timeout(WAIT)
        .call(json!({}))
        .await
        .unwrap();
    assert_eq!(out, json!({"text": "over TLS"}));
    let sent = provider.wait_requests(1).await;
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );

    for name in ["WrongCa", "SystemRoots"] {
        let failed = mesh.agent(name).timeout(WAIT).call(json!({})).await;
        let Err(CallError::Failed { message, kind, .. }) = failed else {
            panic!("{name}: expected a failure, got {failed:?}");
        };
        assert_eq!(kind.as_deref(), Some("permanent"), "{name}: {message}");
        assert!(
            message.contains("TLS certificate was refused")
                && message.contains("invalid peer certificate"),
            "{name}: {message}"
        );
        assert!(!message.contains(KEY), "{name}: {message}");
    }
    // Refused at the handshake: no request reached the provider.
    assert_eq!(provider.requests().len(), 1);
}
