//! TLS of the workspace's outgoing HTTP clients: the process's crypto provider, installed
//! once before any client is built; the roots an `https://` endpoint's certificate must
//! chain to (the system's, or only those of a CA file the deployment names); and how a
//! refused certificate is told from a network fault. One home for all three, because four
//! clients use them: the LLM client, the remote agents' client, the A2A door's push
//! notifications and the telemetry exporters (the provider only).
//!
//! reqwest is built with rustls but without a provider of its own (`rustls-no-provider`),
//! because the only one in the build, ring, is async-nats' choice, and a second (aws-lc)
//! would be a large C build for nothing. reqwest then panics when a client is built
//! before a process-wide provider is installed: the LLM client's and the OTLP exporters'
//! alike, since Cargo unifies features. So every place of this workspace that builds one
//! calls [`install`] first (or [`client_builder`], which does), and no binary can forget it.

use std::path::{Path, PathBuf};

/// Installs ring as the process's rustls provider, unless one is installed already.
/// Cheap and idempotent: call it before building any `reqwest::Client`.
pub fn install() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another thread's install leaves that one in place: as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The certificates of a CA file (PEM, one or more), read once: an `https://` endpoint's
/// certificate must then chain to one of these, and to none of the system's roots.
#[derive(Debug, Clone)]
pub struct CaFile {
    path: PathBuf,
    certs: Vec<reqwest::Certificate>,
}

impl CaFile {
    /// Reads `path`; an unreadable file, or one without a PEM certificate, is refused
    /// with its path named.
    pub fn read(path: &Path) -> Result<CaFile, String> {
        let pem = std::fs::read(path).map_err(|e| {
            format!(
                "the CA file {} cannot be read: {}",
                path.display(),
                e.kind()
            )
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .ok()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| format!("the CA file {} holds no PEM certificate", path.display()))?;
        Ok(CaFile {
            path: path.to_owned(),
            certs,
        })
    }

    /// Where it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A client builder with the provider installed and, with `ca`, only its roots trusted
/// (else the system's). The caller adds its own limits (time, redirects, pinning).
pub fn client_builder(ca: Option<&CaFile>) -> reqwest::ClientBuilder {
    install();
    let builder = reqwest::Client::builder();
    match ca {
        Some(ca) => builder.tls_certs_only(ca.certs.iter().cloned()),
        None => builder,
    }
}

/// An error with its causes (`error sending request: ...: invalid peer certificate:
/// UnknownIssuer`): reqwest's own text names none, and a refused certificate is only
/// in the causes.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// Whether a request failed because rustls refused the server's certificate (not from a
/// trusted CA, for another name, expired): retrying cannot help until a configuration
/// changes. The rustls error sits in the causes, possibly inside an I/O error, or only
/// in their text.
pub fn refused_certificate(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        let tls = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if matches!(
            tls,
            Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
        ) {
            return true;
        }
        // Some layers box the I/O error away from `source()`; rustls's own words remain.
        if c.to_string().contains("invalid peer certificate") {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_a_certificate_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("ca-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = CaFile::read(&empty).unwrap_err();
        assert!(
            e.contains("empty.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = CaFile::read(&dir.join("missing.pem")).unwrap_err();
        assert!(
            e.contains("missing.pem") && e.contains("cannot be read"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
