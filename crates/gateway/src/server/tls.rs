//! TLS on the public listener (rustls): certificate loading, `SIGHUP` reloads, and the
//! stream type the accept loop serves, plain or encrypted.
//!
//! ALPN offers `h2` and `http/1.1`. An HTTP/1.1 connection goes through the same path as a
//! plain one (SSE and WebSocket served straight on the stream); an HTTP/2 connection is served
//! by hyper's HTTP/2 builder and the router, SSE included. Connections refused by a limit are
//! answered over an HTTP/1.1-only handshake, so the refusal is a readable status.

use std::io;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use parking_lot::RwLock;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::TlsConfig;

/// The public listener's TLS settings; [`Tls::reload`] swaps the certificate in place.
pub(crate) struct Tls {
    files: TlsConfig,
    current: RwLock<Acceptors>,
}

#[derive(Clone)]
struct Acceptors {
    /// `h2` and `http/1.1`.
    serve: TlsAcceptor,
    /// `http/1.1` only: for answering a refused connection with a plain status.
    refuse: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Reads the certificate chain and key named in `files`.
    pub(crate) fn load(files: &TlsConfig) -> anyhow::Result<Self> {
        let acceptors = Acceptors::load(files)?;
        Ok(Self {
            files: files.clone(),
            current: RwLock::new(acceptors),
        })
    }

    /// Reads the files again; new connections use the new certificate, open ones keep theirs.
    /// On error the certificate in use stays.
    pub(crate) fn reload(&self) -> anyhow::Result<()> {
        let acceptors = Acceptors::load(&self.files)?;
        *self.current.write() = acceptors;
        Ok(())
    }

    /// The TLS handshake on an accepted connection. `refusing` offers HTTP/1.1 only.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
        refusing: bool,
    ) -> io::Result<TlsStream<TcpStream>> {
        let acceptor = {
            let current = self.current.read();
            if refusing {
                current.refuse.clone()
            } else {
                current.serve.clone()
            }
        };
        acceptor.accept(tcp).await
    }
}

impl Acceptors {
    fn load(files: &TlsConfig) -> anyhow::Result<Self> {
        let (Some(cert), Some(key)) = (&files.cert_file, &files.key_file) else {
            return Err(anyhow!(
                "tls.cert_file and tls.key_file must be set together"
            ));
        };
        let chain = read_certificates(cert)?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| anyhow!("cannot read a private key from {}: {e}", key.display()))?;
        let build = |alpn: &[&[u8]]| -> anyhow::Result<TlsAcceptor> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .context("TLS protocol versions")?
                .with_no_client_auth()
                .with_single_cert(chain.clone(), key.clone_key())
                .context("the certificate and key do not make a usable pair")?;
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(TlsAcceptor::from(Arc::new(config)))
        };
        Ok(Self {
            serve: build(&[b"h2", b"http/1.1"])?,
            refuse: build(&[b"http/1.1"])?,
        })
    }
}

/// The certificates of a PEM file (a chain, or CA certificates to trust); at least one.
pub(crate) fn read_certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow!("cannot read certificates from {}: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(anyhow!("no certificate in {}", path.display()));
    }
    Ok(chain)
}
