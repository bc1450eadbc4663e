//! `workflow-node serve` replica processes for the crash tests: spawned from the package's
//! binary, readiness read from their stderr ("serving ..."), killed (SIGKILL) on drop, and
//! a fleet with a killer that replaces a random replica every fraction of a second.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines of replica stderr kept for a failure report.
const LOG_LINES: usize = 400;

/// The stderr tail of every replica of a test, prefixed with the replica's number.
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<VecDeque<String>>>);

impl Logs {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == LOG_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The kept lines, oldest first.
    pub(crate) fn tail(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// How replicas are started.
#[derive(Clone)]
pub(crate) struct Spawner {
    /// The workflow file they serve.
    pub(crate) workflow_file: PathBuf,
    /// `--ack-wait` in seconds.
    pub(crate) ack_wait: f64,
    /// `--replicas`.
    pub(crate) stream_replicas: usize,
    /// Where stderr tails go.
    pub(crate) logs: Logs,
}

/// One `workflow-node serve` child process.
pub(crate) struct Replica {
    /// Its number within the test (for logs).
    pub(crate) id: usize,
    child: Child,
    ready: tokio::sync::watch::Receiver<bool>,
    /// Every replica's log lines (told apart by `[r{id}]`).
    logs: Logs,
}

impl Spawner {
    /// Starts replica `id` connected to `url` (one URL or a comma-separated list).
    pub(crate) fn spawn(&self, id: usize, url: &str) -> Replica {
        self.spawn_with(id, url, &[])
    }

    /// Starts replica `id` connected to `url`, with `extra` arguments to `serve`.
    pub(crate) fn spawn_with(&self, id: usize, url: &str, extra: &[&str]) -> Replica {
        self.spawn_full(id, url, extra, &[])
    }

    /// Starts replica `id` connected to `url`, with `env` set in its environment (a
    /// preloaded library that shifts its clock).
    pub(crate) fn spawn_env(&self, id: usize, url: &str, env: &[(&str, &str)]) -> Replica {
        self.spawn_full(id, url, &[], env)
    }

    /// Starts replica `id` connected to `url`, with `extra` arguments to `serve` and `env`
    /// set in its environment.
    pub(crate) fn spawn_full(
        &self,
        id: usize,
        url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_workflow-node"))
            .envs(env.iter().copied())
            .arg("serve")
            .arg(&self.workflow_file)
            .args(extra)
            .args(["--nats-url", url])
            .args(["--ack-wait", &self.ack_wait.to_string()])
            .args(["--replicas", &self.stream_replicas.to_string()])
            .args(["--card-interval", "2"])
            .args([
                "--approver",
                &format!("alice={}", super::alice().public_key()),
            ])
            .env("RUST_LOG", "workflow_node=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning workflow-node serve");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, ready) = tokio::sync::watch::channel(false);
        let logs = self.logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with("serving ") {
                    let _ = tx.send(true);
                }
                logs.push(format!("[r{id}] {line}"));
            }
        });
        Replica {
            id,
            child,
            ready,
            logs: self.logs.clone(),
        }
    }
}

impl Replica {
    /// Waits until it serves (it printed "serving ..."), at most `timeout`.
    pub(crate) async fn wait_ready(&mut self, timeout: Duration) {
        let ready = tokio::time::timeout(timeout, self.ready.wait_for(|r| *r)).await;
        assert!(
            matches!(ready, Ok(Ok(_))),
            "replica {} did not start serving within {timeout:?}; logs:\n{}",
            self.id,
            self.logs.tail()
        );
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and reap it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Freezes it (SIGSTOP): it holds its events, claims and cached records, and answers
    /// nothing, until [`Replica::resume`].
    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    /// Wakes it up (SIGCONT), with whatever it held when frozen.
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        let status = Command::new("kill")
            .args([which, &self.pid().to_string()])
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "kill {which} {} failed",
            self.pid()
        );
    }

    /// Sends SIGTERM (a polite shutdown: it drains and exits).
    pub(crate) fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "kill -TERM {} failed",
            self.pid()
        );
    }

    /// Waits for it to exit, at most `timeout`; its exit status and how long it took, or
    /// `None` if it was still running (it is then killed on drop).
    pub(crate) async fn wait_exit(mut self, timeout: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pid = self.pid();
        let waiter = std::thread::spawn(move || {
            let status = self.child.wait();
            let _ = tx.send(status.map(|s| (s, start.elapsed())));
            self
        });
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(done))) => Some(done),
            _ => {
                // Still running: kill it so the waiter returns, and report the failure.
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                let _ = waiter.join();
                None
            }
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A small deterministic random source (xorshift64*), seeded per test and printed, so a
/// failing schedule can be replayed.
pub(crate) struct Rng(u64);

impl Rng {
    /// Seeded from the clock.
    pub(crate) fn from_clock() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        Rng(seed)
    }

    /// Seeded with `seed` (its draws repeat those of a run that printed it).
    pub(crate) fn seeded(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// The seed it starts from.
    pub(crate) fn seed(&self) -> u64 {
        self.0
    }

    /// A number in `lo..hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        lo + self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % (hi - lo).max(1)
    }
}

/// A set of replicas and, while `run_killer` runs, one killed and replaced every
/// `interval` (a random duration in the range: load, not synchronisation).
pub(crate) struct Fleet {
    spawner: Spawner,
    urls: Vec<String>,
    replicas: Mutex<Vec<Replica>>,
    next_id: Mutex<usize>,
    /// When each kill happened.
    pub(crate) kills: Mutex<Vec<Instant>>,
}

impl Fleet {
    /// Starts `n` replicas, replica `i` connected to `urls[i % urls.len()]`, and waits until
    /// they all serve.
    pub(crate) async fn start(spawner: Spawner, urls: Vec<String>, n: usize) -> Arc<Fleet> {
        let mut replicas: Vec<Replica> = (0..n)
            .map(|i| spawner.spawn(i, &urls[i % urls.len()]))
            .collect();
        for r in &mut replicas {
            r.wait_ready(Duration::from_secs(30)).await;
        }
        Arc::new(Fleet {
            spawner,
            urls,
            replicas: Mutex::new(replicas),
            next_id: Mutex::new(n),
            kills: Mutex::new(Vec::new()),
        })
    }

    /// Kills (SIGKILL) a random replica and starts a new one in its place (connected to the
    /// same URL slot), without waiting for it to serve.
    pub(crate) fn kill_one(&self, rng: &mut Rng) {
        let mut replicas = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
        if replicas.is_empty() {
            return;
        }
        let slot = rng.range(0, replicas.len() as u64) as usize;
        replicas[slot].kill();
        self.kills
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
        let id = {
            let mut next = self.next_id.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next - 1
        };
        let url = &self.urls[slot % self.urls.len()];
        replicas[slot] = self.spawner.spawn(id, url);
    }

    /// Kills and replaces a random replica every `interval` until `stop` turns true.
    pub(crate) async fn run_killer(
        self: Arc<Self>,
        interval: (Duration, Duration),
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut rng = Rng::from_clock();
        eprintln!("killer seed: {}", rng.seed());
        loop {
            let pause = rng.range(interval.0.as_millis() as u64, interval.1.as_millis() as u64);
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(Duration::from_millis(pause)) => {}
            }
            let fleet = self.clone();
            let mut r = Rng(rng.range(1, u64::MAX));
            // Spawning forks the (large) test process: keep it off the async workers.
            let _ = tokio::task::spawn_blocking(move || fleet.kill_one(&mut r)).await;
        }
    }

    /// Number of kills so far.
    pub(crate) fn kill_count(&self) -> usize {
        self.kills.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Kills every replica now.
    pub(crate) fn kill_all(&self) {
        let mut replicas = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
        for r in replicas.iter_mut() {
            r.kill();
        }
        replicas.clear();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Writes `text` into `dir/name` and returns the path.
pub(crate) fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a test file");
    path
}
