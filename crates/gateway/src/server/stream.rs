//! The client stream of the public listener: plain TCP, or TLS over it ([`super::tls`]). What
//! the transports that serve on the socket directly (SSE, WebSocket) write to and read from.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// What a client did on a stream it should only be reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerInput {
    /// It closed its side, or the connection failed.
    Gone,
    /// It sent this many bytes (read and dropped; 0 on a spurious wake-up).
    Sent(usize),
}

/// A client's byte stream as a transport that serves it directly sees it: readable,
/// writable, and able to say where the client is. [`ClientStream`] in production; an
/// in-memory pipe in unit tests.
pub(crate) trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The client's address, if the socket still knows it.
    fn peer_ip(&self) -> Option<std::net::IpAddr>;

    /// The link through which the topic's fan-out writes to this stream
    /// ([`herald_core::direct`]), when it can be written to directly (a shared plain TCP
    /// socket); `None` otherwise. The stream parks it before it writes anything itself.
    fn direct_link(&self) -> Option<std::sync::Arc<herald_core::DirectSub>> {
        None
    }

    /// Queues the rest of a frame the fan-out wrote in part, for the next flush. Only a
    /// stream that gave a [`Self::direct_link`] gets these.
    fn write_rest(&mut self, _rest: bytes::Bytes) {}
}

impl PeerStream for ClientStream {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        ClientStream::peer_ip(self)
    }
}

/// An in-memory pipe, as a client at 127.0.0.1 (unit tests drive transports over it).
impl PeerStream for tokio::io::DuplexStream {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        Some(std::net::IpAddr::from([127, 0, 0, 1]))
    }
}

/// A client connection on the public listener: plain TCP or TLS over it.
#[derive(Debug)]
pub(crate) enum ClientStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS (boxed: rustls' connection state is large, and plain connections are the common
    /// case).
    Tls(Box<TlsStream<TcpStream>>),
}

impl ClientStream {
    /// Whether the connection negotiated HTTP/2 by ALPN.
    pub(crate) fn is_h2(&self) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Tls(tls) => tls.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }

    /// The client's address, if the socket still knows it.
    pub(crate) fn peer_ip(&self) -> Option<std::net::IpAddr> {
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
    pub(crate) async fn peer_input(&mut self) -> PeerInput {
        match self {
            Self::Plain(tcp) => plain_peer_input(tcp).await,
            Self::Tls(tls) => match tls.read(&mut [0u8; 256]).await {
                Ok(0) | Err(_) => PeerInput::Gone,
                Ok(n) => PeerInput::Sent(n),
            },
        }
    }
}

/// [`ClientStream::peer_input`] on a plain TCP socket, which may be shared.
pub(crate) async fn plain_peer_input(tcp: &TcpStream) -> PeerInput {
    // `poll_read_ready` keeps one waker slot on the socket; `readable()` would join and leave
    // the socket's waiter list on every wait. It also takes from the task's cooperative
    // budget, so a stream of input yields to other tasks.
    if std::future::poll_fn(|cx| tcp.poll_read_ready(cx))
        .await
        .is_err()
    {
        return PeerInput::Gone;
    }
    // No buffer is held across the wait (it would be part of every idle stream's task):
    // declared after it.
    let mut scratch = [0u8; 1024];
    match tcp.try_read(&mut scratch) {
        Ok(0) => PeerInput::Gone,
        Ok(n) => PeerInput::Sent(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => PeerInput::Sent(0),
        Err(_) => PeerInput::Gone,
    }
}

/// Reads what a shared plain TCP socket holds into `buf` once it is readable, as tokio's own
/// `TcpStream::poll_read` does: a read that leaves part of the buffer empty shows the socket
/// drained (epoll, edge-triggered), so its readiness is cleared then, and the next read waits
/// for the next event instead of first failing with `WouldBlock` — one `recvfrom` per
/// message a client sends instead of two. (`try_read` alone clears readiness only on
/// `WouldBlock`; `try_io` clears it when its closure says `WouldBlock`, so the closure says
/// so after a partial read and hands the count out on the side.)
pub(crate) fn poll_read_shared(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    use std::io::Read as _;
    loop {
        std::task::ready!(tcp.poll_read_ready(cx))?;
        let unfilled = buf.initialize_unfilled();
        let len = unfilled.len();
        let mut drained = None;
        let read = tcp.try_io(tokio::io::Interest::READABLE, || {
            let n = (&*socket2::SockRef::from(tcp)).read(unfilled)?;
            if n > 0 && n < len {
                drained = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match (read, drained) {
            (Ok(n), _) | (Err(_), Some(n)) => {
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => {}
            (Err(e), None) => return Poll::Ready(Err(e)),
        }
    }
}

/// One `send(2)` on a shared socket for the topic's fan-out, without tokio's readiness
/// bookkeeping (a cache miss per socket per message): a `WouldBlock` here leaves tokio's
/// readiness stale, and the task's own write finds that out with one more `send` of its own.
pub(crate) fn direct_send(socket: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(socket).send(buf)
}

/// [`direct_send`] of several buffers in one `sendmsg(2)`: the messages ready for a
/// subscriber at once.
pub(crate) fn direct_send_vectored(
    socket: &TcpStream,
    bufs: &[io::IoSlice<'_>],
) -> io::Result<usize> {
    socket2::SockRef::from(socket).send_vectored(bufs)
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

/// Forwards every `AsyncWrite` method to the field `$inner`: for stream wrappers that change
/// only how reading works ([`super::head::Rewind`], the WebSocket frame counter).
macro_rules! forward_async_write {
    ($inner:ident) => {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::pin::Pin::new(&mut self.$inner).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::pin::Pin::new(&mut self.$inner).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            self.$inner.is_write_vectored()
        }

        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.$inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.$inner).poll_shutdown(cx)
        }
    };
}
pub(crate) use forward_async_write;
