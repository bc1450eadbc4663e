//! `stub-agents` takes the connection options of `agent_sdk::ConnectConfig` as flags and
//! as `NATS_*` variables, and a bad combination or an unreadable file is an error that
//! names the option, before anything connects (exit 2).

use std::process::{Command, Output};

fn stub_agents(args: &[&str], env: &[(&str, &str)]) -> Output {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/agents.yaml");
    let mut command = Command::new(env!("CARGO_BIN_EXE_stub-agents"));
    for (key, _) in std::env::vars() {
        if key.starts_with("NATS_") {
            command.env_remove(key);
        }
    }
    command
        .arg(file)
        .args(["--nats-url", "nats://127.0.0.1:1"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running stub-agents")
}

fn refused(out: &Output, says: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(says), "{says:?} not in {stderr}");
}

#[test]
fn bad_connection_options_are_named() {
    refused(
        &stub_agents(&["--user", "alice"], &[]),
        "--user (NATS_USER) needs --password (NATS_PASSWORD)",
    );
    refused(
        &stub_agents(&[], &[("NATS_CERT", "/tmp/cert.pem")]),
        "--tls-cert (NATS_CERT) needs --tls-key (NATS_KEY)",
    );
    refused(
        &stub_agents(
            &["--nkey-file", "/nonexistent/agents.nk"],
            &[("NATS_USER", "a")],
        ),
        "--user (NATS_USER) and --nkey-file (NATS_NKEY_FILE) both say who connects",
    );
    refused(
        &stub_agents(&[], &[("NATS_NKEY_FILE", "/nonexistent/agents.nk")]),
        "reading the NKey seed file (--nkey-file) /nonexistent/agents.nk",
    );
    refused(
        &stub_agents(&["--inbox-prefix", "_INBOX.*"], &[]),
        "inbox prefix \"_INBOX.*\": wildcards",
    );
}
