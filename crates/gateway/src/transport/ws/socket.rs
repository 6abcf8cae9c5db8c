//! A connection's WebSocket as a `Stream` of messages and a `Sink` for them: tungstenite's
//! protocol ([`WebSocketContext`]: framing, fragments, control frames, the close handshake,
//! its size limits) over an async stream, polled by the connection's one task.
//!
//! Why not `tokio_tungstenite::WebSocketStream`: it lets a reader and a writer in different
//! tasks share a socket, so every poll registers the caller's waker behind two proxy wakers
//! (an `AtomicWaker` each, and an `Arc`'s count per poll) that forward to both. A Herald
//! connection reads and writes from one task, and perf of the echo workload (W4) put those
//! proxies at 4.5 % of the server's CPU. Here the context is passed straight through: a read
//! or write that would block registers the task's waker with the stream itself. The
//! semantics of the stream and the sink are `WebSocketStream`'s (a fused end after the close
//! or an error, `WouldBlock` on a send queued and flushed on the next `poll_ready`).

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tungstenite::protocol::{Role, WebSocketConfig, WebSocketContext};
use tungstenite::{Error, Message};

use super::inbound::Inbound;

/// A connection's WebSocket: its frames counted by [`Inbound`] on the client's stream.
pub(super) type Socket<S> = WebSocket<Inbound<S>>;

/// A WebSocket over `S`, after the handshake.
#[derive(Debug)]
pub(super) struct WebSocket<S> {
    stream: S,
    context: WebSocketContext,
    /// The stream ended (the close handshake, or an error returned once): fused.
    ended: bool,
    /// A close was started and is still flushing.
    closing: bool,
    /// False after a send that could not be written at once: flush before the next.
    ready: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocket<S> {
    /// Speaks the protocol as `role` on `stream`, whose handshake is done.
    pub(super) fn new(stream: S, role: Role, config: Option<WebSocketConfig>) -> Self {
        Self {
            stream,
            context: WebSocketContext::new(role, config),
            ended: false,
            closing: false,
            ready: true,
        }
    }

    /// The stream underneath.
    pub(super) fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The stream underneath.
    pub(super) fn get_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// Runs `f` on the protocol with `cx` as the stream's context (`None`: a send, which
    /// `Sink::start_send` makes without one; what blocks there is flushed by the next
    /// `poll_ready` or `poll_flush`, with the task's context).
    fn with<R>(
        &mut self,
        cx: Option<&mut Context<'_>>,
        f: impl FnOnce(&mut WebSocketContext, &mut Io<'_, '_, S>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut noop = Context::from_waker(Waker::noop());
        let mut io = Io {
            stream: &mut self.stream,
            cx: cx.unwrap_or(&mut noop),
        };
        f(&mut self.context, &mut io)
    }
}

/// `Pending` for a `WouldBlock` (the stream has registered the task's waker).
fn pending_on_block<T>(r: Result<T, Error>) -> Poll<Result<T, Error>> {
    match r {
        Err(Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        r => Poll::Ready(r),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Stream for WebSocket<S> {
    type Item = Result<Message, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match std::task::ready!(pending_on_block(self.with(Some(cx), |c, io| c.read(io)))) {
            Ok(message) => Poll::Ready(Some(Ok(message))),
            Err(e) => {
                self.ended = true;
                if matches!(e, Error::AlreadyClosed | Error::ConnectionClosed) {
                    Poll::Ready(None)
                } else {
                    Poll::Ready(Some(Err(e)))
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Sink<Message> for WebSocket<S> {
    type Error = Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if self.ready {
            return Poll::Ready(Ok(()));
        }
        let flushed = std::task::ready!(pending_on_block(self.with(Some(cx), |c, io| c.flush(io))));
        self.ready = true;
        Poll::Ready(flushed)
    }

    /// Queues `message` (writing what the stream takes now). Without a context: a send
    /// that blocks here is woken for only by the `poll_ready` or `poll_flush` that must
    /// follow it (`SinkExt::send` does both; a bare `feed` left waiting in a `select!`
    /// would not be woken when the socket drains).
    fn start_send(mut self: Pin<&mut Self>, message: Message) -> Result<(), Error> {
        match self.with(None, |c, io| c.write(io, message)) {
            // Queued: `poll_ready` flushes it.
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                self.ready = false;
                Ok(())
            }
            r => {
                self.ready = true;
                r
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let flushed = std::task::ready!(pending_on_block(self.with(Some(cx), |c, io| c.flush(io))));
        self.ready = true;
        Poll::Ready(match flushed {
            // The close handshake just finished: flushed, not an error.
            Err(Error::ConnectionClosed) => Ok(()),
            other => other,
        })
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.ready = true;
        let closing = self.closing;
        let r = self.with(Some(cx), |c, io| {
            if closing {
                c.flush(io)
            } else {
                c.close(io, None)
            }
        });
        match r {
            Ok(()) | Err(Error::ConnectionClosed) => Poll::Ready(Ok(())),
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                self.closing = true;
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// The async stream as tungstenite's blocking `Read + Write`, for one call: `Pending` is
/// `WouldBlock`, the task's waker registered by the stream.
struct Io<'a, 'b, S> {
    stream: &'a mut S,
    cx: &'a mut Context<'b>,
}

impl<S: AsyncRead + Unpin> Read for Io<'_, '_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut *self.stream).poll_read(self.cx, &mut buf) {
            Poll::Ready(Ok(())) => Ok(buf.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncWrite + Unpin> Write for Io<'_, '_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.stream).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.stream).poll_flush(self.cx) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio::io::duplex;
    use tokio_tungstenite::WebSocketStream;

    use super::*;

    /// A send that does not fit the stream blocks inside `start_send` (no context there) and
    /// completes once the client reads: the flush that follows registered the task's waker.
    #[tokio::test]
    async fn a_send_blocked_on_a_full_stream_completes_when_the_client_reads() {
        let (server, client) = duplex(256);
        let config = WebSocketConfig::default().write_buffer_size(0);
        let mut server = WebSocket::new(server, Role::Server, Some(config));
        let mut client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        let big = "x".repeat(64 * 1024);
        let sending = tokio::spawn(async move {
            server.send(Message::text(big.clone())).await.unwrap();
            server
        });
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), client.next())
            .await
            .expect("the blocked send was never finished")
            .unwrap()
            .unwrap();
        assert_eq!(got.into_text().unwrap().len(), 64 * 1024);
        let mut server = sending.await.unwrap();
        // The stream still works both ways after the blocked send.
        client.send(Message::text("back")).await.unwrap();
        assert_eq!(server.next().await.unwrap().unwrap(), Message::text("back"));
    }

    /// A read that finds nothing is woken when the client's frame arrives; a ping is answered
    /// while reading; the client's close ends the stream (fused).
    #[tokio::test]
    async fn a_pending_read_is_woken_and_the_close_ends_the_stream() {
        let (server, client) = duplex(1024);
        let mut server = WebSocket::new(server, Role::Server, None);
        let mut client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        let reading = tokio::spawn(async move {
            let first = server.next().await.unwrap().unwrap();
            let ping = server.next().await.unwrap().unwrap();
            let close = server.next().await.unwrap().unwrap();
            server.flush().await.unwrap();
            let end = server.next().await;
            (
                first,
                ping,
                close,
                end.is_none(),
                server.next().await.is_none(),
            )
        });
        tokio::task::yield_now().await;
        client.send(Message::text("hello")).await.unwrap();
        client.send(Message::Ping("p".into())).await.unwrap();
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Pong("p".into())
        );
        client.close(None).await.unwrap();
        let (first, ping, close, ended, fused) = reading.await.unwrap();
        assert_eq!(first, Message::text("hello"));
        assert_eq!(ping, Message::Ping("p".into()));
        assert!(matches!(close, Message::Close(_)));
        assert!(ended && fused);
    }
}
