//! A mesh in the test's process: a real nats-server started for the test, stub agents from
//! YAML and a workflow node serving the test's workflows; the keys of the operator and the
//! approver the node trusts; and a wait until a workflow's events have all been processed.

use std::sync::OnceLock;
use std::time::Duration;

use agent_sdk::Signer;
use messages::jsonrpc::Request;

use workflow_node::definition::{parse_str, Workflow};
use workflow_node::shell::{run::names, Config, WorkflowNode};

/// A server, the stub agents and a node; all stop when it is dropped.
pub(crate) struct Mesh {
    pub(crate) server: test_harness::NatsServer,
    pub(crate) client: async_nats::Client,
    pub(crate) node: WorkflowNode,
    _stubs: Vec<agent_sdk::AgentHandle>,
    _dir: tempfile::TempDir,
}

impl Mesh {
    /// Puts `node` in the place of the mesh's node and returns the one it replaces (to shut
    /// it down: a replica replaced by another, as in a rolling upgrade).
    pub(crate) fn replace_node(&mut self, node: WorkflowNode) -> WorkflowNode {
        std::mem::replace(&mut self.node, node)
    }
}

/// Parses workflow definitions, failing the test on any problem.
pub(crate) fn workflows(yamls: &[&str]) -> Vec<Workflow> {
    yamls
        .iter()
        .map(|y| parse_str(y, "test.yaml").unwrap_or_else(|p| panic!("{p:?}")))
        .collect()
}

/// Starts a server, the stub agents of `stubs` (a stub file's YAML) and a node serving
/// `yamls` with `config`.
pub(crate) async fn mesh(stubs: &str, yamls: &[&str], config: Config) -> Mesh {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let dir = tempfile::tempdir().expect("tempdir");
    let stub_path = dir.path().join("stubs.yaml");
    std::fs::write(&stub_path, stubs).expect("write stubs");
    let file = agent_sdk::stub::load_stub_file(&stub_path).expect("stub file");
    let stubs = agent_sdk::stub::serve_stubs(client.clone(), "mesh", file)
        .await
        .expect("stubs");
    let node = WorkflowNode::start(client.clone(), workflows(yamls), config)
        .await
        .expect("node");
    Mesh {
        server,
        client,
        node,
        _stubs: stubs,
        _dir: dir,
    }
}

/// Waits until every event of `workflow` has been processed and acked (a bounded poll of
/// its consumer: the node acks an event only after carrying out its commands); fails the
/// test if they never are.
pub(crate) async fn settled(client: &async_nats::Client, workflow: &str) {
    let js = async_nats::jetstream::new(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
            .get_consumer_from_stream(names::CONSUMER, names::event_stream("mesh", workflow))
            .await
            .expect("consumer");
        let info = consumer.info().await.expect("consumer info");
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events of {workflow} were never all acked: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The operator key of the tests (one per test process).
pub(crate) fn operator() -> &'static Signer {
    static KEY: OnceLock<Signer> = OnceLock::new();
    KEY.get_or_init(Signer::generate)
}

/// Approver `alice`'s key (one per test process).
pub(crate) fn alice() -> &'static Signer {
    static KEY: OnceLock<Signer> = OnceLock::new();
    KEY.get_or_init(Signer::generate)
}

/// `config` trusting [`operator`] as an operator and binding `alice` to [`alice`].
pub(crate) fn trusting(config: Config) -> Config {
    let mut config = config;
    config.operators.push(operator().public_key().to_string());
    config
        .approvers
        .insert("alice".into(), alice().public_key().to_string());
    config
}

/// Sends `request` to `workflow`, signed by `signer`, and returns the answer.
pub(crate) async fn ask_signed(
    client: &async_nats::Client,
    workflow: &str,
    request: &Request,
    signer: &Signer,
) -> serde_json::Value {
    let subject = messages::subjects::agent_request("mesh", workflow);
    let body = serde_json::to_vec(request).expect("JSON");
    let headers = async_nats::HeaderMap::new();
    let reply = agent_sdk::signing::request(client, subject, headers, body.into(), Some(signer))
        .await
        .expect("an answer");
    serde_json::from_slice(&reply.payload).expect("JSON")
}
