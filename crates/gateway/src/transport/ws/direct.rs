//! Direct delivery on a WebSocket served over plain TCP ([`herald_core::direct`]): while a
//! single-topic connection's feed is idle, its topic's publisher writes each message's
//! whole frame (encoded once, [`herald_core::Message::ws_wire_frame`], or
//! [`herald_core::Message::ws_msgpack_wire_frame`] on a `herald.msgpack` connection) to the
//! socket itself.
//!
//! tungstenite writes on this socket too (replies, pings, close frames, and a pong while it
//! reads), so [`SharedSocket`] is a gate in front of it: before tungstenite's bytes go out,
//! the link is parked (the fan-out stops writing to it) and what the fan-out left
//! half-written is written first. The link goes direct again only once tungstenite has
//! flushed everything it wrote ([`FrameWriter::ready`]), so a frame of tungstenite's is never
//! cut by one of the fan-out's.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, Bytes};
use herald_core::batch::BatchFormat;
use herald_core::{DirectSub, DirectWriter, Message, Outbound};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::deflate::{self, Deflate};
use super::format::Format;
use crate::server::stream::PeerStream;
use crate::telemetry::metrics::TransportMetrics;

/// A plain TCP socket shared by a connection's task (through tungstenite) and its topic's
/// fan-out. The socket lives in the connection's link ([`DirectSub`]), which the feed
/// attaches to its topic while it has one.
pub(super) struct SharedSocket {
    link: Arc<DirectSub<FrameWriter>>,
    /// Written before tungstenite's next bytes: the rest of a frame the fan-out wrote in part.
    rest: Option<Bytes>,
}

impl SharedSocket {
    /// Shares `tcp`, which carries frames in `format`, compressed as `deflate` says
    /// (messages of at least `min_size` bytes; JSON connections only), several ready at once
    /// in one batch frame when `batch`.
    pub(super) fn new(
        tcp: TcpStream,
        format: Format,
        deflate: Option<Deflate>,
        min_size: usize,
        metrics: &'static TransportMetrics,
        batch: Option<BatchFormat>,
    ) -> Self {
        Self {
            link: Arc::new(DirectSub::new(FrameWriter {
                tcp,
                dirty: AtomicBool::new(false),
                format,
                deflate: deflate.filter(|_| format == Format::Json),
                min_size: u32::try_from(min_size).unwrap_or(u32::MAX),
                metrics,
                batch: batch.filter(|_| deflate.is_none()),
            })),
            rest: None,
        }
    }

    fn tcp(&self) -> &TcpStream {
        &self.link.writer().tcp
    }

    fn dirty(&self, dirty: bool) {
        self.link.writer().dirty.store(dirty, Ordering::Release);
    }

    /// Writes [`Self::rest`] out first.
    fn poll_rest(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(rest) = self.rest.as_mut() {
            let tcp = &self.link.writer().tcp;
            ready!(tcp.poll_write_ready(cx))?;
            match tcp.try_write(rest) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) if n == rest.len() => self.rest = None,
                Ok(n) => rest.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Stops the fan-out before this task writes: takes over what it left half-written.
    fn park(&mut self) {
        if let Some(rest) = self.link.park_for_write() {
            self.rest = Some(match self.rest.take() {
                None => rest,
                Some(before) => [before, rest].concat().into(),
            });
        }
    }
}

impl PeerStream for SharedSocket {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.tcp().peer_addr().ok().map(|a| a.ip())
    }

    fn direct_link(&self) -> Option<Arc<DirectSub>> {
        Some(self.link.clone())
    }

    fn write_rest(&mut self, rest: Bytes) {
        self.park();
        self.rest = Some(match self.rest.take() {
            None => rest,
            Some(before) => [before, rest].concat().into(),
        });
        // Out with tungstenite's next flush, before anything else.
        self.dirty(true);
    }
}

impl AsyncRead for SharedSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        crate::server::stream::poll_read_shared(self.tcp(), cx, buf)
    }
}

impl AsyncWrite for SharedSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Dirty before the fan-out is parked: it must not go direct again until flushed.
        this.dirty(true);
        this.park();
        ready!(this.poll_rest(cx))?;
        let tcp = this.tcp();
        loop {
            ready!(tcp.poll_write_ready(cx))?;
            match tcp.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_rest(cx))?;
        // tungstenite flushes its stream only once its own buffer is out: nothing of its is
        // half-written now.
        this.dirty(false);
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.park();
        ready!(this.poll_rest(cx))?;
        Poll::Ready(socket2::SockRef::from(this.tcp()).shutdown(std::net::Shutdown::Write))
    }
}

/// The socket, and what the topic's fan-out writes to it: the message's whole frame, in the
/// connection's format, compressed when the connection negotiated it.
pub(super) struct FrameWriter {
    tcp: TcpStream,
    /// tungstenite wrote and has not flushed yet: its frame may be half out.
    dirty: AtomicBool,
    format: Format,
    /// permessage-deflate, on a JSON connection that negotiated it.
    deflate: Option<Deflate>,
    /// `ws.deflate_min_size`.
    min_size: u32,
    metrics: &'static TransportMetrics,
    /// Batch frames, when the client asked (never with compression).
    batch: Option<BatchFormat>,
}

impl DirectWriter for FrameWriter {
    fn frame<'m>(&self, message: &'m Message, delta: bool) -> &'m Bytes {
        let sent = Outbound::new(message, delta);
        if let Some(deflate) = self.deflate
            && let Some(packed) = deflate::wire_frame(deflate, self.min_size as usize, sent)
        {
            return packed;
        }
        match self.format {
            Format::Json => sent.ws_wire_frame(),
            Format::Msgpack => sent.ws_msgpack_wire_frame(),
        }
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        crate::server::stream::direct_send(&self.tcp, buf)
    }

    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        crate::server::stream::direct_send_vectored(&self.tcp, bufs)
    }

    fn batch(&self) -> Option<BatchFormat> {
        self.batch
    }

    fn counter(&self) -> &'static dyn herald_core::DeliveryCounter {
        self.metrics
    }

    fn counted_bytes(&self, written: usize, message: &Message, delta: bool) -> usize {
        // The compressed payload when the frame went compressed (what crossed the wire), else
        // the payload's length, as the task's own path counts it.
        let sent = Outbound::new(message, delta);
        if self.deflate.is_some()
            && let Some(counted) = deflate::counted_bytes(written, sent)
        {
            return counted;
        }
        match self.format {
            Format::Json => sent.ws_frame().len(),
            Format::Msgpack => sent.ws_msgpack_frame().len(),
        }
    }

    fn ready(&self) -> bool {
        !self.dirty.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use herald_core::{Feed, LagPolicy, Payload, Topic, TopicConfig, TopicName};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tungstenite::protocol::frame::FrameHeader;
    use tungstenite::protocol::frame::coding::{Control, Data, OpCode};

    use crate::telemetry::metrics::{self, Transport};

    /// The frames in `wire`: (opcode, payload); panics on a malformed stream.
    fn frames(wire: &[u8]) -> Vec<(OpCode, Vec<u8>)> {
        let mut cursor = std::io::Cursor::new(wire);
        let mut out = Vec::new();
        while (cursor.position() as usize) < wire.len() {
            let (header, len) = FrameHeader::parse(&mut cursor)
                .unwrap()
                .expect("a whole header");
            assert!(header.is_final && header.mask.is_none(), "{header:?}");
            let start = cursor.position() as usize;
            let end = start + len as usize;
            assert!(end <= wire.len(), "a frame cut short");
            out.push((header.opcode, wire[start..end].to_vec()));
            cursor.set_position(end as u64);
        }
        out
    }

    #[test]
    fn the_wire_frame_is_what_tungstenite_reads() {
        for len in [10, 125, 126, 200, 65_535, 70_000] {
            let topic = Topic::new(TopicName::new("t").unwrap(), &TopicConfig::default());
            let m = topic.publish(
                None,
                Payload::from_value(&serde_json::json!("x".repeat(len))),
            );
            let got = frames(m.ws_wire_frame());
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].0, OpCode::Data(Data::Text));
            assert_eq!(&got[0].1[..], &m.ws_frame()[..]);
        }
    }

    /// A linked feed whose fan-out filled the socket and left a frame half-written; `between`
    /// does what the connection does before tungstenite writes a pong; the client must then
    /// read every frame whole, the pong last.
    async fn half_written_then_a_pong(between: impl FnOnce(&mut Feed, &mut SharedSocket)) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        socket2::SockRef::from(&server)
            .set_send_buffer_size(16 * 1024)
            .unwrap();
        let mut socket = SharedSocket::new(
            server,
            Format::Json,
            None,
            0,
            metrics::transport(Transport::Ws),
            None,
        );
        let config = TopicConfig {
            channel_capacity: 64,
            history_len: 64,
            ..TopicConfig::default()
        };
        let topic = Arc::new(Topic::new(TopicName::new("t").unwrap(), &config));
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe(topic.clone(), None).unwrap();
        assert!(feed.link(socket.direct_link().unwrap()));
        assert!(feed.try_next().is_none());
        assert!(feed.is_direct());
        // Messages go out until the socket takes part of one and the link is parked.
        let pad = "z".repeat(10_000);
        let mut published = 0;
        while feed.is_direct() {
            topic.publish(None, Payload::from_value(&serde_json::json!(pad)));
            published += 1;
            assert!(published < 1000, "the socket never filled");
        }
        let reader = tokio::spawn(async move {
            let mut wire = Vec::new();
            client.read_to_end(&mut wire).await.unwrap();
            wire
        });
        between(&mut feed, &mut socket);
        socket.write_all(&[0x8a, 0x00]).await.unwrap();
        socket.flush().await.unwrap();
        socket.shutdown().await.unwrap();
        drop(socket);
        drop(feed);
        let got = frames(&reader.await.unwrap());
        let (pong, texts) = got.split_last().unwrap();
        assert_eq!(pong.0, OpCode::Control(Control::Pong));
        assert!(!texts.is_empty());
        assert!(texts.iter().all(|(op, _)| *op == OpCode::Data(Data::Text)));
    }

    #[tokio::test]
    async fn the_task_s_own_bytes_follow_the_rest_of_a_frame_the_fan_out_left_half_written() {
        // tungstenite writes a pong before the feed has looked.
        half_written_then_a_pong(|_, _| {}).await;
    }

    #[tokio::test]
    async fn a_reply_after_an_unsubscribe_follows_the_rest_the_feed_took_over() {
        // The client unsubscribes before the feed has looked: the feed unlinks and takes the
        // half-written rest over; the connection queues it ahead of its reply
        // (`Session::rest_first`).
        half_written_then_a_pong(|feed, socket| {
            feed.unsubscribe("t");
            if let Some(rest) = feed.park() {
                socket.write_rest(rest);
            }
        })
        .await;
    }
}
