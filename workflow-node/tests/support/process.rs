//! Processes under test: a child (`workflow-node serve`, `ui`, a container) whose stderr
//! lines are collected as they come, so a test waits for the line that says it is ready
//! (an address, "serving") instead of sleeping; killed on drop, its stderr printed when the
//! test fails. And a lock for tests that must have the machine to themselves.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// How long a test waits for a line or an exit: only a failing test ever waits this long.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// The `workflow-node` binary of this build, as a command.
pub(crate) fn workflow_node() -> Command {
    Command::new(env!("CARGO_BIN_EXE_workflow-node"))
}

/// A child process, killed on drop, with its stderr lines as they come.
pub(crate) struct Child {
    child: std::process::Child,
    lines: tokio::sync::watch::Receiver<Vec<String>>,
}

impl Child {
    /// Spawns `command` with its stdin and stdout closed and its stderr read line by line;
    /// fails the test if it cannot start.
    pub(crate) fn spawn(command: &mut Command) -> Child {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {:?}: {e}", command.get_program()));
        let stderr = child.stderr.take().expect("piped");
        let (tx, lines) = tokio::sync::watch::channel(Vec::new());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                tx.send_modify(|lines| lines.push(line));
            }
        });
        Child { child, lines }
    }

    /// The first stderr line that satisfies `wanted`, waiting for it (bounded by
    /// [`WAIT`]); fails the test with every line so far if none comes.
    pub(crate) async fn line_where(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let found = tokio::time::timeout(
            WAIT,
            self.lines.wait_for(|lines| lines.iter().any(|l| wanted(l))),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        let lines = self.lines();
        assert!(found, "never printed {what}:\n{}", lines.join("\n"));
        lines.into_iter().find(|l| wanted(l)).expect("found")
    }

    /// The rest of the first stderr line starting with `prefix`, waiting for it.
    pub(crate) async fn line(&mut self, prefix: &str) -> String {
        let line = self
            .line_where(&format!("'{prefix}...'"), |l| l.starts_with(prefix))
            .await;
        line[prefix.len()..].to_string()
    }

    /// The stderr lines so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.borrow().clone()
    }

    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM; fails the test if it cannot be sent.
    pub(crate) fn terminate(&self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    }

    /// Its exit status, once it exits (a bounded poll, [`WAIT`]); fails the test if it
    /// does not.
    pub(crate) async fn exited(&mut self) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the process did not exit:\n{}",
                self.lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its exit status if it has exited.
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait")
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the child's stderr:\n{}", self.lines().join("\n"));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The machine, held by tests that start several processes and time their runs under
/// faults: they ran alone when each was a binary of its own, and still do.
static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Holds the machine for this test alone until the guard is dropped: no other test that
/// takes [`alone`] or [`shared`] runs meanwhile.
pub(crate) async fn alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().await
}

/// Holds the machine with the tests that also take [`shared`] (they ran side by side in
/// one binary), and apart from those that take [`alone`].
pub(crate) async fn shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().await
}
