//! The container image (`deploy/container/Dockerfile`) built and run with podman: two
//! workflow-node replicas and the stub agents, each a container of the image, against this
//! test's own nats-server; a workflow runs to success; one replica stopped with SIGTERM
//! turns unready (its `/readyz` and its image's `HEALTHCHECK`) while still alive, then
//! exits 0, and the other carries on.
//!
//! Ignored by `cargo test`: it needs podman and the base image the Dockerfile names.
//! `bash .ci/run` provides both (`deploy/container/base-image.sh` makes the base from
//! Debian's packages, as no registry is reachable there) and runs it; by hand:
//!
//! ```sh
//! bash deploy/container/base-image.sh
//! export CONTAINERS_CONF=$PWD/deploy/container/containers-ci.conf   # on the CI machines
//! cargo build -p agent-sdk --features stubs --bin stub-agents
//! cargo test -p workflow-node --test container_image -- --ignored
//! ```
//!
//! The image is built from the binaries of this build (the debug ones, stripped), not by
//! cargo inside a container; `--pull=never` keeps the build off the network.

#[path = "../support/mod.rs"]
mod support;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::process::Child;

const TIMEOUT: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running podman (bash .ci/run installs it)")
}

fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free loopback port (the next bind of port 0 will hardly pick it again at once).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The image, built from this build's binaries; removed on drop.
struct Image {
    tag: String,
}

impl Image {
    fn build() -> Image {
        let base = "docker.io/library/debian:bookworm-slim";
        assert!(
            podman(&["image", "exists", base]).status.success(),
            "no {base} in podman's storage: run bash deploy/container/base-image.sh"
        );
        let context = tempfile::tempdir().expect("tempdir");
        let bin = context.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let node = PathBuf::from(env!("CARGO_BIN_EXE_workflow-node"));
        let stubs = node.with_file_name("stub-agents");
        assert!(
            stubs.exists(),
            "{} is missing: cargo build -p agent-sdk --features stubs --bin stub-agents",
            stubs.display()
        );
        for from in [&node, &stubs] {
            let to = bin.join(from.file_name().expect("a file"));
            // Stripped, the two debug binaries are a quarter of their size.
            let stripped = Command::new("strip").arg("-o").arg(&to).arg(from).status();
            if !stripped.is_ok_and(|s| s.success()) {
                std::fs::copy(from, &to).expect("copying a binary");
            }
        }
        let tag = format!("localhost/workflow-node-test:{}", std::process::id());
        let dockerfile = repo().join("deploy/container/Dockerfile");
        podman_ok(&[
            "build",
            "--pull=never",
            "--format=docker",
            "--quiet",
            "-f",
            dockerfile.to_str().expect("utf-8"),
            "-t",
            &tag,
            context.path().to_str().expect("utf-8"),
        ]);
        Image { tag }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman(&["rmi", "--force", &self.tag]);
    }
}

/// A container of the image run attached, with a read-only root file system (`podman run` is the child, its exit status the
/// container's), with host networking; its stderr lines as they come; removed on drop.
struct Container {
    name: String,
    child: Child,
    health: SocketAddr,
}

impl Container {
    fn run(name: &str, nats_url: &str, args: &[&str]) -> Container {
        let name = format!("{name}-{}", std::process::id());
        let _ = podman(&["rm", "--force", &name]);
        let health = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Child::spawn(
            Command::new("podman")
                // --read-only: as Kubernetes' readOnlyRootFilesystem (deploy/kubernetes/).
                .args([
                    "run",
                    "--rm",
                    "--read-only",
                    "--name",
                    &name,
                    "--network",
                    "host",
                ])
                .args(["--env", &format!("NATS_URL={nats_url}")])
                .args(["--env", &format!("MESH_HEALTH_ADDR={health}")])
                .args(["--env", "MESH_METRICS_ADDR=127.0.0.1:0"])
                .args(args),
        );
        Container {
            name,
            child,
            health,
        }
    }

    /// Waits (bounded) for a stderr line containing `text`.
    async fn said(&mut self, text: &str) {
        let what = format!("'{text}' ({})", self.name);
        self.child.line_where(&what, |l| l.contains(text)).await;
    }

    /// Polls `/readyz` until it answers `status`; the body then.
    async fn readiness_becomes(&mut self, status: u16) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok((got, body)) =
                workflow_node::cli::health::get(self.health, "/readyz", Duration::from_secs(5))
            {
                if got == status {
                    return body;
                }
            }
            if let Some(exit) = self.child.try_wait() {
                panic!(
                    "{} exited ({exit}) before /readyz answered {status}:\n{}",
                    self.name,
                    self.child.lines().join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: /readyz never answered {status}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `podman healthcheck run`: the image's own `HEALTHCHECK`, inside the container.
    fn healthy(&self) -> bool {
        podman(&["healthcheck", "run", &self.name]).status.success()
    }

    fn terminate(&self) {
        podman_ok(&["kill", "--signal", "TERM", &self.name]);
    }

    /// Waits (bounded) for the container to end: its exit status.
    async fn exited(&mut self) -> std::process::ExitStatus {
        self.child.exited().await
    }
}

impl Drop for Container {
    /// Removes the container; then `child` is killed, its stderr printed if the test failed.
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "0", &self.name]);
    }
}

/// `workflow-node run ValueRouter` from the host: the JSON it prints.
fn run_workflow(url: &str, value: u32) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_workflow-node"))
        .args(["run", "ValueRouter", "--json", "--timeout", "60"])
        .args(["--input", &format!("{{\"value\": {value}}}")])
        .args(["--nats-url", url])
        .output()
        .expect("workflow-node run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "run failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).expect("run --json prints JSON")
}

/// World-readable copies of the example workflow and stub agents, for the containers'
/// non-root user.
fn mounts() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let workflows = dir.path().join("workflows");
    std::fs::create_dir(&workflows).unwrap();
    let examples = repo().join("examples");
    std::fs::copy(
        examples.join("workflows/value_router.yaml"),
        workflows.join("value_router.yaml"),
    )
    .unwrap();
    std::fs::copy(examples.join("agents.yaml"), dir.path().join("agents.yaml")).unwrap();
    for path in [dir.path(), &workflows] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

#[tokio::test]
#[ignore = "needs podman and the base image; bash .ci/run runs it"]
async fn two_replicas_from_the_image_run_a_workflow_and_drain_on_sigterm() {
    let image = Image::build();
    let user = podman_ok(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}",
        &image.tag,
    ]);
    assert_eq!(user.trim(), "65532:65532", "the image runs as non-root");

    let server = test_harness::nats();
    let url = server.url();
    let dir = mounts();
    let workflows = format!("{}:/workflows:ro", dir.path().join("workflows").display());
    let agents = format!(
        "{}:/agents/agents.yaml:ro",
        dir.path().join("agents.yaml").display()
    );

    let mut stubs = Container::run(
        "wf-test-agents",
        &url,
        &[
            "-v",
            &agents,
            "--entrypoint",
            "stub-agents",
            &image.tag,
            "/agents/agents.yaml",
        ],
    );
    let replica = |name| {
        Container::run(
            name,
            &url,
            &[
                "-v",
                &workflows,
                &image.tag,
                "serve",
                "/workflows",
                "--shutdown-delay",
                "60s",
            ],
        )
    };
    let mut first = replica("wf-test-replica-1");
    let mut second = replica("wf-test-replica-2");
    for container in [&mut stubs, &mut first, &mut second] {
        assert_eq!(container.readiness_becomes(200).await.trim(), "ready");
        assert!(
            container.healthy(),
            "{}: HEALTHCHECK passes",
            container.name
        );
    }

    let done = run_workflow(&url, 5);
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["output"]["category"], "low", "{done}");

    // SIGTERM: unready at once, and the HEALTHCHECK says so, while the delay holds it.
    first.terminate();
    let why = first.readiness_becomes(503).await;
    assert!(why.contains("draining"), "{why}");
    assert!(!first.healthy(), "HEALTHCHECK fails while draining");
    assert!(first.child.try_wait().is_none(), "still running");
    first.said("unready; draining in").await;
    // A second signal ends the delay: the drain, then exit 0.
    first.terminate();
    let status = first.exited().await;
    assert!(
        status.success(),
        "the replica exits 0 after its drain: {status}"
    );

    // The other replica carries on alone.
    assert_eq!(second.readiness_becomes(200).await.trim(), "ready");
    let done = run_workflow(&url, 50);
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["output"]["category"], "medium", "{done}");
}
