//! A write timeout for connections served by hyper (HTTP/1.1 through the router, HTTP/2):
//! a client that stops reading makes writes wait; past the timeout the connection fails
//! with `TimedOut`, hyper ends it, and it is counted as a slow consumer — the policy the
//! directly served SSE and WebSocket streams apply to each of their writes.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::telemetry::metrics;

/// `inner`, whose writes fail once one has waited longer than `timeout`.
#[derive(Debug)]
pub(crate) struct Stalled<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write or flush is waiting; boxed, and made on the first wait only.
    waiting: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl<S> Stalled<S> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            waiting: None,
            armed: false,
        }
    }

    /// Called when a write made no progress: ready with an error once it has waited too long.
    fn check(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let deadline = Instant::now() + self.timeout;
        let sleep = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.armed {
            sleep.as_mut().reset(deadline);
            self.armed = true;
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                metrics::slow_consumer("disconnected");
                Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client did not read within the write timeout",
                ))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(r) => {
                self.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => self.check(cx).map(Err),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalled<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    #[tokio::test]
    async fn a_write_that_waits_too_long_fails() {
        let (a, _b) = tokio::io::duplex(16);
        let mut s = Stalled::new(a, Duration::from_millis(200));
        s.write_all(&[0; 16]).await.unwrap();
        let started = Instant::now();
        let err = s.write_all(&[0; 1]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_reader_keeping_up_is_never_timed_out() {
        let (a, mut b) = tokio::io::duplex(16);
        let mut s = Stalled::new(a, Duration::from_millis(500));
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let mut buf = [0u8; 16];
                let n = tokio::io::AsyncReadExt::read(&mut b, &mut buf)
                    .await
                    .unwrap();
                sink.extend_from_slice(&buf[..n]);
            }
            sink.len()
        });
        for _ in 0..8 {
            s.write_all(&[1; 16]).await.unwrap();
        }
        assert!(reader.await.unwrap() >= 7 * 16);
    }
}
