//! A connection's link to its topic's fan-out ([`DirectSub`]): its state under one lock, and
//! the writes the fan-out makes to it, one message ([`DirectSub::offer`]) or a run of them
//! ([`DirectSub::offer_run`]).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use super::writer::{DeliveryCounter, DirectWriter};
use crate::batch;
use crate::cursor::Cursor;
use crate::message::Message;

/// A connection's link to the fan-out of the topic it is attached to, shared by the topic and
/// the connection, with the connection's writer (its socket) inline.
///
/// The connection makes one for its life ([`Self::new`]) and holds the socket through it
/// ([`Self::writer`]); a feed attaches it to its one topic ([`crate::Feed::link`]) and
/// detaches it when it ends or takes a second topic. The fan-out's one load per delivery
/// (the link, whose lock, position and socket sit together) is why the writer lives here
/// rather than behind a pointer of its own: a broadcast to 15,000 subscribers walks 15,000
/// links, and each further pointer was a further cache miss.
pub struct DirectSub<W: ?Sized = dyn DirectWriter> {
    pub(super) state: Mutex<LinkState>,
    writer: W,
}

impl<W: ?Sized> std::fmt::Debug for DirectSub<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("DirectSub")
            .field("direct", &state.direct)
            .field("attached", &state.attached.is_some())
            .field("position", &state.position)
            .finish()
    }
}

/// In declaration order (`repr(C)`): what the fan-out reads and writes on every delivery
/// first, right after the lock, so that a delivery's loads share the lock's cache line (perf
/// had found the `direct` flag laid out 100 bytes after the lock, a second miss; the gain was
/// within W2's run-to-run spread).
#[repr(C)]
pub(super) struct LinkState {
    /// The fan-out writes to this subscriber.
    pub(super) direct: bool,
    /// The subscription asked for deltas ([`crate::Feed::want_deltas`]).
    pub(super) delta: bool,
    /// The message at `position` was delivered to the subscriber: a message whose delta
    /// base it is may go as a delta.
    pub(super) based: bool,
    /// Counts attachments: a fan-out that still walks a list from an earlier attachment
    /// offers with an older number, and is not heard.
    pub(super) generation: u32,
    /// The last message written (or where the subscriber was when it went direct).
    pub(super) position: Cursor,
    /// When the fan-out last wrote (for the heartbeat).
    pub(super) last_write: Option<Instant>,
    /// The rest of a frame the socket took only part of: written by the task before anything
    /// else.
    pub(super) rest: Option<Bytes>,
    /// The task to wake when the subscriber is parked.
    pub(super) waker: Option<Waker>,
    /// The topic it is attached to, if any.
    pub(super) attached: Option<Attachment>,
}

impl LinkState {
    /// Stops direct delivery (counted).
    pub(super) fn leave(&mut self) {
        if self.direct {
            self.direct = false;
            if let Some(attached) = &self.attached {
                attached.direct_now.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Part of a frame is on the wire: the task writes `rest` before anything else, then
    /// goes on from the position reached.
    fn cut(&mut self, rest: Bytes) {
        self.rest = Some(rest);
        self.park();
    }

    /// Parks the subscriber: the fan-out stops writing to it and its task is woken.
    pub(super) fn park(&mut self) {
        self.leave();
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// Where a link is attached.
pub(super) struct Attachment {
    /// Its slot in the topic's [`DirectSet`].
    pub(super) slot: usize,
    /// The topic's count of subscribers that are direct now (they hold no live receiver, so
    /// the topic counts them here).
    pub(super) direct_now: Arc<AtomicUsize>,
}

/// What a parked subscriber's task takes over (`DirectSub::take`).
#[derive(Debug)]
pub struct Handover {
    /// The position reached: subscribe again after it.
    pub position: Cursor,
    /// The rest of a frame to write before anything else.
    pub rest: Option<Bytes>,
    /// The message at `position` was delivered (by the fan-out, or before it went direct).
    pub based: bool,
}

impl<W: DirectWriter> DirectSub<W> {
    /// A link around a connection's `writer`, attached to no topic yet.
    pub fn new(writer: W) -> Self {
        Self {
            state: Mutex::new(LinkState {
                direct: false,
                delta: false,
                based: false,
                position: Cursor::new(0, 0),
                rest: None,
                last_write: None,
                waker: None,
                attached: None,
                generation: 0,
            }),
            writer,
        }
    }
}

impl<W: ?Sized + DirectWriter> DirectSub<W> {
    /// The connection's writer (its socket).
    pub fn writer(&self) -> &W {
        &self.writer
    }

    /// Whether the fan-out writes to this subscriber now.
    pub fn is_direct(&self) -> bool {
        self.state.lock().direct
    }

    /// While direct, registers `waker` to be woken when the subscriber is parked; false when
    /// it is parked already.
    pub(crate) fn register(&self, waker: &Waker) -> bool {
        let mut state = self.state.lock();
        if !state.direct {
            return false;
        }
        match &state.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => state.waker = Some(waker.clone()),
        }
        true
    }

    /// Parks the subscriber (if it was direct) and hands its position and any partial frame
    /// over to its task.
    pub(crate) fn take(&self) -> Handover {
        let mut state = self.state.lock();
        state.leave();
        state.waker = None;
        Handover {
            position: state.position,
            rest: state.rest.take(),
            based: state.based,
        }
    }

    /// Parks the subscriber before its task writes to the socket itself, and returns the
    /// rest of a frame the fan-out wrote in part, to write first. The feed finds the link
    /// parked on its next poll and takes over from the position reached. Nothing to do on a
    /// link attached to no topic.
    pub fn park_for_write(&self) -> Option<Bytes> {
        self.take().rest
    }

    /// Writes `frame`, a small frame of the transport's own (a WebSocket ping), while the
    /// subscriber is direct: under the lock the fan-out writes under, so it cannot cut one of
    /// the fan-out's frames, and the subscriber stays direct (parking it and coming back
    /// costs its task a wake-up, a new live subscription and a replay check). True when the
    /// frame is on its way (all of it written, or the rest kept to be written first and the
    /// subscriber parked, as the fan-out does); false when the subscriber is not direct or
    /// the socket took none of it — the caller then writes it the ordinary way.
    pub fn write_while_direct(&self, frame: &[u8]) -> bool {
        let mut state = self.state.lock();
        if !state.direct || state.rest.is_some() {
            return false;
        }
        match self.writer.try_write(frame) {
            Ok(n) if n == frame.len() => true,
            Ok(0) | Err(_) => false,
            Ok(n) => {
                state.cut(Bytes::copy_from_slice(&frame[n..]));
                true
            }
        }
    }

    /// Whether the writer lets the fan-out start writing.
    pub(crate) fn writer_ready(&self) -> bool {
        self.writer.ready()
    }

    /// The position reached.
    pub(crate) fn position(&self) -> Cursor {
        self.state.lock().position
    }

    /// When the fan-out last wrote to the socket.
    pub fn last_write(&self) -> Option<Instant> {
        self.state.lock().last_write
    }

    /// Goes direct at `position` (called under the topic's lock, with `position` its head),
    /// sending deltas when `delta`, the message at `position` delivered when `based`.
    pub(crate) fn go_direct(&self, position: Cursor, delta: bool, based: bool) -> bool {
        let mut state = self.state.lock();
        let Some(attached) = &state.attached else {
            return false;
        };
        if !state.direct {
            attached.direct_now.fetch_add(1, Ordering::AcqRel);
        }
        state.direct = true;
        state.position = position;
        state.delta = delta;
        state.based = based;
        true
    }

    /// Writes `message` to this subscriber if it is direct, still in the attachment
    /// `generation`, and the message is its next one (it follows `previous`, the topic's
    /// head before it); parks it when the socket does not take the whole frame or the
    /// message is not the next one. Returns where the delivery counts and its bytes, when it
    /// was delivered.
    pub(super) fn offer(
        &self,
        message: &Message,
        previous: Cursor,
        now: Instant,
        generation: u32,
    ) -> Option<(&'static dyn DeliveryCounter, usize)> {
        let mut state = self.state.lock();
        if !state.direct || state.generation != generation {
            return None;
        }
        let cursor = message.cursor();
        if cursor.epoch == state.position.epoch && cursor.seq <= state.position.seq {
            return None;
        }
        if state.position != previous {
            state.park();
            return None;
        }
        let writer = &self.writer;
        let delta = state.delta && state.based && message.delta_base() == Some(previous);
        let frame = writer.frame(message, delta);
        match writer.try_write(frame) {
            Ok(n) => {
                let counted = (
                    writer.counter(),
                    writer.counted_bytes(frame.len(), message, delta),
                );
                state.position = cursor;
                state.based = true;
                state.last_write = Some(now);
                if n < frame.len() {
                    // Part of the frame is on the wire: the task writes the rest, then goes
                    // on after this message.
                    state.cut(frame.slice(n..));
                }
                Some(counted)
            }
            // Would block, or failed: the task writes (or finds the error) from here on.
            Err(_) => {
                state.park();
                None
            }
        }
    }

    /// Writes the messages of `messages` (in the topic's order, each with the topic's head
    /// before it) from this subscriber's next one on, as [`Self::offer`] writes one, in as
    /// few writes as the socket takes: runs of consecutive messages (at most
    /// [`batch::MAX_MESSAGES`], and [`batch::MAX_BYTES`] of frames unless one frame is larger
    /// alone), each in one vectored write, as one batch frame when the writer takes batches
    /// ([`DirectWriter::batch`]). Parks the subscriber where [`Self::offer`] would.
    /// `delivered(i, counter, bytes)` is told of each `messages[i]` delivered.
    pub(super) fn offer_run(
        &self,
        messages: &[(Arc<Message>, Cursor)],
        now: Instant,
        generation: u32,
        mut delivered: impl FnMut(usize, &'static dyn DeliveryCounter, usize),
    ) {
        let mut state = self.state.lock();
        if !state.direct || state.generation != generation {
            return;
        }
        let writer = &self.writer;
        let form = writer.batch();
        let mut next = 0;
        while let Some((message, previous)) = messages.get(next) {
            let cursor = message.cursor();
            if cursor.epoch == state.position.epoch && cursor.seq <= state.position.seq {
                next += 1;
                continue;
            }
            if state.position != *previous {
                state.park();
                return;
            }
            // The run: consecutive messages from `next`, each the one after the one before.
            let mut frames: [Option<&Bytes>; batch::MAX_MESSAGES] = [None; batch::MAX_MESSAGES];
            let mut deltas = [false; batch::MAX_MESSAGES];
            let mut n = 0;
            let mut bytes = 0;
            let mut based = state.based;
            let mut after = *previous;
            for (message, previous) in &messages[next..] {
                if n == batch::MAX_MESSAGES || *previous != after {
                    break;
                }
                let delta = state.delta && based && message.delta_base() == Some(after);
                let frame = writer.frame(message, delta);
                if n > 0 && bytes + frame.len() > batch::MAX_BYTES {
                    break;
                }
                frames[n] = Some(frame);
                deltas[n] = delta;
                n += 1;
                bytes += frame.len();
                based = true;
                after = message.cursor();
            }
            let frames = &frames[..n];
            let head;
            let mut parts = [io::IoSlice::new(&[]); 2 * batch::MAX_MESSAGES + 1];
            let mut count = 0;
            let mut push = |part| push_part(&mut parts, &mut count, part);
            match form.filter(|_| n > 1) {
                Some(form) => {
                    // Each frame's payload, without its header, inside the array.
                    let elements: usize = frames
                        .iter()
                        .flatten()
                        .map(|f| f.len() - crate::frame::ws_header_len(f.len()))
                        .sum();
                    head = form.head(n, elements);
                    push(head.as_slice());
                    for (i, frame) in frames.iter().flatten().enumerate() {
                        if i > 0 {
                            push(form.separator());
                        }
                        push(&frame[crate::frame::ws_header_len(frame.len())..]);
                    }
                    push(form.tail());
                }
                None => {
                    for frame in frames.iter().flatten() {
                        push(frame);
                    }
                }
            }
            let parts = &parts[..count];
            let total: usize = parts.iter().map(|p| p.len()).sum();
            match writer.try_write_vectored(parts) {
                Ok(written) => {
                    for (i, frame) in frames.iter().flatten().enumerate() {
                        let (message, _) = &messages[next + i];
                        let bytes = writer.counted_bytes(frame.len(), message, deltas[i]);
                        delivered(next + i, writer.counter(), bytes);
                    }
                    state.position = after;
                    state.based = true;
                    state.last_write = Some(now);
                    if written < total {
                        // Part of the run is on the wire: the task writes the rest, then goes
                        // on after the run's last message.
                        let mut rest = Vec::with_capacity(total - written);
                        let mut skip = written;
                        for part in parts {
                            let from = skip.min(part.len());
                            skip -= from;
                            rest.extend_from_slice(&part[from..]);
                        }
                        state.cut(rest.into());
                        return;
                    }
                    next += n;
                }
                // Would block, or failed: the task writes (or finds the error) from here on.
                Err(_) => {
                    state.park();
                    return;
                }
            }
        }
    }
}

/// Appends `part` (unless empty) to the first `count` of `parts`.
fn push_part<'a>(parts: &mut [io::IoSlice<'a>], count: &mut usize, part: &'a [u8]) {
    if !part.is_empty() {
        parts[*count] = io::IoSlice::new(part);
        *count += 1;
    }
}
