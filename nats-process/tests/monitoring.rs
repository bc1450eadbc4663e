//! The monitoring endpoint on an ephemeral port: picked by the server, read back from its
//! log, kept across a restart, and off unless asked for; and what `/jsz` shows of the
//! file store's budget.

use nats_process::{NatsServer, Options, DEFAULT_MAX_FILE_STORE};

fn varz(server: &NatsServer) -> serde_json::Value {
    serde_json::from_str(&server.monitor("/varz").expect("GET /varz")).expect("/varz is JSON")
}

#[test]
fn an_ephemeral_monitoring_port_is_picked_read_back_and_kept() {
    let mut server = NatsServer::start(Options {
        http_port: Some(0),
        ..Options::default()
    })
    .expect("server starts");
    let port = server.http_port().expect("monitoring is on");
    assert_ne!(port, 0);
    assert_ne!(port, server.port());
    assert_eq!(varz(&server)["port"], u64::from(server.port()));
    server.restart().expect("server restarts");
    assert_eq!(server.http_port(), Some(port));
    assert_eq!(varz(&server)["port"], u64::from(server.port()));
}

#[test]
fn monitoring_is_off_unless_asked_for() {
    let server = NatsServer::start(Options::default()).expect("server starts");
    assert_eq!(server.http_port(), None);
    let err = server.monitor("/varz").expect_err("no monitoring port");
    assert!(err.to_string().contains("/varz"), "{err}");
}

#[test]
fn the_file_store_budget_is_fixed_not_the_hosts_free_disk() {
    let server = NatsServer::start(Options {
        http_port: Some(0),
        ..Options::default()
    })
    .expect("server starts");
    let jsz: serde_json::Value =
        serde_json::from_str(&server.monitor("/jsz").expect("GET /jsz")).expect("/jsz is JSON");
    assert_eq!(
        jsz["config"]["max_storage"], DEFAULT_MAX_FILE_STORE,
        "{jsz}"
    );
}
