//! TLS on the public listener (rustls): certificate loading, `SIGHUP` reloads, and the
//! stream type the accept loop serves, plain or encrypted.
//!
//! ALPN offers `h2` and `http/1.1`. An HTTP/1.1 connection goes through the same path as a
//! plain one (SSE and WebSocket served straight on the stream); an HTTP/2 connection is served
//! by hyper's HTTP/2 builder and the router, SSE included. Connections refused by a limit are
//! answered over an HTTP/1.1-only handshake, so the refusal is a readable status.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, anyhow};
use parking_lot::RwLock;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::TlsConfig;

/// The public listener's TLS settings; [`Tls::reload`] swaps the certificate in place.
pub struct Tls {
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
    pub fn load(files: &TlsConfig) -> anyhow::Result<Self> {
        let acceptors = Acceptors::load(files)?;
        Ok(Self {
            files: files.clone(),
            current: RwLock::new(acceptors),
        })
    }

    /// Reads the files again; new connections use the new certificate, open ones keep theirs.
    /// On error the certificate in use stays.
    pub fn reload(&self) -> anyhow::Result<()> {
        let acceptors = Acceptors::load(&self.files)?;
        *self.current.write() = acceptors;
        Ok(())
    }

    /// The TLS handshake on an accepted connection. `refusing` offers HTTP/1.1 only.
    pub async fn accept(&self, tcp: TcpStream, refusing: bool) -> io::Result<TlsStream<TcpStream>> {
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
        let chain = read_chain(cert)?;
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

fn read_chain(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow!("cannot read certificates from {}: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(anyhow!("no certificate in {}", path.display()));
    }
    Ok(chain)
}

/// What a client did on a stream it should only be reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerInput {
    /// It closed its side, or the connection failed.
    Gone,
    /// It sent this many bytes (read and dropped; 0 on a spurious wake-up).
    Sent(usize),
}

/// A client connection on the public listener: plain TCP or TLS over it.
#[derive(Debug)]
pub enum ClientStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS (boxed: rustls' connection state is large, and plain connections are the common
    /// case).
    Tls(Box<TlsStream<TcpStream>>),
}

impl ClientStream {
    /// Whether the connection negotiated HTTP/2 by ALPN.
    pub fn is_h2(&self) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Tls(tls) => tls.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }

    /// The client's address, if the socket still knows it.
    pub fn peer_ip(&self) -> Option<std::net::IpAddr> {
        let tcp = match self {
            Self::Plain(tcp) => tcp,
            Self::Tls(tls) => tls.get_ref().0,
        };
        tcp.peer_addr().ok().map(|a| a.ip())
    }

    /// Waits until the client sends something or closes its side, for a streaming response
    /// that expects nothing more from it. What it sent is read (one buffer's worth per call,
    /// so a client that keeps sending cannot hold the thread: the caller decides how much it
    /// tolerates) and dropped. Cancel-safe.
    pub async fn peer_input(&mut self) -> PeerInput {
        match self {
            Self::Plain(tcp) => {
                // `poll_read_ready` keeps one waker slot on the socket; `readable()` would
                // join and leave the socket's waiter list on every wait. It also takes from
                // the task's cooperative budget, so a stream of input yields to other tasks.
                if std::future::poll_fn(|cx| tcp.poll_read_ready(cx))
                    .await
                    .is_err()
                {
                    return PeerInput::Gone;
                }
                // No buffer is held across the wait (it would be part of every idle
                // stream's task): declared after it.
                let mut scratch = [0u8; 1024];
                match tcp.try_read(&mut scratch) {
                    Ok(0) => PeerInput::Gone,
                    Ok(n) => PeerInput::Sent(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => PeerInput::Sent(0),
                    Err(_) => PeerInput::Gone,
                }
            }
            Self::Tls(tls) => match tls.read(&mut [0u8; 256]).await {
                Ok(0) | Err(_) => PeerInput::Gone,
                Ok(n) => PeerInput::Sent(n),
            },
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
