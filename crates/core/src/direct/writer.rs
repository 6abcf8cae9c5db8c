//! What a connection's transport gives direct delivery: its writer (the socket) and where its
//! deliveries are counted.

use std::io;

use bytes::Bytes;

use crate::batch::BatchFormat;
use crate::message::Message;

/// Writes a subscriber's frames to its socket without waiting.
pub trait DirectWriter: Send + Sync + 'static {
    /// The frame that carries `message` to this subscriber (encoded once per message and
    /// shared): its delta form when `delta` (the subscriber asked for deltas and holds the
    /// message's base) and the message has one, else the full message.
    fn frame<'m>(&self, message: &'m Message, delta: bool) -> &'m Bytes;
    /// Writes what the socket takes of `buf` now: how many bytes, or `WouldBlock`.
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
    /// Where this subscriber's deliveries are counted. The fan-out adds up one message's
    /// deliveries to consecutive subscribers that share a counter and counts them once, so no
    /// delivery touches a shared counter of its own.
    fn counter(&self) -> &'static dyn DeliveryCounter;
    /// What a delivery of `message` (as a delta when `delta`, as [`Self::frame`]) counts as
    /// bytes, `written` being its frame's length.
    fn counted_bytes(&self, written: usize, _message: &Message, _delta: bool) -> usize {
        written
    }
    /// Whether the fan-out may start writing now (false while the transport's own writer
    /// has a frame half out).
    fn ready(&self) -> bool {
        true
    }
    /// Writes what the socket takes of `bufs` now, in order, in one go: how many bytes, or
    /// `WouldBlock`. The fan-out writes the messages ready for a subscriber at once this way
    /// (their frames, or one batch frame). By default [`Self::try_write`] for each buffer in
    /// turn, until one is not taken whole.
    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut written = 0;
        for buf in bufs {
            match self.try_write(buf) {
                Ok(n) => {
                    written += n;
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if written == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(written)
    }
    /// How this subscriber takes several messages ready at once: `None` (the default), a
    /// frame each; `Some(form)`, one batch frame ([`crate::batch`]), the client having asked.
    /// Only a writer whose [`Self::frame`] is a whole uncompressed WebSocket frame may say
    /// `Some`: the batch holds those frames' payloads.
    fn batch(&self) -> Option<BatchFormat> {
        None
    }
}

/// Counts deliveries by the batch ([`DirectWriter::counter`]).
pub trait DeliveryCounter: Sync {
    /// `n` deliveries of one message, `bytes` in all, `latency` after it was published.
    fn delivered(&self, n: u64, bytes: u64, latency: std::time::Duration);
}
