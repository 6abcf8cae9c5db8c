//! The client's side of a WebSocket as bytes arrive: every frame is counted against the
//! connection's inbound rate and as activity, and fragments per message are capped, before
//! tungstenite reassembles anything.
//!
//! Why here and not on the messages tungstenite yields: tungstenite reads frames in a loop
//! and hands over a message only when its last fragment is in, so a text frame with FIN=0
//! followed by endless empty continuation frames never reaches the connection as a message
//! (measured: ~15 million frames/s accepted, no limit applied, the connection closed as idle
//! while it was sending). Scanning frame headers costs a few comparisons per frame and no
//! copy; the payload bytes are skipped, not looked at.
//!
//! On a connection that negotiated permessage-deflate (`super::deflate`) the first frame of
//! a compressed message has RSV1 set, which tungstenite refuses: the bit is cleared here, the
//! frame marked binary (its bytes are not UTF-8 until inflated), and how each message was sent
//! remembered in order for the connection to take ([`Inbound::next_message`]).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::limits::{Rate, TokenBucket};

/// Most frames one message may be split into. Browsers and client libraries send a message
/// as one frame, or a few for very large ones.
pub(crate) const MAX_FRAGMENTS: u32 = 64;

/// Most messages whose frames were read and that tungstenite has not yielded yet, on a
/// compressed connection. tungstenite reads `ws.read_buffer_size` bytes at a time and yields
/// every message it holds before it reads again, so a client stays far below this unless it
/// sends thousands of empty messages in one read; past it: [`Violation::Backlog`].
pub(crate) const MAX_PENDING: usize = 4096;

/// How the client sent a message (permessage-deflate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Uncompressed: tungstenite's message is the client's.
    Plain,
    /// A compressed text message: tungstenite yields it as binary, to inflate.
    DeflatedText,
    /// A compressed binary message.
    DeflatedBinary,
}

/// Why the client's frames were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Violation {
    /// Over the inbound frame rate (`ws.inbound_rate`, `ws.inbound_burst`).
    Rate,
    /// A message split into more than [`MAX_FRAGMENTS`] frames.
    Fragments,
    /// More than [`MAX_PENDING`] messages read ahead and not yet handled (a compressed
    /// connection remembers how each was sent).
    Backlog,
}

impl Violation {
    /// The close reason the client sees (with close code 1008).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Rate => "too many messages",
            Self::Fragments => "too many fragments in one message",
            Self::Backlog => "too many messages waiting to be read",
        }
    }

    /// The `reason` label of `herald_client_errors_total`.
    pub(crate) fn metric(self) -> &'static str {
        match self {
            Self::Rate => "inbound_rate",
            Self::Fragments => "fragments",
            Self::Backlog => "inbound_backlog",
        }
    }
}

/// A client stream whose incoming WebSocket frames are counted.
#[derive(Debug)]
pub(crate) struct Inbound<S> {
    inner: S,
    /// Bytes of the frame header being read (2 to 14).
    header: [u8; 14],
    have: u8,
    /// Payload bytes of the current frame still to pass.
    skip: u64,
    /// Frames of the message being reassembled (0 between messages).
    fragments: u32,
    /// The inbound rate, when `limited` (an `Option<Rate>` would take 8 bytes more per
    /// connection: its tag padded to the floats' alignment, where a `bool` fills a gap).
    rate: Rate,
    limited: bool,
    /// The inbound rate's tokens, and when the last frame header arrived (its refill time):
    /// inline, not boxed — a box here was a cache miss per frame on a busy connection (3 %
    /// of the server's CPU in W4) — and no larger than the box and the time were.
    bucket: TokenBucket,
    violation: Option<Violation>,
    /// With permessage-deflate: how each message read and not yet taken was sent, oldest
    /// first (boxed: most connections do not compress).
    #[allow(clippy::box_collection)] // 8 bytes inline rather than a `VecDeque`'s 32
    sent: Option<Box<VecDeque<Sent>>>,
}

impl<S> Inbound<S> {
    /// Counts the frames read from `inner` against `rate` (`None`: no rate limit).
    pub(crate) fn new(inner: S, rate: Option<Rate>) -> Self {
        let rate_or_none = rate.unwrap_or(Rate {
            per_second: 0.0,
            burst: 0.0,
        });
        Self {
            inner,
            header: [0; 14],
            have: 0,
            skip: 0,
            fragments: 0,
            rate: rate_or_none,
            limited: rate.is_some(),
            // The clock the rest of the connection reads (tokio's, which a test may pause).
            bucket: rate_or_none.bucket_at(Instant::now().into_std()),
            violation: None,
            sent: None,
        }
    }

    /// Takes compressed messages from the client (permessage-deflate was negotiated).
    pub(crate) fn expect_deflate(&mut self) {
        self.sent = Some(Box::default());
    }

    /// How the next message tungstenite yields was sent (call once per text or binary
    /// message, in order).
    pub(crate) fn next_message(&mut self) -> Sent {
        let Some(queue) = self.sent.as_mut() else {
            return Sent::Plain;
        };
        let sent = queue.pop_front().unwrap_or(Sent::Plain);
        // What a burst grew is given back once it is read.
        if queue.is_empty() && queue.capacity() > 64 {
            queue.shrink_to(8);
        }
        sent
    }

    /// The stream itself, for a lingering close that drains it without parsing.
    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The stream itself.
    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Why reading stopped, if the client broke a limit.
    pub(crate) fn violation(&self) -> Option<Violation> {
        self.violation
    }

    /// When the client's last frame began to arrive.
    pub(crate) fn last_frame(&self) -> Instant {
        Instant::from_std(self.bucket.refilled())
    }

    /// Passes over `bytes`, counting each frame header completed in them (and, with
    /// permessage-deflate, rewriting the first byte of a compressed message's first frame).
    fn scan(&mut self, bytes: &mut [u8]) -> Result<(), Violation> {
        let mut at = 0;
        while at < bytes.len() {
            if self.skip > 0 {
                let n = usize::try_from(self.skip)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len() - at);
                self.skip -= n as u64;
                at += n;
                continue;
            }
            if self.have == 0 {
                self.first_byte(&mut bytes[at])?;
            }
            self.header[usize::from(self.have)] = bytes[at];
            self.have += 1;
            at += 1;
            if self.have < 2 {
                continue;
            }
            let extended = match self.header[1] & 0x7f {
                126 => 2,
                127 => 8,
                _ => 0,
            };
            let masked = self.header[1] & 0x80 != 0;
            let len = 2 + extended + if masked { 4 } else { 0 };
            if usize::from(self.have) < len {
                continue;
            }
            self.skip = match extended {
                0 => u64::from(self.header[1] & 0x7f),
                2 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
                _ => u64::from_be_bytes(self.header[2..10].try_into().unwrap_or([0xff; 8])),
            };
            self.have = 0;
            self.frame(self.header[0])?;
        }
        Ok(())
    }

    /// A frame's first byte (FIN, RSV, opcode) on a compressed connection: a text or binary
    /// frame starts a message, compressed when RSV1 is set. RSV1 elsewhere (a continuation,
    /// a control frame) is left for tungstenite to refuse, as RFC 7692 section 6.1 asks.
    fn first_byte(&mut self, byte: &mut u8) -> Result<(), Violation> {
        let Some(sent) = self.sent.as_mut() else {
            return Ok(());
        };
        let opcode = *byte & 0x0f;
        if opcode != 0x1 && opcode != 0x2 {
            return Ok(());
        }
        if sent.len() >= MAX_PENDING {
            return Err(Violation::Backlog);
        }
        sent.push_back(match (*byte & 0x40 != 0, opcode) {
            (false, _) => Sent::Plain,
            (true, 0x1) => Sent::DeflatedText,
            (true, _) => Sent::DeflatedBinary,
        });
        if *byte & 0x40 != 0 {
            *byte = (*byte & !0x4f) | 0x2; // RSV1 cleared, binary
        }
        Ok(())
    }

    fn frame(&mut self, first_byte: u8) -> Result<(), Violation> {
        // A connection without a limit takes nothing: its bucket (empty, refilled by nothing)
        // only keeps the time.
        let cost = if self.limited { 1.0 } else { 0.0 };
        if self
            .bucket
            .take_at(self.rate, cost, Instant::now().into_std())
            .is_err()
        {
            return Err(Violation::Rate);
        }
        let fin = first_byte & 0x80 != 0;
        match first_byte & 0x0f {
            // Continuation: one more fragment of the current message.
            0x0 => {
                self.fragments = self.fragments.saturating_add(1);
                if self.fragments > MAX_FRAGMENTS {
                    return Err(Violation::Fragments);
                }
                if fin {
                    self.fragments = 0;
                }
            }
            // A text or binary frame starts a message.
            0x1 | 0x2 => self.fragments = u32::from(!fin),
            // Control frames may come between fragments and end nothing.
            _ => {}
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Inbound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(v) = self.violation {
            return Poll::Ready(Err(io::Error::other(v.reason())));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let this = &mut *self;
        if let Err(v) = this.scan(&mut buf.filled_mut()[before..]) {
            this.violation = Some(v);
            return Poll::Ready(Err(io::Error::other(v.reason())));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Inbound<S> {
    crate::server::stream::forward_async_write!(inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    use tungstenite::protocol::frame::{FrameHeader, coding::OpCode};

    /// A masked client frame of `payload_len` bytes, its header written by tungstenite.
    fn frame(fin: bool, opcode: u8, payload_len: usize) -> Vec<u8> {
        let header = FrameHeader {
            is_final: fin,
            opcode: OpCode::from(opcode),
            mask: Some([1, 2, 3, 4]),
            ..FrameHeader::default()
        };
        let mut f = Vec::new();
        header.format(payload_len as u64, &mut f).unwrap();
        f.extend(std::iter::repeat_n(b'x', payload_len));
        f
    }

    #[test]
    fn counts_frames_split_anywhere_and_skips_payloads() {
        let mut bytes = frame(true, 1, 5);
        bytes.extend(frame(true, 1, 300));
        bytes.extend(frame(true, 2, 70_000));
        bytes.extend(frame(true, 9, 0));
        let rate = Rate::new(1.0, 4.0);
        // Byte by byte: the header parser must survive any split.
        let mut scan = Inbound::new((), rate);
        for b in &mut bytes {
            scan.scan(std::slice::from_mut(b)).unwrap();
        }
        assert_eq!((scan.have, scan.skip), (0, 0));
        // A fifth frame is over the burst of 4.
        assert_eq!(scan.scan(&mut frame(true, 1, 1)), Err(Violation::Rate));
    }

    #[test]
    fn caps_fragments_per_message() {
        let mut scan = Inbound::new((), None);
        let mut bytes = frame(false, 1, 1);
        for _ in 0..MAX_FRAGMENTS - 2 {
            bytes.extend(frame(false, 0, 0));
        }
        bytes.extend(frame(true, 0, 0));
        scan.scan(&mut bytes).unwrap();
        // The next message starts from zero; a ping between fragments is fine.
        let mut bytes = frame(false, 1, 1);
        bytes.extend(frame(true, 9, 0));
        for _ in 0..MAX_FRAGMENTS {
            bytes.extend(frame(false, 0, 0));
        }
        assert_eq!(scan.scan(&mut bytes), Err(Violation::Fragments));
    }

    #[test]
    fn compressed_messages_are_marked_in_order_and_handed_on_as_binary() {
        let mut scan = Inbound::new((), None);
        let mut plain = frame(true, 1, 3);
        scan.scan(&mut plain).unwrap();
        assert_eq!(
            plain[0], 0x81,
            "nothing rewritten before deflate is negotiated"
        );
        assert_eq!(scan.next_message(), Sent::Plain);

        scan.expect_deflate();
        let rsv1 = |mut f: Vec<u8>| {
            f[0] |= 0x40;
            f
        };
        let mut bytes = rsv1(frame(false, 1, 200)); // compressed text, in two fragments
        let first = bytes.len();
        bytes.extend(frame(true, 9, 0)); // a ping between them
        bytes.extend(frame(true, 0, 10));
        bytes.extend(frame(true, 1, 5)); // plain text
        bytes.extend(rsv1(frame(true, 2, 70_000))); // compressed binary
        let binary = bytes.len() - 70_000 - 14;
        // Byte by byte: the rewrite must survive any split.
        for b in &mut bytes {
            scan.scan(std::slice::from_mut(b)).unwrap();
        }
        assert_eq!(
            bytes[0], 0x02,
            "RSV1 cleared, text became binary, not final"
        );
        assert_eq!(bytes[first], 0x89, "the ping untouched");
        assert_eq!(bytes[binary], 0x82);
        assert_eq!(scan.next_message(), Sent::DeflatedText);
        assert_eq!(scan.next_message(), Sent::Plain);
        assert_eq!(scan.next_message(), Sent::DeflatedBinary);
        assert_eq!(scan.next_message(), Sent::Plain, "none pending");

        // RSV1 on a continuation is left for tungstenite to refuse.
        let mut bytes = frame(false, 1, 1);
        bytes.extend(rsv1(frame(true, 0, 1)));
        let continuation = bytes.len() - 7;
        scan.scan(&mut bytes).unwrap();
        assert_eq!(bytes[continuation], 0xc0);
    }

    #[test]
    fn pending_messages_are_bounded() {
        let mut scan = Inbound::new((), None);
        scan.expect_deflate();
        let mut bytes: Vec<u8> = (0..MAX_PENDING).flat_map(|_| frame(true, 1, 0)).collect();
        scan.scan(&mut bytes).unwrap();
        assert_eq!(scan.scan(&mut frame(true, 1, 0)), Err(Violation::Backlog));
    }
}
