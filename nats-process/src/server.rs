//! [`NatsServer`]: one nats-server child process with JetStream, on a loopback port.
//!
//! Each server lives in a directory of its own (a temp dir unless [`Options::data_dir`] is
//! given) holding the generated config, one log file per run and the JetStream store.
//! Readiness is read from the log ("Listening for client connections on", "Server is
//! ready") and then confirmed by a TCP connect that receives the server's `INFO` line.
//! A deployment's own config (accounts, permissions, TLS) can be included
//! ([`Options::include`]), the test then running against the very file that ships.

use std::fs::File;
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{ClusterConfig, Rendered};
use crate::{find_binary, Error};

/// How long a server may take to become ready, unless [`Options::ready_timeout`] says.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a graceful stop may take before we kill.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between looks at the log or the process while waiting.
const POLL: Duration = Duration::from_millis(5);

/// JetStream's `max_file_store` when [`Options::max_file_store`] sets none: 1 TiB.
///
/// nats-server reserves each file stream's byte limit (`max_bytes`) against this budget
/// when the stream is made, before a byte is written. Left to itself it takes 75 % of the
/// disk free at its start, so whether a workflow node's streams and buckets (about 1.2 GiB
/// of limits per namespace by default) could be made would hang on how full the host's
/// disk happened to be: a run of the tests on a fuller disk was refused at set-up. A fixed
/// budget makes the start the same on every host; a disk that really fills still fails the
/// writes, as it would under any budget.
pub const DEFAULT_MAX_FILE_STORE: u64 = 1 << 40;

/// How to start a [`NatsServer`]; `Options::default()` is a single JetStream server on an
/// ephemeral port in a temp dir.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Directory for config, logs and the JetStream store (`<data_dir>/jetstream`); kept on
    /// drop. `None`: a temp dir, removed on drop.
    pub data_dir: Option<PathBuf>,
    /// Client port on 127.0.0.1; `None` picks a free one (`listen: 127.0.0.1:-1`).
    pub port: Option<u16>,
    /// Monitoring HTTP port on 127.0.0.1 (`/varz`, `/jsz`, ...); `Some(0)` picks a free
    /// one (read back with [`NatsServer::http_port`]); `None`: off.
    pub http_port: Option<u16>,
    /// `max_payload` in bytes; `None`: the server's default (1 MiB).
    pub max_payload: Option<u64>,
    /// JetStream's `max_file_store` in bytes: the most its file store may hold (a small
    /// one is a full disk); `None`: [`DEFAULT_MAX_FILE_STORE`].
    pub max_file_store: Option<u64>,
    /// `server_name` (required to be unique within a JetStream cluster).
    pub server_name: Option<String>,
    /// Cluster block (route listener and routes).
    pub cluster: Option<ClusterConfig>,
    /// Extra config text appended verbatim to the generated file.
    pub extra_config: Option<String>,
    /// Overall deadline for readiness; `None`: 10 s.
    pub ready_timeout: Option<Duration>,
    /// A config file of one's own (a deployment's, with accounts, permissions and TLS),
    /// included at the top of the generated one: the settings generated after it (the
    /// loopback listen address and port, the log file, the `jetstream` block with our store
    /// directory, and whatever the other options set) override its own. Paths inside it
    /// are as it says; its `$VARIABLES` come from the environment ([`Options::env`]).
    pub include: Option<PathBuf>,
    /// Environment variables set for the server process (on top of ours): the values of
    /// an included config's `$VARIABLES` (passwords, public keys, certificate paths).
    pub env: Vec<(String, String)>,
}

/// The directory a server lives in.
#[derive(Debug)]
enum Home {
    /// Ours: removed on drop.
    Temp(tempfile::TempDir),
    /// The caller's: kept.
    Kept(PathBuf),
}

impl Home {
    fn path(&self) -> &Path {
        match self {
            Home::Temp(t) => t.path(),
            Home::Kept(p) => p,
        }
    }
}

/// A running (or stopped, restartable) nats-server child process.
///
/// Dropping it kills the process (SIGKILL) and removes its temp dir (never a caller's
/// `data_dir`). A long-lived owner of a kept `data_dir` (the embedded mode) should call
/// [`NatsServer::stop`] on the way out, so JetStream shuts down cleanly.
#[derive(Debug)]
pub struct NatsServer {
    options: Options,
    binary: PathBuf,
    home: Home,
    child: Option<Child>,
    /// The client port; fixed after the first start so restarts keep it.
    port: u16,
    /// The monitoring port, when on; fixed after the first start as `port` is.
    http_port: Option<u16>,
    /// Number of starts so far; each run gets its own log file.
    runs: u32,
}

impl NatsServer {
    /// Starts a server and waits until a client can connect.
    pub fn start(options: Options) -> Result<NatsServer, Error> {
        let binary = find_binary()?;
        let home = match &options.data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
                Home::Kept(dir.clone())
            }
            None => Home::Temp(
                tempfile::Builder::new()
                    .prefix("nats-server-")
                    .tempdir()
                    .map_err(|e| Error::io("creating a temp dir", e))?,
            ),
        };
        let mut server = NatsServer {
            port: options.port.unwrap_or(0),
            http_port: options.http_port,
            options,
            binary,
            home,
            child: None,
            runs: 0,
        };
        server.spawn()?;
        Ok(server)
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The monitoring port (`/varz`, `/jsz`, ...), when [`Options::http_port`] turned it
    /// on: the one picked when it asked for `Some(0)`.
    pub fn http_port(&self) -> Option<u16> {
        self.http_port
    }

    /// `GET path` on the monitoring port (`/varz`, `/jsz?streams=true`, ...): the body of
    /// a 200 answer. Blocking; a monitoring endpoint answers a small document at once.
    pub fn monitor(&self, path: &str) -> Result<String, Error> {
        let port = self.http_port.ok_or_else(|| {
            Error::io(
                format!("GET {path}"),
                std::io::Error::other("monitoring is off (Options::http_port is None)"),
            )
        })?;
        crate::cluster::http_get(port, path).map_err(|e| Error::io(format!("GET :{port}{path}"), e))
    }

    /// The JetStream store directory.
    pub fn store_dir(&self) -> PathBuf {
        self.home.path().join("jetstream")
    }

    /// The directory holding config, logs and store.
    pub fn dir(&self) -> &Path {
        self.home.path()
    }

    /// The current run's log file.
    pub fn log_path(&self) -> PathBuf {
        self.home.path().join(format!("server.{}.log", self.runs))
    }

    /// The options it was started with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The child's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the child process is still alive.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops gracefully (SIGTERM, so JetStream flushes), killing it if it has not exited
    /// within 10 s. The store is kept; [`NatsServer::restart`] brings it back.
    pub fn stop(&mut self) -> Result<(), Error> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if child
            .try_wait()
            .map_err(|e| Error::io("polling nats-server", e))?
            .is_some()
        {
            return Ok(());
        }
        // nats-server sends signals itself, which spares us a libc dependency.
        let signalled = Command::new(&self.binary)
            .arg("--signal")
            .arg(format!("term={}", child.id()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let deadline = Instant::now() + STOP_TIMEOUT;
        while signalled && Instant::now() < deadline {
            if child
                .try_wait()
                .map_err(|e| Error::io("polling nats-server", e))?
                .is_some()
            {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
        kill_child(&mut child)
    }

    /// Kills the process at once (SIGKILL), as a crash would. The store is kept.
    pub fn kill(&mut self) -> Result<(), Error> {
        match self.child.take() {
            Some(mut child) => kill_child(&mut child),
            None => Ok(()),
        }
    }

    /// Starts again on the same port and store (stopping first if it runs), so clients
    /// reconnect and JetStream data survives.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop()?;
        self.spawn()
    }

    /// Writes the config for this run, spawns the child and waits until it is ready.
    fn spawn(&mut self) -> Result<(), Error> {
        self.runs += 1;
        let dir = self.home.path().to_owned();
        let log = self.log_path();
        let store = self.store_dir();
        let include = match &self.options.include {
            Some(file) => Some(include_path(file, &dir)?),
            None => None,
        };
        let config = Rendered {
            include: include.as_deref(),
            server_name: self.options.server_name.as_deref(),
            port: (self.port != 0).then_some(self.port),
            // 0 is nats-server's "off": ask it for an ephemeral port with -1 instead.
            http_port: self
                .http_port
                .map(|p| if p == 0 { -1 } else { i32::from(p) }),
            log_file: &log,
            store_dir: &store,
            max_payload: self.options.max_payload,
            max_file_store: Some(
                self.options
                    .max_file_store
                    .unwrap_or(DEFAULT_MAX_FILE_STORE),
            ),
            cluster: self.options.cluster.as_ref(),
            extra: self.options.extra_config.as_deref(),
        }
        .text();
        let config_path = dir.join("nats.conf");
        std::fs::write(&config_path, config)
            .map_err(|e| Error::io(format!("writing {}", config_path.display()), e))?;
        // Errors before logging is set up (a bad config) go to stderr: keep them too.
        let stderr_path = dir.join(format!("server.{}.stderr", self.runs));
        let stderr = File::create(&stderr_path)
            .map_err(|e| Error::io(format!("creating {}", stderr_path.display()), e))?;
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&config_path)
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| Error::io(format!("spawning {}", self.binary.display()), e))?;
        self.child = Some(child);
        let (port, http_port) = self.wait_ready()?;
        self.port = port;
        if self.http_port.is_some() {
            self.http_port = http_port;
        }
        Ok(())
    }

    /// Polls the log until it names the client port and says "Server is ready", then
    /// connects to that port and expects an `INFO` line; returns the client port and the
    /// monitoring port the log names (if any). Kills the child on failure.
    fn wait_ready(&mut self) -> Result<(u16, Option<u16>), Error> {
        let timeout = self.options.ready_timeout.unwrap_or(READY_TIMEOUT);
        let deadline = Instant::now() + timeout;
        let log = self.log_path();
        let result = loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    break Err(format!("it exited with {status}"));
                }
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let (Some(port), true) = (client_port(&text), text.contains("Server is ready")) {
                match hello(port) {
                    Ok(()) => break Ok((port, monitor_port(&text))),
                    Err(e) if Instant::now() >= deadline => {
                        break Err(format!("port {port} does not answer: {e}"))
                    }
                    Err(_) => {}
                }
            }
            if Instant::now() >= deadline {
                break Err(format!("not ready after {timeout:?}"));
            }
            std::thread::sleep(POLL);
        };
        result.map_err(|reason| {
            if let Some(mut child) = self.child.take() {
                let _ = kill_child(&mut child);
            }
            Error::Startup {
                reason,
                log_tail: self.log_tail(),
                log,
            }
        })
    }

    /// The last lines of this run's log and stderr, for error messages.
    pub fn log_tail(&self) -> String {
        let mut text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let stderr = self
            .home
            .path()
            .join(format!("server.{}.stderr", self.runs));
        text.push_str(&std::fs::read_to_string(stderr).unwrap_or_default());
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // The temp dir is removed after this, by `Home`'s own drop.
        let _ = self.kill();
    }
}

/// How the generated config in `dir` names `file` in an `include`: nats-server reads an
/// include relative to the including file's directory, even when the path is absolute.
fn include_path(file: &Path, dir: &Path) -> Result<String, Error> {
    let canonical = |p: &Path| {
        p.canonicalize()
            .map_err(|e| Error::io(format!("finding {}", p.display()), e))
    };
    let (file, dir) = (canonical(file)?, canonical(dir)?);
    let common = file
        .components()
        .zip(dir.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut relative = PathBuf::new();
    for _ in dir.components().skip(common) {
        relative.push("..");
    }
    relative.extend(file.components().skip(common));
    Ok(relative.to_string_lossy().into_owned())
}

/// SIGKILL and reap.
fn kill_child(child: &mut Child) -> Result<(), Error> {
    // Fails only if it has already exited, which is what we want anyway.
    let _ = child.kill();
    child
        .wait()
        .map(drop)
        .map_err(|e| Error::io("waiting for nats-server", e))
}

/// The port in "Listening for client connections on 127.0.0.1:PORT".
fn client_port(log: &str) -> Option<u16> {
    const MARK: &str = "Listening for client connections on ";
    let rest = &log[log.find(MARK)? + MARK.len()..];
    let addr = rest.split_whitespace().next()?;
    addr.rsplit(':').next()?.parse().ok()
}

/// The port in "Starting http monitor on 127.0.0.1:PORT" (logged before the client
/// listener's line, so present once that one is).
fn monitor_port(log: &str) -> Option<u16> {
    const MARK: &str = "monitor on ";
    let rest = &log[log.find(MARK)? + MARK.len()..];
    let addr = rest.split_whitespace().next()?;
    addr.rsplit(':').next()?.parse().ok()
}

/// Connects and reads the server's greeting, which starts with `INFO`.
fn hello(port: u16) -> std::io::Result<()> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf)?;
    if &buf == b"INFO" {
        Ok(())
    } else {
        Err(std::io::Error::other("no INFO greeting"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_include_is_relative_to_the_generated_config() {
        let root = tempfile::tempdir().unwrap();
        let conf = root.path().join("deploy/secure/nats.conf");
        let home = root.path().join("tmp/server-1");
        std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(&conf, "").unwrap();
        let relative = include_path(&conf, &home).unwrap();
        assert_eq!(relative, "../../deploy/secure/nats.conf");
        assert_eq!(
            home.join(&relative).canonicalize().unwrap(),
            conf.canonicalize().unwrap()
        );
        assert!(include_path(&root.path().join("missing.conf"), &home).is_err());
    }

    #[test]
    fn finds_the_client_port_in_the_log() {
        let log = "[1] [INF] Listening for client connections on 127.0.0.1:40321\n\
                   [1] [INF] Server is ready\n";
        assert_eq!(client_port(log), Some(40321));
        assert_eq!(client_port("[1] [INF] Starting nats-server"), None);
    }

    #[test]
    fn finds_the_monitoring_port_in_the_log() {
        let log = "[1] [INF] Starting http monitor on 127.0.0.1:41234\n\
                   [1] [INF] Listening for client connections on 127.0.0.1:40321\n";
        assert_eq!(monitor_port(log), Some(41234));
        assert_eq!(monitor_port("[1] [INF] Server is ready"), None);
    }
}
