//! A nats-server started with the shipped least-privilege configuration
//! (`deploy/secure/nats.conf`, included unchanged), with a CA, certificates, NKeys and
//! passwords made by the shipped `deploy/secure/gen-local.sh`; clients per user whose
//! permission violations (reported by the server on the connection) are collected.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::ConnectConfig;
use async_nats::{Client, Event};
use clap::Parser;
use futures::StreamExt;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::Request;
use messages::workflow::{
    Decision, WorkflowApprovalDecision, WorkflowApprovalRequest, WorkflowDataPart,
};
use tokio::sync::mpsc;
use workflow_node::shell::{Config, WorkflowNode};

/// How long a run or an approval request may take under the shipped config.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// How long a denial may take to come back from the server.
pub(crate) const DENIAL: Duration = Duration::from_secs(10);

/// The repository root.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A server on the shipped config, and the files that let each user in.
pub(crate) struct Secure {
    pub(crate) server: test_harness::NatsServer,
    pub(crate) pki: PathBuf,
    _dir: tempfile::TempDir,
}

impl Secure {
    /// Generates the keys and certificates with the shipped script, then starts the server
    /// with the shipped config; only the listen port, log and store directory are the
    /// harness's, and the certificate paths, public keys and passwords come from the
    /// script's `server.env` through the environment.
    pub(crate) fn start() -> Secure {
        Secure::start_config(&repo().join("deploy/secure/nats.conf"))
    }

    /// [`Secure::start`] with another shipped config that takes the script's `server.env`
    /// (`deploy/nats-single.conf`); its monitoring port, if it has one, is an ephemeral one.
    pub(crate) fn start_config(config: &Path) -> Secure {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = dir.path().join("pki");
        let out = Command::new("bash")
            .arg(repo().join("deploy/secure/gen-local.sh"))
            .arg(&pki)
            .output()
            .expect("running deploy/secure/gen-local.sh");
        assert!(
            out.status.success(),
            "gen-local.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let server = test_harness::nats_with(test_harness::Options {
            include: Some(config.to_owned()),
            env: read_env(&pki.join("server.env")),
            http_port: Some(0),
            ..Default::default()
        });
        Secure {
            server,
            pki,
            _dir: dir,
        }
    }

    /// The client variables of `user` (`deploy/secure/local/USER.env` as the script writes
    /// it), with this server's URL.
    pub(crate) fn env(&self, user: &str) -> Vec<(String, String)> {
        read_env(&self.pki.join(format!("{user}.env")))
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                "NATS_URL" => (k, self.server.url()),
                _ => (k, v),
            })
            .collect()
    }

    /// `user`'s connection options, parsed from the command-line flags that its env file's
    /// variables stand for.
    pub(crate) fn config(&self, user: &str) -> ConnectConfig {
        self.config_without(user, &[])
    }

    /// [`Secure::config`] without some of the env file's variables (`NATS_CA`, `NATS_CERT`
    /// and `NATS_KEY` for a server without TLS).
    pub(crate) fn config_without(&self, user: &str, without: &[&str]) -> ConnectConfig {
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            connect: ConnectConfig,
        }
        let mut args = vec!["test".to_owned()];
        for (key, value) in self.env(user) {
            if without.contains(&key.as_str()) {
                continue;
            }
            let flag = match key.as_str() {
                "NATS_USER" => "--user",
                "NATS_PASSWORD" => "--password",
                "NATS_NKEY_FILE" => "--nkey-file",
                "NATS_CA" => "--tls-ca",
                "NATS_CERT" => "--tls-cert",
                "NATS_KEY" => "--tls-key",
                "NATS_INBOX_PREFIX" => "--inbox-prefix",
                _ => continue,
            };
            args.extend([flag.to_owned(), value]);
        }
        Flags::try_parse_from(args)
            .expect("the env file's settings are valid flags")
            .connect
    }

    /// `user`'s card settings (which keys sign which agents' cards, whether unsigned ones
    /// count), parsed from the flags that its env file's variables stand for.
    pub(crate) fn card_trust(&self, user: &str) -> agent_sdk::CardTrust {
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            cards: agent_sdk::CardTrust,
        }
        let mut args = vec!["test".to_owned()];
        for (key, value) in self.env(user) {
            match key.as_str() {
                "MESH_AGENT_KEYS" => args.extend(["--agent-key".to_owned(), value]),
                "MESH_REQUIRE_SIGNED_CARDS" if value == "true" => {
                    args.push("--require-signed-cards".to_owned())
                }
                _ => {}
            }
        }
        Flags::try_parse_from(args)
            .expect("the env file's card settings are valid flags")
            .cards
    }

    /// A connection as `user`, its server errors collected.
    pub(crate) async fn connect(&self, user: &str) -> Watched {
        Watched::connect(&self.server.url(), self.config(user)).await
    }

    /// The key of `user`'s NKey seed file (`USER.nk`, for `node`, `agents` and `ops`).
    pub(crate) fn signer(&self, user: &str) -> agent_sdk::Signer {
        let path = self.pki.join(format!("{user}.nk"));
        agent_sdk::Signer::from_seed_file(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The server log's lines about permission violations.
    pub(crate) fn violations_logged(&self) -> Vec<String> {
        std::fs::read_to_string(self.server.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Violation"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Secure {
    /// A failed test shows what the server refused, and to whom.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "server-side violations:\n{}",
                self.violations_logged().join("\n")
            );
        }
    }
}

/// `KEY=VALUE` lines (comments and blanks skipped).
fn read_env(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// A client whose server errors ("Permissions Violation for Publish to …") are kept, and
/// whose disconnections are counted.
pub(crate) struct Watched {
    pub(crate) client: Client,
    errors: mpsc::UnboundedReceiver<String>,
    disconnects: Arc<AtomicUsize>,
}

impl Watched {
    /// Connects with `config`, its event callback replaced by a collector of server errors.
    pub(crate) async fn connect(url: &str, config: ConnectConfig) -> Watched {
        let (tx, errors) = mpsc::unbounded_channel();
        let disconnects = Arc::new(AtomicUsize::new(0));
        let counted = disconnects.clone();
        let options = config
            .options()
            .await
            .expect("connect options")
            .event_callback(move |event| {
                let tx = tx.clone();
                let counted = counted.clone();
                async move {
                    match event {
                        Event::ServerError(e) => drop(tx.send(e.to_string())),
                        Event::Disconnected => drop(counted.fetch_add(1, Ordering::SeqCst)),
                        _ => {}
                    }
                }
            });
        let client = options.connect(url).await.expect("connecting");
        Watched {
            client,
            errors,
            disconnects,
        }
    }

    /// How many times the server dropped this connection so far (a round trip first, so a
    /// drop the server made before it has been seen).
    pub(crate) async fn disconnects(&self) -> usize {
        agent_sdk::Mesh::new(self.client.clone())
            .roundtrip()
            .await
            .expect("a round trip through the own inbox");
        self.disconnects.load(Ordering::SeqCst)
    }

    /// Waits for the server to refuse `what` (`Publish` or `Subscription`) on `subject`
    /// and returns its error; panics after [`DENIAL`] without one.
    pub(crate) async fn denied(&mut self, what: &str, subject: &str) -> String {
        self.denied_like(what, &format!("{subject}\"")).await
    }

    /// [`Watched::denied`] for a subject that starts with `prefix`.
    pub(crate) async fn denied_like(&mut self, what: &str, prefix: &str) -> String {
        let wanted = format!("Permissions Violation for {what} to \"{prefix}");
        let found = tokio::time::timeout(DENIAL, async {
            while let Some(error) = self.errors.recv().await {
                if error.contains(&wanted) {
                    return Some(error);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(error)) => error,
            _ => panic!("no \"{wanted}\" within {DENIAL:?}"),
        }
    }

    /// The server errors so far (none on a connection that stayed within its rights).
    pub(crate) async fn errors(&mut self) -> Vec<String> {
        // A round trip first: an error the server sent before it is in by then.
        agent_sdk::Mesh::new(self.client.clone())
            .roundtrip()
            .await
            .expect("a round trip through the own inbox");
        let mut seen = Vec::new();
        while let Ok(error) = self.errors.try_recv() {
            seen.push(error);
        }
        seen
    }
}

/// The `workflow-node` binary as `user`: its connection settings from the user's env file
/// (the variables, not flags), run from the repository root.
pub(crate) fn cli(secure: &Secure, user: &str, args: &[&str]) -> Output {
    cli_without(secure, user, &[], args)
}

/// [`cli`] without some of the user's variables.
pub(crate) fn cli_without(secure: &Secure, user: &str, without: &[&str], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_workflow-node"));
    for (key, _) in std::env::vars() {
        if key.starts_with("NATS_") && key != "NATS_SERVER_BIN" {
            command.env_remove(key);
        }
    }
    let env = secure.env(user);
    command
        .envs(
            env.iter()
                .filter(|(k, _)| !without.contains(&k.as_str()))
                .cloned(),
        )
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running workflow-node")
}

/// The example stub agents (`examples/agents.yaml`).
pub(crate) fn stubs_file() -> agent_sdk::StubFile {
    agent_sdk::load_stub_file(repo().join("examples/agents.yaml")).expect("examples/agents.yaml")
}

/// The node in this process, as user `node`, hosting the example workflows.
pub(crate) async fn node(secure: &Secure) -> (WorkflowNode, Watched) {
    node_configured(secure, |_| {}).await
}

/// [`node`], its settings changed by `change` (after ops' key is set as the example gates'
/// approver and the operator).
pub(crate) async fn node_configured(
    secure: &Secure,
    change: impl FnOnce(&mut Config),
) -> (WorkflowNode, Watched) {
    node_on(secure, secure.connect("node").await, change).await
}

/// [`node_configured`] on a connection of one's own (user `node` on a server without TLS,
/// say).
pub(crate) async fn node_on(
    secure: &Secure,
    watched: Watched,
    change: impl FnOnce(&mut Config),
) -> (WorkflowNode, Watched) {
    node_started(secure, watched, example_workflows(), change).await
}

/// The node in this process, as user `node`, hosting `workflows` (the test's own).
pub(crate) async fn node_serving(
    secure: &Secure,
    workflows: Vec<workflow_node::definition::Workflow>,
) -> (WorkflowNode, Watched) {
    node_started(secure, secure.connect("node").await, workflows, |_| {}).await
}

/// The example workflows (`examples/workflows`).
fn example_workflows() -> Vec<workflow_node::definition::Workflow> {
    let (workflows, problems) =
        workflow_node::definition::load_paths(&[repo().join("examples/workflows")]);
    assert!(problems.is_empty(), "{problems:?}");
    workflows
}

/// The node on `watched`, hosting `workflows`, its settings changed by `change` as in
/// [`node_configured`].
async fn node_started(
    secure: &Secure,
    watched: Watched,
    workflows: Vec<workflow_node::definition::Workflow>,
    change: impl FnOnce(&mut Config),
) -> (WorkflowNode, Watched) {
    // Ops' key (the one it connects with) decides the example gates: their approver names
    // are bound to it.
    let ops = agent_sdk::Signer::from_seed_file(secure.pki.join("ops.nk")).expect("ops.nk");
    let ops_key = ops.public_key().to_string();
    let mut config = Config {
        card_wait: Duration::from_millis(500),
        approvers: [("ops-team", &ops_key), ("alice", &ops_key)]
            .into_iter()
            .map(|(n, k)| (n.to_string(), k.clone()))
            .collect(),
        operators: vec![ops_key.clone()],
        ..Config::default()
    };
    change(&mut config);
    let node = WorkflowNode::start(watched.client.clone(), workflows, config)
        .await
        .expect("the node starts as user node");
    (node, watched)
}

/// The first approval request published for `workflow`.
pub(crate) async fn approval_request(asks: &mut async_nats::Subscriber) -> WorkflowApprovalRequest {
    loop {
        let msg = tokio::time::timeout(WAIT, asks.next())
            .await
            .expect("an approval request")
            .expect("the subscription lives");
        let part: Part = serde_json::from_slice(&msg.payload).expect("a part");
        if let Some(Ok(Some(WorkflowDataPart::ApprovalRequest(ask)))) =
            part.as_data().map(WorkflowDataPart::from_data)
        {
            return ask;
        }
    }
}

/// A decision on `node` of run `execution`, as the CLI sends it.
pub(crate) fn decision(execution: &str, node: &str, by: &str) -> Vec<u8> {
    let decision = WorkflowApprovalDecision {
        execution_id: execution.to_owned(),
        node_id: node.to_owned(),
        decision: Decision::Approve,
        by: Some(by.to_owned()),
        comment: None,
    };
    let message = Message::new("forged", Role::User, vec![Part::data_part(&decision)]);
    serde_json::to_vec(&Request::message_send("forged", message)).expect("json")
}

/// A child process killed (SIGKILL) on drop unless stopped before.
pub(crate) struct ChildGuard(pub(crate) std::process::Child);

impl ChildGuard {
    /// Kills the child and reaps it.
    pub(crate) fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}
