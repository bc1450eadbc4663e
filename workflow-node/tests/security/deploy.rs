//! The shipped deployments ask who connects. `deploy/nats-single.conf` (local development)
//! refuses a client without a user, and the mesh works with a user per role; the
//! Kubernetes values and manifests give the server the same users and every client its
//! credentials from a Secret, with no anonymous fallback (read from the files: no cluster
//! here).

use std::collections::BTreeSet;

use agent_sdk::Mesh;
use serde_json::json;
use serde_yaml::Value as Yaml;

use crate::support::security::{node_on, repo, stubs_file, Secure, Watched, WAIT};

/// The client variables of a TLS connection, which the local server does not speak.
const TLS: [&str; 3] = ["NATS_CA", "NATS_CERT", "NATS_KEY"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_server_refuses_anonymous_clients_and_serves_each_role() {
    let single = Secure::start_config(&repo().join("deploy/nats-single.conf"));
    let url = single.server.url();
    let anonymous = async_nats::connect(&url).await;
    assert!(
        anonymous.is_err(),
        "an anonymous client got into the local server"
    );
    let wrong = async_nats::ConnectOptions::with_user_and_password("alice".into(), "guess".into())
        .connect(&url)
        .await;
    assert!(wrong.is_err(), "a wrong password got in");

    // The node, the agents and a caller, each with its own user.
    let node_conn = Watched::connect(&url, single.config_without("node", &TLS)).await;
    let (_node, _) = node_on(&single, node_conn, |_| {}).await;
    let mut agents = Watched::connect(&url, single.config_without("agents", &TLS)).await;
    let _stubs = agent_sdk::serve_stubs(agents.client.clone(), "mesh", stubs_file())
        .await
        .expect("the stub agents serve as user agents");
    let mut alice = Watched::connect(&url, single.config_without("alice", &TLS)).await;
    let mesh = Mesh::new(alice.client.clone()).timeout(WAIT);
    let catalog = mesh.catalog().await.expect("alice sees the cards");
    assert!(catalog.wait_for("ValueRouter", WAIT).await.is_some());
    let output = mesh
        .agent("ValueRouter")
        .call(json!({"value": 5}))
        .await
        .expect("ValueRouter succeeds");
    assert_eq!(output, json!({"category": "low", "result": 5}));
    assert_eq!(alice.errors().await, Vec::<String>::new());
    assert_eq!(agents.errors().await, Vec::<String>::new());
}

fn yaml_documents(path: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(repo().join(path)).expect(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect(path))
        .collect()
}

fn text<'a>(value: &'a Yaml, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |v, key| v.get(*key))
        .and_then(Yaml::as_str)
}

/// The `$MESH_…` variables `deploy/secure/accounts.conf` takes its keys and passwords from.
fn account_variables() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("deploy/secure/accounts.conf")).unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$')))
        .filter_map(|w| w.strip_prefix('$'))
        .filter(|w| w.starts_with("MESH_"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_kubernetes_server_has_users_whose_secrets_come_from_secrets() {
    let values = &yaml_documents("deploy/kubernetes/nats-values.yaml")[0];
    let merge = &values["config"]["merge"];
    assert!(
        text(merge, &["$include"]).is_some_and(|i| i.ends_with("accounts.conf")),
        "the server's config includes no accounts: {merge:?}"
    );
    assert!(merge.get("no_auth_user").is_none(), "an anonymous user");
    let wanted = account_variables();
    assert!(wanted.len() >= 5, "{wanted:?}");
    for name in &wanted {
        let var = &values["container"]["env"][name.as_str()];
        let secret = text(var, &["valueFrom", "secretKeyRef", "name"]);
        assert!(secret.is_some(), "{name} comes from no Secret: {var:?}");
        assert!(
            var.get("value").is_none(),
            "{name} is written in the values"
        );
    }
    // The file the server includes is mounted from a ConfigMap made of accounts.conf.
    let patch = serde_yaml::to_string(&values["podTemplate"]["patch"]).unwrap();
    assert!(patch.contains("configMap"), "{patch}");
}

#[test]
fn every_kubernetes_client_connects_with_credentials_from_a_secret() {
    let files = [
        "deploy/kubernetes/workflow-node.yaml",
        "deploy/kubernetes/stub-agents.yaml",
        "deploy/kubernetes/call-value-router.yaml",
    ];
    let mut clients = 0;
    for file in files {
        for doc in yaml_documents(file) {
            let pod = &doc["spec"]["template"]["spec"];
            let Some(containers) = pod["containers"].as_sequence() else {
                continue;
            };
            for c in containers {
                let env = c["env"].as_sequence().cloned().unwrap_or_default();
                let var = |name: &str| env.iter().find(|e| e["name"] == name).cloned();
                if var("NATS_URL").is_none() {
                    continue;
                }
                clients += 1;
                let who = format!("{file}: {}", text(c, &["name"]).unwrap_or("?"));
                for e in &env {
                    let name = text(e, &["name"]).unwrap_or("");
                    if ["NATS_PASSWORD", "NATS_TOKEN", "NATS_NKEY"].contains(&name) {
                        assert!(e.get("value").is_none(), "{who}: {name} is written in");
                        let from = &e["valueFrom"]["secretKeyRef"];
                        assert!(from.get("name").is_some(), "{who}: {name} from no Secret");
                        assert_ne!(from["optional"], Yaml::Bool(true), "{who}: optional");
                    }
                }
                let prefix = var("NATS_INBOX_PREFIX");
                assert!(prefix.is_some(), "{who}: no private inbox");
                let password = var("NATS_PASSWORD").is_some() && var("NATS_USER").is_some();
                let nkey =
                    var("NATS_NKEY_FILE").and_then(|v| text(&v, &["value"]).map(str::to_owned));
                let nkey_from_secret = nkey.is_some_and(|path| {
                    let mounts = c["volumeMounts"].as_sequence().cloned().unwrap_or_default();
                    let volumes = pod["volumes"].as_sequence().cloned().unwrap_or_default();
                    mounts.iter().any(|m| {
                        text(m, &["mountPath"]).is_some_and(|p| path.starts_with(p))
                            && volumes.iter().any(|v| {
                                v["name"] == m["name"]
                                    && text(v, &["secret", "secretName"]).is_some()
                                    && v["secret"]["optional"] != Yaml::Bool(true)
                            })
                    })
                });
                assert!(
                    password || nkey_from_secret,
                    "{who}: neither a password nor an NKey from a Secret"
                );
            }
        }
    }
    assert_eq!(clients, files.len(), "a client per file");
}
