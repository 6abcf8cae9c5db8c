//! Direct delivery: a topic's publisher writes each message to the sockets of its idle
//! subscribers itself, in one loop, instead of waking one task per subscriber per message.
//!
//! A subscriber whose transport can write without waiting (a plain TCP socket and a frame
//! encoded once per message) keeps its socket, as a [`DirectWriter`], in a [`DirectSub`] link
//! and attaches the link to its topic through its [`crate::Feed`]. While its feed is idle (nothing to replay, nothing on its live receiver)
//! it is *direct*: the feed drops its live receiver, so a publish does not wake its task, and
//! the topic's fan-out (`DirectSet::fan_out`) writes the message's frame straight to the
//! socket when it is the subscriber's next one.
//!
//! A subscriber that cannot take a frame at once (the socket would block, or took only part
//! of it), or that is offered a message that is not its next one, is *parked*: the fan-out
//! stops writing to it and wakes its task, which finishes the partial frame, subscribes again
//! from the position reached (replaying from history, under the lag policy like any
//! subscriber that fell behind) and goes direct again once it has caught up. The task also
//! parks its subscriber itself before it writes anything of its own (a heartbeat, a control
//! event), so the socket has one writer at a time and frames never interleave.
//!
//! Ordering: a topic's messages are queued in order under the topic's lock and fanned out by
//! one thread at a time (the first publisher that finds the fan-out free drains the queue;
//! the others leave their messages to it), and each subscriber takes only the message right
//! after its position. The per-connection order, the cursor semantics and the slow-consumer
//! policy are those of the feed.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::batch::{self, BatchForm};
use crate::cursor::Cursor;
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
    fn batch(&self) -> Option<BatchForm> {
        None
    }
}

/// Counts deliveries by the batch ([`DirectWriter::counter`]).
pub trait DeliveryCounter: Sync {
    /// `n` deliveries of one message, `bytes` in all, `latency` after it was published.
    fn delivered(&self, n: u64, bytes: u64, latency: std::time::Duration);
}

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
    state: Mutex<LinkState>,
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
struct LinkState {
    /// The fan-out writes to this subscriber.
    direct: bool,
    /// The subscription asked for deltas ([`crate::Feed::want_deltas`]).
    delta: bool,
    /// The message at `position` was delivered to the subscriber: a message whose delta
    /// base it is may go as a delta.
    based: bool,
    /// Counts attachments: a fan-out that still walks a list from an earlier attachment
    /// offers with an older number, and is not heard.
    generation: u32,
    /// The last message written (or where the subscriber was when it went direct).
    position: Cursor,
    /// When the fan-out last wrote (for the heartbeat).
    last_write: Option<Instant>,
    /// The rest of a frame the socket took only part of: written by the task before anything
    /// else.
    rest: Option<Bytes>,
    /// The task to wake when the subscriber is parked.
    waker: Option<Waker>,
    /// The topic it is attached to, if any.
    attached: Option<Attachment>,
}

impl LinkState {
    /// Stops direct delivery (counted).
    fn leave(&mut self) {
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
    fn park(&mut self) {
        self.leave();
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// Where a link is attached.
struct Attachment {
    /// Its slot in the topic's [`DirectSet`].
    slot: usize,
    /// The topic's count of subscribers that are direct now (they hold no live receiver, so
    /// the topic counts them here).
    direct_now: Arc<AtomicUsize>,
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
    fn offer(
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
    fn offer_run(
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

/// One message's deliveries to consecutive subscribers that share a counter, counted once.
#[derive(Default)]
struct Tally {
    run: Option<(&'static dyn DeliveryCounter, u64, u64)>,
}

impl Tally {
    fn add(
        &mut self,
        counter: &'static dyn DeliveryCounter,
        bytes: usize,
        latency: std::time::Duration,
    ) {
        match &mut self.run {
            Some((c, n, b)) if std::ptr::addr_eq(*c, counter) => {
                *n += 1;
                *b += bytes as u64;
            }
            _ => {
                self.flush(latency);
                self.run = Some((counter, 1, bytes as u64));
            }
        }
    }

    fn flush(&mut self, latency: std::time::Duration) {
        if let Some((counter, n, bytes)) = self.run.take() {
            counter.delivered(n, bytes, latency);
        }
    }
}

/// Subscribers per fan-out cohort: a topic's direct subscribers are fanned out by cohort, the
/// first on the publishing thread and each other one on a task of its own, so a large topic's
/// fan-out spreads over the runtime's workers as the per-subscriber tasks did.
const COHORT: usize = 1024;

/// A topic's direct subscribers, in cohorts of [`COHORT`] slots (attach and detach in O(1)).
#[derive(Default)]
pub(crate) struct DirectSet {
    slots: Mutex<Slots>,
    /// Subscribers attached; read under the topic's lock before queueing a message.
    attached: AtomicUsize,
    /// Subscribers direct now.
    direct_now: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Slots {
    cohorts: Vec<Arc<Cohort>>,
    /// Free slots (`cohort * COHORT + index`).
    free: Vec<usize>,
}

/// One cohort's subscribers, the messages waiting to be fanned out to them, and the lock of
/// the one thread or task fanning out to them.
#[derive(Default)]
pub(crate) struct Cohort {
    subs: Mutex<CohortSubs>,
    queue: Mutex<Queue>,
    pub(crate) running: Mutex<()>,
}

#[derive(Default)]
struct CohortSubs {
    slots: Vec<Option<Entry>>,
    len: usize,
    /// What the fan-out walks, rebuilt only after a change.
    snapshot: Option<Arc<[Entry]>>,
}

/// An attached link in its cohort, with the attachment's number ([`LinkState::generation`]).
#[derive(Clone)]
struct Entry {
    sub: Arc<DirectSub>,
    generation: u32,
}

#[derive(Default)]
struct Queue {
    /// Each message with the topic's head before it.
    messages: Vec<(Arc<Message>, Cursor)>,
    /// Messages were dropped from a full queue: every subscriber of the cohort is parked and
    /// recovers from history.
    overflowed: bool,
}

impl std::fmt::Debug for DirectSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSet")
            .field("attached", &self.attached.load(Ordering::Relaxed))
            .finish()
    }
}

impl DirectSet {
    /// Subscribers attached.
    pub(crate) fn len(&self) -> usize {
        self.attached.load(Ordering::Acquire)
    }

    /// Subscribers direct now.
    pub(crate) fn direct_now(&self) -> usize {
        self.direct_now.load(Ordering::Acquire)
    }

    /// Attaches `sub` at `position` (not direct yet); false when it is attached already.
    pub(crate) fn attach(&self, sub: &Arc<DirectSub>, position: Cursor) -> bool {
        let mut state = sub.state.lock();
        if state.attached.is_some() {
            return false;
        }
        let mut slots = self.slots.lock();
        let slot = match slots.free.pop() {
            Some(slot) => slot,
            None => {
                slots.cohorts.push(Arc::default());
                let first = (slots.cohorts.len() - 1) * COHORT;
                slots.free.extend((first..first + COHORT).rev());
                slots.free.pop().expect("a fresh cohort has free slots")
            }
        };
        state.generation = state.generation.wrapping_add(1);
        state.attached = Some(Attachment {
            slot,
            direct_now: self.direct_now.clone(),
        });
        state.direct = false;
        state.position = position;
        state.rest = None;
        state.last_write = None;
        let mut cohort = slots.cohorts[slot / COHORT].subs.lock();
        let index = slot % COHORT;
        if cohort.slots.len() <= index {
            cohort.slots.resize(index + 1, None);
        }
        cohort.slots[index] = Some(Entry {
            sub: sub.clone(),
            generation: state.generation,
        });
        cohort.len += 1;
        cohort.snapshot = None;
        self.attached.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Detaches `sub` from this topic: the fan-out stops writing to it and lets it go.
    pub(crate) fn detach(&self, sub: &DirectSub) {
        let slot = {
            let mut state = sub.state.lock();
            match &state.attached {
                Some(a) if Arc::ptr_eq(&a.direct_now, &self.direct_now) => {}
                _ => return,
            }
            state.leave();
            state.waker = None;
            state.attached.take().map(|a| a.slot)
        };
        let Some(slot) = slot else { return };
        let mut slots = self.slots.lock();
        let Some(cohort) = slots.cohorts.get(slot / COHORT).cloned() else {
            return;
        };
        let mut subs = cohort.subs.lock();
        let same = subs
            .slots
            .get(slot % COHORT)
            .and_then(|s| s.as_ref())
            .is_some_and(|s| std::ptr::addr_eq(Arc::as_ptr(&s.sub), sub));
        if !same {
            return;
        }
        subs.slots[slot % COHORT] = None;
        subs.len -= 1;
        subs.snapshot = None;
        drop(subs);
        slots.free.push(slot);
        if self.attached.fetch_sub(1, Ordering::AcqRel) == 1 {
            *slots = Slots::default();
        }
    }

    /// Queues `message` for the fan-out of every cohort with subscribers; called under the
    /// topic's lock, so each queue is in the topic's order. At most `capacity` wait in a
    /// cohort: past that the oldest are dropped and the cohort's subscribers are parked (they
    /// recover from history, as a lagging subscriber does).
    pub(crate) fn queue(&self, message: &Arc<Message>, previous: Cursor, capacity: usize) {
        let slots = self.slots.lock();
        for cohort in &slots.cohorts {
            if cohort.subs.lock().len == 0 {
                continue;
            }
            let mut queue = cohort.queue.lock();
            if queue.messages.len() >= capacity.max(1) {
                queue.messages.clear();
                queue.overflowed = true;
            }
            queue.messages.push((message.clone(), previous));
        }
    }

    /// Fans the queued messages out: the first cohort with work on this thread, every other
    /// one on a task of its own (when there is a runtime). A cohort another thread is at
    /// already is left to it: it takes these messages too.
    pub(crate) fn fan_out(&self) {
        let cohorts: Vec<Arc<Cohort>> = self.slots.lock().cohorts.clone();
        let mut here = None;
        for cohort in cohorts {
            if !cohort.has_work() {
                continue;
            }
            if here.is_none() {
                here = Some(cohort);
                continue;
            }
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move { cohort.fan_out() });
                }
                Err(_) => cohort.fan_out(),
            }
        }
        if let Some(cohort) = here {
            cohort.fan_out();
        }
    }

    /// Holds every cohort's fan-out, as another thread fanning out would.
    #[cfg(test)]
    pub(crate) fn running_for_test(&self) -> Vec<Arc<Cohort>> {
        self.slots.lock().cohorts.clone()
    }
}

impl Cohort {
    fn has_work(&self) -> bool {
        let queue = self.queue.lock();
        !queue.messages.is_empty() || queue.overflowed
    }

    fn snapshot(&self) -> Arc<[Entry]> {
        let mut subs = self.subs.lock();
        if let Some(snapshot) = &subs.snapshot {
            return snapshot.clone();
        }
        let snapshot: Arc<[Entry]> = subs.slots.iter().flatten().cloned().collect();
        subs.snapshot = Some(snapshot.clone());
        snapshot
    }

    /// Fans the cohort's queued messages out until its queue is empty, unless another thread
    /// is at it.
    fn fan_out(&self) {
        loop {
            let Some(running) = self.running.try_lock() else {
                return;
            };
            loop {
                let Queue {
                    messages,
                    overflowed,
                } = std::mem::take(&mut *self.queue.lock());
                if messages.is_empty() && !overflowed {
                    break;
                }
                let subs = self.snapshot();
                if overflowed {
                    for entry in subs.iter() {
                        let mut state = entry.sub.state.lock();
                        if state.direct && state.generation == entry.generation {
                            state.park();
                        }
                    }
                    continue;
                }
                let now = Instant::now();
                if let [(message, previous)] = &messages[..] {
                    let latency = now.saturating_duration_since(message.published_at());
                    let mut tally = Tally::default();
                    for entry in subs.iter() {
                        if let Some((counter, bytes)) =
                            entry.sub.offer(message, *previous, now, entry.generation)
                        {
                            tally.add(counter, bytes, latency);
                        }
                    }
                    tally.flush(latency);
                    continue;
                }
                // Several messages: each subscriber takes all it can in one write, and each
                // message's deliveries are still counted by the run of subscribers.
                let latencies: Vec<std::time::Duration> = messages
                    .iter()
                    .map(|(m, _)| now.saturating_duration_since(m.published_at()))
                    .collect();
                let mut tallies: Vec<Tally> = messages.iter().map(|_| Tally::default()).collect();
                for entry in subs.iter() {
                    entry
                        .sub
                        .offer_run(&messages, now, entry.generation, |i, counter, bytes| {
                            tallies[i].add(counter, bytes, latencies[i]);
                        });
                }
                for (tally, latency) in tallies.iter_mut().zip(&latencies) {
                    tally.flush(*latency);
                }
            }
            drop(running);
            // A publisher that found the fan-out busy after the last look at the queue, and
            // before it was released, left its message to this thread: look once more.
            if !self.has_work() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
