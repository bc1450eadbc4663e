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

/// The shipped 3-node cluster (`deploy/nats-cluster/n*.conf`, unchanged but for its ports,
/// with the files `gen-local.sh` writes): its routes form with the route password, a
/// client without a user and a route without the password are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_asks_clients_for_a_user_and_routes_for_their_password() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let local = root.join("deploy/secure/local");
    std::fs::create_dir_all(root.join("deploy/nats-cluster")).unwrap();
    std::fs::create_dir_all(root.join("deploy/secure")).unwrap();
    std::fs::copy(
        repo().join("deploy/secure/accounts.conf"),
        root.join("deploy/secure/accounts.conf"),
    )
    .unwrap();
    let made = std::process::Command::new("bash")
        .arg(repo().join("deploy/secure/gen-local.sh"))
        .arg(&local)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    // Free ports in place of the shipped ones: client 422N, route 622N, monitoring 822N.
    let listeners: Vec<_> = (0..9)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    drop(listeners);
    // One pass over the text's runs of digits: replacing one port after another would
    // also rewrite a free port already put in whose digits hold a later shipped one (a
    // route port 46223 read as "6223"), and the routes would then never form.
    let shipped = |run: &str| {
        (0..3).find_map(|i| {
            [(4, 0), (6, 3), (8, 6)]
                .into_iter()
                .find(|(lead, _)| run == format!("{lead}22{}", 2 + i))
                .map(|(_, base)| ports[base + i].to_string())
        })
    };
    let rewrite = |text: &str| {
        let mut out = String::with_capacity(text.len());
        let mut run = String::new();
        for c in text.chars().chain(std::iter::once('\n')) {
            if c.is_ascii_digit() {
                run.push(c);
                continue;
            }
            out.push_str(&shipped(&run).unwrap_or_else(|| run.clone()));
            run.clear();
            out.push(c);
        }
        out.pop();
        out
    };
    let routes = local.join("cluster-routes.conf");
    let text = std::fs::read_to_string(&routes).unwrap();
    std::fs::write(&routes, rewrite(&text)).unwrap();
    let env = crate::support::security::read_env(&local.join("server.env"));
    let bin = std::env::var("NATS_SERVER_BIN").unwrap_or_else(|_| "nats-server".into());
    let mut servers = Vec::new();
    for n in 1..=3 {
        let conf = format!("deploy/nats-cluster/n{n}.conf");
        let text = std::fs::read_to_string(repo().join(&conf)).unwrap();
        std::fs::write(root.join(&conf), rewrite(&text)).unwrap();
        let child = std::process::Command::new(&bin)
            .args(["-c", &conf])
            .current_dir(root)
            .envs(env.iter().cloned())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server");
        servers.push(crate::support::security::ChildGuard(child));
    }
    // The routes form: each node's monitoring shows routes to the other two.
    let monitor = std::net::SocketAddr::from(([127, 0, 0, 1], ports[6]));
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        // Polled: nothing announces that a server listens or that a route formed.
        if tokio::net::TcpStream::connect(monitor).await.is_ok() {
            let answer = test_harness::http::get(monitor, "/routez").await;
            if answer.json()["num_routes"].as_u64().unwrap_or(0) > 0 {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the routes never formed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let url = format!("nats://127.0.0.1:{}", ports[0]);
    assert!(
        async_nats::connect(&url).await.is_err(),
        "an anonymous client got into the cluster"
    );
    // A route that gives no password is refused.
    let mut route = std::net::TcpStream::connect(("127.0.0.1", ports[3])).unwrap();
    route
        .write_all(
            b"CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"intruder\"}\r\nPING\r\n",
        )
        .unwrap();
    let mut answer = String::new();
    let _ = route.read_to_string(&mut answer);
    assert!(
        answer.contains("Authorization Violation"),
        "a route without the password was not refused: {answer}"
    );
    drop(servers);
}
