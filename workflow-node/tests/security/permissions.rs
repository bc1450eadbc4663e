//! The mesh under the shipped least-privilege configuration (`deploy/secure/nats.conf`):
//! a user per role (workflow node and operator with NKeys, callers with passwords, the
//! stub agents with an NKey), mutual TLS, private inboxes.
//!
//! Workflows run end to end (a loop, an approval given by the operator with the CLI, a
//! sub-workflow, a map) with no permission violation anywhere; what an agent or a caller
//! must not do is refused by the server, as the client sees it ("Permissions Violation"
//! on its connection), and leaves the runs as they were.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_sdk::{CallError, ConnectConfig, Mesh};
use futures::{FutureExt, StreamExt};
use messages::subjects;
use serde_json::{json, Value};
use workflow_node::core::{ExecutionId, NodeStatus};
use workflow_node::shell::Inspector;

use crate::support::security::{
    approval_request, cli, cli_without, decision, node, repo, stubs_file, ChildGuard, Secure,
    Watched, WAIT,
};

const NS: &str = "mesh";

/// The numbers MapDouble doubled, as PollAndApprove returns them.
fn doubled(output: &Value) -> Vec<i64> {
    output["doubled"]
        .as_array()
        .map(|items| items.iter().filter_map(|i| i["value"].as_i64()).collect())
        .unwrap_or_default()
}

async fn catalog_has(mesh: &Mesh, names: &[&str]) {
    let catalog = mesh.catalog().await.expect("the caller sees the cards");
    for name in names {
        assert!(
            catalog.wait_for(name, WAIT).await.is_some(),
            "no card of {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_succeed_with_a_user_per_role_over_mutual_tls() {
    let secure = Secure::start();
    let dir = tempfile::tempdir().unwrap();
    // The node: `workflow-node serve` with user node's NKey seed file, client certificate
    // and inbox prefix, all from NATS_* variables.
    let node_log = dir.path().join("node.stderr");
    // Approvals are signed: ops' NKey (the same one it connects with) is bound to the names
    // the example gates list, and is the operators' key.
    let ops_key = std::fs::read_to_string(secure.pki.join("ops.pub")).unwrap();
    let ops_key = ops_key.trim();
    let (ops_team, alice_key) = (format!("ops-team={ops_key}"), format!("alice={ops_key}"));
    let mut serve = Command::new(env!("CARGO_BIN_EXE_workflow-node"));
    serve
        .envs(secure.env("node"))
        .args(["serve", "examples/workflows", "--card-interval", "1"])
        .args([
            "--approver",
            &ops_team,
            "--approver",
            &alice_key,
            "--operator-key",
            ops_key,
        ])
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&node_log).unwrap());
    let mut serve = ChildGuard(serve.spawn().expect("workflow-node serve"));

    let mut agents = secure.connect("agents").await;
    // Signed by the agents user's key: the node's env file binds the example agents to it.
    let signer = Some(secure.signer("agents"));
    let _stubs = agent_sdk::serve_stubs_signed(agents.client.clone(), NS, stubs_file(), signer)
        .await
        .expect("stub agents serve as user agents");
    let mut ops = secure.connect("ops").await;
    let mut asks = ops
        .client
        .subscribe(subjects::approvals(NS, "PollAndApprove"))
        .await
        .unwrap();
    let mut alice = secure.connect("alice").await;
    let mesh = Mesh::new(alice.client.clone()).timeout(WAIT);
    catalog_has(&mesh, &["PollAndApprove", "MapDouble", "Echo", "Doubler"]).await;

    // A loop, an approval gate, a sub-workflow with a map: alice calls, ops approves.
    let call = tokio::spawn(std::future::IntoFuture::into_future(
        mesh.agent("PollAndApprove").call(json!({})),
    ));
    let ask = approval_request(&mut asks).await;
    let listed = cli(&secure, "ops", &["approvals", "--json"]);
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    assert!(stdout.contains(&ask.execution_id), "{stdout}");
    let approved = cli(
        &secure,
        "ops",
        &[
            "approve",
            &ask.execution_id,
            "gate",
            "--by",
            "ops-team",
            "--nkey-seed-file",
            secure.pki.join("ops.nk").to_str().unwrap(),
        ],
    );
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    let output = call.await.unwrap().expect("PollAndApprove succeeds");
    assert_eq!(doubled(&output), [2, 4, 6], "{output}");
    // The operator reads runs: the record, its history, the list, where it stands.
    for args in [
        vec!["runs", "show", &ask.execution_id],
        vec!["runs", "show", &ask.execution_id, "--mermaid"],
        vec!["runs", "history", &ask.execution_id],
        vec!["runs", "list", "--json"],
        vec!["status", &ask.execution_id, "--workflow", "PollAndApprove"],
    ] {
        let out = cli(&secure, "ops", &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(!stdout.trim().is_empty(), "{args:?} printed nothing");
    }

    // Bob runs a workflow with the CLI: user and password, TLS, private inbox.
    let ran = cli(
        &secure,
        "bob",
        &["run", "ValueRouter", "--input", r#"{"value": 5}"#],
    );
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    let out: Value = serde_json::from_slice(&ran.stdout).expect("json output");
    assert_eq!(out, json!({"category": "low", "result": 5}));

    // Nobody stepped outside their permissions.
    assert_eq!(alice.errors().await, Vec::<String>::new());
    assert_eq!(agents.errors().await, Vec::<String>::new());
    assert_eq!(ops.errors().await, Vec::<String>::new());
    assert_eq!(secure.violations_logged(), Vec::<String>::new());
    serve.stop();
    let log = std::fs::read_to_string(&node_log).unwrap();
    assert!(!log.contains("Violation"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_can_neither_forge_events_write_state_read_runs_nor_approve() {
    let secure = Secure::start();
    let (_node, mut node_conn) = node(&secure).await;
    let mut agents = secure.connect("agents").await;
    let _stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs_file())
        .await
        .unwrap();
    let ops = secure.connect("ops").await;
    let mut asks = ops
        .client
        .subscribe(subjects::approvals(NS, "PollAndApprove"))
        .await
        .unwrap();
    agent_sdk::Mesh::new(ops.client.clone())
        .roundtrip()
        .await
        .unwrap();
    let alice = secure.connect("alice").await;
    let mesh = Mesh::new(alice.client.clone()).timeout(WAIT);
    catalog_has(&mesh, &["PollAndApprove", "Echo"]).await;
    let call = tokio::spawn(std::future::IntoFuture::into_future(
        mesh.agent("PollAndApprove").call(json!({})),
    ));
    let ask = approval_request(&mut asks).await;
    let exec = ask.execution_id.clone();
    let inspector = Inspector::open(node_conn.client.clone(), NS).await.unwrap();
    let execution = ExecutionId::parse(&exec).unwrap();
    let before = inspector
        .read_run("PollAndApprove", &execution)
        .await
        .unwrap()
        .expect("the run's record");

    // A rogue agent process, with the agents' own user.
    let mut rogue = secure.connect("agents").await;
    let c = rogue.client.clone();
    let record_key = format!("$KV.mesh_wf_runs.PollAndApprove.{exec}");

    // Another workflow's events: a forged start, a decision, a timer.
    let events = subjects::run_events(NS, "PollAndApprove", &exec);
    c.publish(events.clone(), "{}".into()).await.unwrap();
    rogue.denied("Publish", &events).await;
    // Approving: a decision to the workflow, as `approve` sends it.
    let requests = subjects::agent_request(NS, "PollAndApprove");
    c.publish(requests.clone(), decision(&exec, "gate", "ops-team").into())
        .await
        .unwrap();
    rogue.denied("Publish", &requests).await;
    // Cancelling: not an agent's business either.
    let cancels = subjects::agent_cancel(NS, "PollAndApprove");
    c.publish(cancels.clone(), "{}".into()).await.unwrap();
    rogue.denied("Publish", &cancels).await;

    // Writing any KV key or object, or creating, changing or deleting a stream.
    for subject in [
        record_key.as_str(),
        "$KV.mesh_wf_timers.PollAndApprove.x.y",
        "$KV.mesh_wf_secrets.calls",
        "$KV.mesh_wf_defs.Echo.x",
        "$O.mesh_artifacts.C.forged",
        "$O.mesh_artifacts.M.Zm9yZ2Vk",
        "$O.mesh_wf_cards.M.Zm9yZ2Vk",
        "$JS.API.STREAM.CREATE.rogue",
        "$JS.API.STREAM.DELETE.mesh_WF_PollAndApprove",
        "$JS.API.STREAM.UPDATE.OBJ_mesh_artifacts",
        "$JS.API.STREAM.PURGE.KV_mesh_wf_runs",
        "$JS.API.KV.CREATE.rogue",
    ] {
        c.publish(subject.to_owned(), "{}".into()).await.unwrap();
        rogue.denied("Publish", subject).await;
    }

    // Reading another run's record: KV get, direct get, a consumer, a live subscription.
    // (The server answers nothing to a refused request: the client gives up after 1 s.)
    let js = async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(1))
        .build(c.clone());
    assert!(js.get_key_value("mesh_wf_runs").await.is_err());
    rogue
        .denied("Publish", "$JS.API.STREAM.INFO.KV_mesh_wf_runs")
        .await;
    let direct = format!("$JS.API.DIRECT.GET.KV_mesh_wf_runs.{record_key}");
    c.publish(direct.clone(), "".into()).await.unwrap();
    rogue.denied("Publish", &direct).await;
    for subject in [
        "$JS.API.STREAM.MSG.GET.KV_mesh_wf_runs",
        "$JS.API.CONSUMER.CREATE.KV_mesh_wf_runs",
        "$JS.API.STREAM.MSG.GET.mesh_wf_history",
    ] {
        c.publish(subject.to_owned(), "{}".into()).await.unwrap();
        rogue.denied("Publish", subject).await;
    }
    let _live = c.subscribe("$KV.mesh_wf_runs.>").await.unwrap();
    rogue.denied("Subscription", "$KV.mesh_wf_runs.>").await;

    // The run is as it was: still waiting at its gate, its record and stream untouched.
    let after = inspector
        .read_run("PollAndApprove", &execution)
        .await
        .unwrap()
        .expect("the run's record");
    assert_eq!(after.revision, before.revision);
    assert_eq!(after.record.state.nodes["gate"].status, NodeStatus::Waiting);
    let node_js = async_nats::jetstream::new(node_conn.client.clone());
    assert!(node_js.get_stream("mesh_WF_PollAndApprove").await.is_ok());

    // The operator's signed decision goes through, and the run ends well.
    let signer = agent_sdk::Signer::from_seed_file(secure.pki.join("ops.nk")).unwrap();
    let body = decision(&exec, "gate", "ops-team");
    let mut h = async_nats::HeaderMap::new();
    signer.sign_into(&mut h, &requests, None, &body, std::time::SystemTime::now());
    ops.client
        .publish_with_headers(requests, h, body.into())
        .await
        .unwrap();
    let output = call.await.unwrap().expect("PollAndApprove succeeds");
    assert_eq!(doubled(&output), [2, 4, 6], "{output}");
    assert_eq!(node_conn.errors().await, Vec::<String>::new());
    assert_eq!(agents.errors().await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_hears_only_its_own_inbox() {
    let secure = Secure::start();
    let (_node, mut node_conn) = node(&secure).await;
    let agents = secure.connect("agents").await;
    let _stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs_file())
        .await
        .unwrap();
    let mut alice = secure.connect("alice").await;
    let mut bob = secure.connect("bob").await;

    // Alice tries to listen to Bob's replies and to the workflows' own subjects.
    let mut eavesdrops = Vec::new();
    for subject in [
        "_INBOX.bob.>",
        "_INBOX.>",
        ">",
        "mesh.a2a.v1.agent.response.>",
        "mesh.a2a.v1.agent.response.ValueRouter.>",
        "mesh.a2a.v1.agent.status.ValueRouter.>",
        "mesh.a2a.v1.agent.request.ValueClassifier",
        "mesh.wf.>",
        "$KV.mesh_wf_runs.>",
    ] {
        eavesdrops.push(alice.client.subscribe(subject.to_owned()).await.unwrap());
        alice.denied("Subscription", subject).await;
    }
    // Nor may she answer for an agent, or write a run's events.
    for subject in [
        "mesh.a2a.v1.agent.response.ValueRouter.forged",
        "mesh.wf.ValueRouter.events.forged",
    ] {
        alice
            .client
            .publish(subject.to_owned(), "{}".into())
            .await
            .unwrap();
        alice.denied("Publish", subject).await;
    }

    // Bob's call goes through, and none of it reached Alice.
    let mesh = Mesh::new(bob.client.clone()).timeout(WAIT);
    catalog_has(&mesh, &["ValueRouter", "ValueClassifier"]).await;
    let output = mesh
        .agent("ValueRouter")
        .call(json!({"value": 5}))
        .await
        .expect("bob's call");
    assert_eq!(output, json!({"category": "low", "result": 5}));
    for mut sub in eavesdrops {
        assert!(sub.next().now_or_never().is_none(), "alice heard something");
    }
    assert_eq!(bob.errors().await, Vec::<String>::new());
    assert_eq!(node_conn.errors().await, Vec::<String>::new());

    // A caller without its private inbox prefix cannot hear any reply at all.
    let mut config = secure.config("alice");
    config.inbox_prefix = None;
    let mut careless = Watched::connect(&secure.server.url(), config).await;
    let call = Mesh::new(careless.client.clone())
        .timeout(Duration::from_secs(3))
        .agent("ValueRouter")
        .call(json!({"value": 5}));
    let error = careless.denied_like("Subscription", "_INBOX.").await;
    assert!(!error.contains("_INBOX.alice."), "{error}");
    assert!(matches!(call.await, Err(CallError::TimedOut { .. })));
    // The CLI says why.
    let out = cli_without(
        &secure,
        "alice",
        &["NATS_INBOX_PREFIX"],
        &[
            "run",
            "ValueRouter",
            "--input",
            r#"{"value": 5}"#,
            "--timeout",
            "3",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "the NATS server refused: nats: Permissions Violation for Subscription to \"_INBOX."
        ) && stderr.contains("--inbox-prefix"),
        "{stderr}"
    );
}

#[tokio::test]
async fn only_known_users_with_a_client_certificate_get_in() {
    let secure = Secure::start();
    let url = secure.server.url();
    let alice = secure.config("alice");
    // With everything: in.
    alice.connect(&url).await.expect("alice gets in");

    let refused = |config: ConnectConfig, why: &'static str| {
        let url = url.clone();
        async move {
            let e = config.connect(&url).await.err().unwrap_or_else(|| {
                panic!("let in {why}");
            });
            assert!(e.to_string().contains(&url), "{e}");
        }
    };
    let mut no_cert = alice.clone();
    no_cert.tls_cert = None;
    no_cert.tls_key = None;
    refused(no_cert, "without a client certificate").await;
    let mut wrong = alice.clone();
    wrong.password = Some("not-the-password".into());
    refused(wrong, "with a wrong password").await;
    let mut anonymous = alice.clone();
    anonymous.user = None;
    anonymous.password = None;
    refused(anonymous, "without a user").await;
    let mut stranger = secure.config("ops");
    stranger.nkey_file = None;
    stranger.nkey = Some(foreign_seed(&secure));
    refused(stranger, "with an NKey the server does not list").await;
}

/// A user seed the server does not know: made by the same script in another directory.
fn foreign_seed(secure: &Secure) -> String {
    let other: PathBuf = secure.pki.with_file_name("other");
    let status = Command::new("bash")
        .arg(repo().join("deploy/secure/gen-local.sh"))
        .arg(&other)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(other.join("ops.nk"))
        .unwrap()
        .trim()
        .to_owned()
}
