//! TLS for tests of clients that call `https://` endpoints: a CA and a server certificate
//! for loopback made as a deployment makes them (by the shipped
//! `deploy/secure/gen-local.sh`), and an axum router served over TLS with them on a free
//! loopback port. One home for both: the LLM client's, the remote agents' and the push
//! notifications' tests use them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A CA (`ca.pem`) and a server certificate for `localhost`, `127.0.0.1` and `::1`
/// (`server-cert.pem`, `server-key.pem`) made in `dir` by `deploy/secure/gen-local.sh`;
/// returns `dir`. Two directories give two CAs that do not trust each other.
pub fn local_ca(dir: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/secure/gen-local.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg(dir)
        .output()
        .expect("running deploy/secure/gen-local.sh");
    assert!(
        out.status.success(),
        "gen-local.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

/// The TLS side of a server with a certificate and its key (PEM files).
pub fn acceptor(cert: &Path, key: &Path) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|c| c.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|e| panic!("reading {}: {e}", cert.display()));
    let key = PrivateKeyDer::from_pem_file(key)
        .unwrap_or_else(|e| panic!("reading {}: {e}", key.display()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("a certificate and its key");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// Serves `app` over TLS (HTTP/1.1) on `listener` until the returned task is aborted. A
/// client that refuses the certificate ends its connection at the handshake: `app` never
/// sees its request.
pub fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: axum::Router,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    })
}

/// Serves `app` over TLS with the server certificate of `ca_dir` (made by [`local_ca`])
/// on a free loopback port: its address, and the task to abort.
pub async fn serve_local(
    ca_dir: &Path,
    app: axum::Router,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let acceptor = acceptor(
        &ca_dir.join("server-cert.pem"),
        &ca_dir.join("server-key.pem"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding a loopback port");
    let addr = listener.local_addr().expect("the bound address");
    (addr, serve(listener, acceptor, app))
}
