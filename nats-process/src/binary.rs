//! Finding (and if needed installing) a nats-server binary of version 2.11 or newer.
//!
//! Search order: `$NATS_SERVER_BIN`; `<repo>/.nats/bin/nats-server` where `<repo>` is found
//! upward from the running executable, from this crate's source directory (build time) and
//! from the current directory; `nats-server` on `PATH`. When none is usable and the repo's
//! `deploy/install-nats.sh` is found, it is run once, under a lock file so that parallel
//! test processes do not race, and the search is repeated.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::Error;

/// The oldest nats-server we accept: per-key TTLs (`limit_markers`) arrived in 2.11.
pub const MIN_VERSION: Version = Version(2, 11, 0);

/// Where the install script puts the binary, relative to the repo root.
const LOCAL_BIN: &str = ".nats/bin/nats-server";
/// The install script, relative to the repo root.
const INSTALL_SCRIPT: &str = "deploy/install-nats.sh";

/// A nats-server version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// Parses the output of `nats-server --version` (`nats-server: v2.15.1`) or a bare
    /// `2.15.1`; pre-release suffixes (`-RC.1`) are ignored.
    pub fn parse(text: &str) -> Option<Version> {
        let word = text.split_whitespace().last()?;
        let word = word.trim_start_matches('v');
        let mut parts = word.split(['.', '-', '+']).map(|p| p.parse::<u32>());
        let major = parts.next()?.ok()?;
        let minor = parts.next()?.ok()?;
        let patch = parts.next().and_then(Result::ok).unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// Runs `path --version` and parses the answer.
pub fn version_of(path: &Path) -> Result<Version, Error> {
    let unusable = |reason: String| Error::Unusable {
        path: path.to_owned(),
        reason,
    };
    let out = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| unusable(format!("cannot run it: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Version::parse(&text).ok_or_else(|| unusable(format!("unreadable version {text:?}")))
}

/// Finds a usable nats-server (installing it if needed); the answer is cached for the
/// life of the process.
pub fn find_binary() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| locate().map_err(|e| e.to_string()))
        .clone()
        .map_err(Error::Unavailable)
}

/// The uncached search behind [`find_binary`].
fn locate() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("NATS_SERVER_BIN") {
        let path = PathBuf::from(path);
        check(&path)?;
        return Ok(path);
    }
    let roots = repo_roots();
    let mut searched = Vec::new();
    if let Some(path) = search(&roots, &mut searched) {
        return Ok(path);
    }
    if let Some(root) = roots.iter().find(|r| r.join(INSTALL_SCRIPT).is_file()) {
        install(root)?;
        if let Some(path) = search(&roots, &mut searched) {
            return Ok(path);
        }
    }
    Err(Error::NotFound {
        searched: searched.join(", "),
    })
}

/// Looks in each root's `.nats/bin`, then on `PATH`; records where it looked.
fn search(roots: &[PathBuf], searched: &mut Vec<String>) -> Option<PathBuf> {
    let local = roots.iter().map(|r| r.join(LOCAL_BIN));
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("nats-server"));
    for candidate in local.chain(on_path) {
        if candidate.is_file() {
            if check(&candidate).is_ok() {
                return Some(candidate);
            }
            searched.push(format!(
                "{} (older than {MIN_VERSION})",
                candidate.display()
            ));
        }
    }
    searched.push(format!(
        "{} under {:?}, PATH",
        LOCAL_BIN,
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
    ));
    None
}

/// Accepts a binary only if its version is at least [`MIN_VERSION`].
fn check(path: &Path) -> Result<(), Error> {
    let version = version_of(path)?;
    if version < MIN_VERSION {
        return Err(Error::Unusable {
            path: path.to_owned(),
            reason: format!("version {version} is older than {MIN_VERSION}"),
        });
    }
    Ok(())
}

/// Directories that look like this repository's root (they hold `deploy/install-nats.sh`
/// or `.nats/bin/nats-server`), found upward from the executable, this crate's source
/// directory and the current directory; without duplicates, in that order.
pub fn repo_roots() -> Vec<PathBuf> {
    let starts = [
        std::env::current_exe().ok(),
        option_env!("CARGO_MANIFEST_DIR").map(PathBuf::from),
        std::env::current_dir().ok(),
    ];
    let mut roots: Vec<PathBuf> = Vec::new();
    for start in starts.into_iter().flatten() {
        let found = start
            .ancestors()
            .find(|d| d.join(INSTALL_SCRIPT).is_file() || d.join(LOCAL_BIN).is_file());
        if let Some(dir) = found {
            if !roots.iter().any(|r| r == dir) {
                roots.push(dir.to_owned());
            }
        }
    }
    roots
}

/// Runs the install script under `<root>/.nats/install.lock`. Whoever gets the lock second
/// finds the binary installed, and the script is then a fast no-op.
fn install(root: &Path) -> Result<(), Error> {
    let script = root.join(INSTALL_SCRIPT);
    let failed = |reason: String| Error::Install {
        script: script.clone(),
        reason,
    };
    let dir = root.join(".nats");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    // Not the script's own `install.lock`: both use flock, and we would deadlock on it.
    let lock_path = dir.join("process-install.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| Error::io(format!("creating {}", lock_path.display()), e))?;
    lock.lock()
        .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;
    eprintln!(
        "nats-process: nats-server not found, running {}",
        script.display()
    );
    // The script's output goes to our stderr: a test's stdout stays its own.
    let status = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| failed(format!("cannot run bash: {e}")))?;
    drop(lock);
    if status.success() {
        Ok(())
    } else {
        Err(failed(status.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(
            Version::parse("nats-server: v2.15.1\n"),
            Some(Version(2, 15, 1))
        );
        assert_eq!(Version::parse("v2.11.0-RC.2"), Some(Version(2, 11, 0)));
        assert_eq!(Version::parse("2.10"), Some(Version(2, 10, 0)));
        assert_eq!(Version::parse("nonsense"), None);
        assert!(Version(2, 10, 26) < MIN_VERSION);
        assert!(Version(2, 15, 1) >= MIN_VERSION);
    }
}
