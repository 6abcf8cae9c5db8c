//! Where an SSE stream's chunks go ([`Sink`]): the client's socket, a hyper response body
//! ([`BodySink`]), or the socket shared with the topic's fan-out ([`SharedTcp`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use herald_core::{DirectSub, DirectWriter, Message};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::server::stream::{ClientStream, PeerInput, plain_peer_input};
use crate::telemetry::metrics::TransportMetrics;

/// Where a stream's chunks are written: the client's socket (the raw path) or a hyper
/// response body ([`BodySink`]).
pub(crate) trait Sink {
    /// Writes `chunk` whole; waits while the client does not take it.
    fn write(&mut self, chunk: Bytes) -> impl Future<Output = io::Result<()>> + Send;
    /// Waits until the client sends something or goes away. Cancel-safe.
    fn peer_input(&mut self) -> impl Future<Output = PeerInput> + Send;
    /// The stream ended because the client is too slow: make it see an error, not an end.
    fn abort(&mut self) {}
}

impl Sink for ClientStream {
    async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        // The flush matters for TLS only: rustls may hold encrypted records the socket had no
        // room for.
        self.write_all(&chunk).await?;
        self.flush().await
    }

    fn peer_input(&mut self) -> impl Future<Output = PeerInput> + Send {
        ClientStream::peer_input(self)
    }
}

/// The writing end of a hyper response body: a channel of one chunk.
pub(crate) struct BodySink {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    aborted: Arc<AtomicBool>,
}

/// The body end of a [`BodySink`].
pub(crate) struct SinkBody {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    aborted: Arc<AtomicBool>,
}

impl BodySink {
    pub(super) fn new() -> (Self, SinkBody) {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let aborted = Arc::new(AtomicBool::new(false));
        (
            Self {
                tx,
                aborted: aborted.clone(),
            },
            SinkBody { rx, aborted },
        )
    }
}

impl Sink for BodySink {
    async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        self.tx
            .send(chunk)
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }

    async fn peer_input(&mut self) -> PeerInput {
        // hyper drops the body when the client goes away (a closed connection, an HTTP/2
        // reset); what the client sends is hyper's to read.
        self.tx.closed().await;
        PeerInput::Gone
    }

    fn abort(&mut self) {
        self.aborted.store(true, Ordering::Release);
    }
}

impl futures_util::Stream for SinkBody {
    type Item = io::Result<Bytes>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            std::task::Poll::Ready(None) if self.aborted.swap(false, Ordering::AcqRel) => {
                // An error rather than the end: hyper resets the stream (HTTP/2) or closes the
                // connection without the final chunk (HTTP/1.1), so the client knows.
                std::task::Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "slow consumer",
                ))))
            }
            other => other.map(|chunk| chunk.map(Ok)),
        }
    }
}

/// A plain TCP socket shared by a stream's task and its topic's fan-out, which writes to it
/// while the stream is idle ([`herald_core::direct`]); the task writes only after
/// [`herald_core::Feed::park`], so the two never write at once. The socket lives in the link
/// itself ([`DirectSub`]): the fan-out reaches it with no pointer of its own to follow.
pub(super) struct SharedTcp(pub(super) Arc<DirectSub<FrameWriter>>);

impl Sink for SharedTcp {
    async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        let socket = &self.0.writer().socket;
        let mut buf = &chunk[..];
        while !buf.is_empty() {
            std::future::poll_fn(|cx| socket.poll_write_ready(cx)).await?;
            match socket.try_write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn peer_input(&mut self) -> impl Future<Output = PeerInput> + Send {
        plain_peer_input(&self.0.writer().socket)
    }
}

/// What the topic's fan-out writes to a directly served stream: the message's shared frame.
pub(super) struct FrameWriter {
    pub(super) socket: TcpStream,
    pub(super) json: bool,
    pub(super) metrics: &'static TransportMetrics,
}

impl DirectWriter for FrameWriter {
    fn frame<'m>(&self, message: &'m Message, delta: bool) -> &'m Bytes {
        if self.json {
            herald_core::Outbound::new(message, delta).sse_json_frame()
        } else {
            message.sse_frame()
        }
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        crate::server::stream::direct_send(&self.socket, buf)
    }

    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        crate::server::stream::direct_send_vectored(&self.socket, bufs)
    }

    fn counter(&self) -> &'static dyn herald_core::DeliveryCounter {
        self.metrics
    }
}
