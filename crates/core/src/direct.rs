//! Direct delivery: a topic's publisher writes each message to the sockets of its idle
//! subscribers itself, in one loop, instead of waking one task per subscriber per message.
//!
//! A subscriber whose transport can write without waiting (a plain TCP socket and a frame
//! encoded once per message) attaches a [`DirectWriter`] to its topic through its
//! [`crate::Feed`]. While its feed is idle (nothing to replay, nothing on its live receiver)
//! it is *direct*: the feed drops its live receiver, so a publish does not wake its task, and
//! the topic's fan-out ([`DirectSet::fan_out`]) writes the message's frame straight to the
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

use crate::cursor::Cursor;
use crate::message::Message;

/// Writes a subscriber's frames to its socket without waiting.
pub trait DirectWriter: Send + Sync + 'static {
    /// The frame that carries `message` to this subscriber (encoded once per message and
    /// shared).
    fn frame<'m>(&self, message: &'m Message) -> &'m Bytes;
    /// Writes what the socket takes of `buf` now: how many bytes, or `WouldBlock`.
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
    /// Where this subscriber's deliveries are counted. The fan-out adds up one message's
    /// deliveries to consecutive subscribers that share a counter and counts them once, so no
    /// delivery touches a shared counter of its own.
    fn counter(&self) -> &'static dyn DeliveryCounter;
    /// What a delivery of `message` counts as bytes, `written` being its frame's length.
    fn counted_bytes(&self, written: usize, _message: &Message) -> usize {
        written
    }
    /// Whether the fan-out may start writing now (false while the transport's own writer
    /// has a frame half out).
    fn ready(&self) -> bool {
        true
    }
}

/// Counts deliveries by the batch ([`DirectWriter::counter`]).
pub trait DeliveryCounter: Sync {
    /// `n` deliveries of one message, `bytes` in all, `latency` after it was published.
    fn delivered(&self, n: u64, bytes: u64, latency: std::time::Duration);
}

/// A subscriber's link to its topic's fan-out, shared by the topic and the subscriber's feed.
pub struct DirectSub {
    state: Mutex<LinkState>,
    /// The topic's count of subscribers that are direct now (they hold no live receiver, so
    /// the topic counts them here).
    direct_now: Arc<AtomicUsize>,
}

impl std::fmt::Debug for DirectSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("DirectSub")
            .field("direct", &state.direct)
            .field("position", &state.position)
            .finish()
    }
}

struct LinkState {
    /// The fan-out writes to this subscriber.
    direct: bool,
    /// The last message written (or where the subscriber was when it went direct).
    position: Cursor,
    /// The rest of a frame the socket took only part of: written by the task before anything
    /// else.
    rest: Option<Bytes>,
    /// When the fan-out last wrote (for the heartbeat).
    last_write: Option<Instant>,
    /// The task to wake when the subscriber is parked.
    waker: Option<Waker>,
    /// None once detached: the socket is not held past the subscription.
    writer: Option<Box<dyn DirectWriter>>,
    /// Slot in the topic's [`DirectSet`].
    slot: usize,
}

/// What a parked subscriber's task takes over ([`DirectSub::take`]).
#[derive(Debug)]
pub struct Handover {
    /// The position reached: subscribe again after it.
    pub position: Cursor,
    /// The rest of a frame to write before anything else.
    pub rest: Option<Bytes>,
}

impl DirectSub {
    fn new(writer: Box<dyn DirectWriter>, position: Cursor, direct_now: Arc<AtomicUsize>) -> Self {
        Self {
            direct_now,
            state: Mutex::new(LinkState {
                direct: false,
                position,
                rest: None,
                last_write: None,
                waker: None,
                writer: Some(writer),
                slot: usize::MAX,
            }),
        }
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
        self.leave(&mut state);
        state.waker = None;
        Handover {
            position: state.position,
            rest: state.rest.take(),
        }
    }

    /// Parks the subscriber before its task writes to the socket itself, and returns the
    /// rest of a frame the fan-out wrote in part, to write first. The feed finds the link
    /// parked on its next poll and takes over from the position reached.
    pub fn park_for_write(&self) -> Option<Bytes> {
        self.take().rest
    }

    /// Whether the writer lets the fan-out start writing.
    pub(crate) fn writer_ready(&self) -> bool {
        self.state.lock().writer.as_ref().is_some_and(|w| w.ready())
    }

    /// The position reached.
    pub(crate) fn position(&self) -> Cursor {
        self.state.lock().position
    }

    /// When the fan-out last wrote to the socket.
    pub fn last_write(&self) -> Option<Instant> {
        self.state.lock().last_write
    }

    /// Goes direct at `position` (called under the topic's lock, with `position` its head).
    pub(crate) fn go_direct(&self, position: Cursor) -> bool {
        let mut state = self.state.lock();
        if state.writer.is_none() {
            return false;
        }
        state.position = position;
        if !state.direct {
            state.direct = true;
            self.direct_now.fetch_add(1, Ordering::AcqRel);
        }
        true
    }

    /// Stops direct delivery (counted), with the state locked.
    fn leave(&self, state: &mut LinkState) {
        if state.direct {
            state.direct = false;
            self.direct_now.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Parks the subscriber: the fan-out stops writing to it and its task is woken.
    fn park(&self, state: &mut LinkState) {
        self.leave(state);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Drops the writer (and the socket with it): the subscription ended.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        self.leave(&mut state);
        state.writer = None;
        state.waker = None;
    }

    pub(crate) fn slot(&self) -> usize {
        self.state.lock().slot
    }

    /// Writes `message` when it is the subscriber's next one; parks it when the socket does
    /// not take the whole frame or the message is not the next one.
    /// Writes `message` to this subscriber if it is direct and the message is its next one;
    /// returns where the delivery counts and its bytes, when it was delivered.
    fn offer(
        &self,
        message: &Message,
        now: Instant,
    ) -> Option<(&'static dyn DeliveryCounter, usize)> {
        let mut state = self.state.lock();
        if !state.direct {
            return None;
        }
        let cursor = message.cursor();
        if cursor.epoch == state.position.epoch && cursor.seq <= state.position.seq {
            return None;
        }
        if cursor.epoch != state.position.epoch || cursor.seq != state.position.seq + 1 {
            self.park(&mut state);
            return None;
        }
        let writer = state.writer.as_ref()?;
        let frame = writer.frame(message);
        match writer.try_write(frame) {
            Ok(n) => {
                let counted = (writer.counter(), writer.counted_bytes(frame.len(), message));
                state.position = cursor;
                state.last_write = Some(now);
                if n < frame.len() {
                    // Part of the frame is on the wire: the task writes the rest, then goes
                    // on after this message.
                    state.rest = Some(frame.slice(n..));
                    self.park(&mut state);
                }
                Some(counted)
            }
            // Would block, or failed: the task writes (or finds the error) from here on.
            Err(_) => {
                self.park(&mut state);
                None
            }
        }
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

/// Subscribers per fan-out group: a topic's direct subscribers are fanned out by group, the
/// first on the publishing thread and each other one on a task of its own, so a large topic's
/// fan-out spreads over the runtime's workers as the per-subscriber tasks did.
const GROUP: usize = 1024;

/// A topic's direct subscribers, in groups of [`GROUP`] slots (attach and detach in O(1)).
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
    groups: Vec<Arc<Group>>,
    /// Free slots (`group * GROUP + index`).
    free: Vec<usize>,
}

/// One group's subscribers, the messages waiting to be fanned out to them, and the lock of
/// the one thread or task fanning out to them.
#[derive(Default)]
pub(crate) struct Group {
    subs: Mutex<GroupSubs>,
    queue: Mutex<Queue>,
    pub(crate) running: Mutex<()>,
}

#[derive(Default)]
struct GroupSubs {
    slots: Vec<Option<Arc<DirectSub>>>,
    len: usize,
    /// What the fan-out walks, rebuilt only after a change.
    snapshot: Option<Arc<[Arc<DirectSub>]>>,
}

#[derive(Default)]
struct Queue {
    messages: Vec<Arc<Message>>,
    /// Messages were dropped from a full queue: every subscriber of the group is parked and
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

    /// A new subscriber at `position`, attached (not direct yet).
    pub(crate) fn attach(&self, writer: Box<dyn DirectWriter>, position: Cursor) -> Arc<DirectSub> {
        let sub = Arc::new(DirectSub::new(writer, position, self.direct_now.clone()));
        let mut slots = self.slots.lock();
        let slot = match slots.free.pop() {
            Some(slot) => slot,
            None => {
                slots.groups.push(Arc::default());
                let first = (slots.groups.len() - 1) * GROUP;
                slots.free.extend((first..first + GROUP).rev());
                slots.free.pop().expect("a fresh group has free slots")
            }
        };
        let mut group = slots.groups[slot / GROUP].subs.lock();
        let index = slot % GROUP;
        if group.slots.len() <= index {
            group.slots.resize(index + 1, None);
        }
        group.slots[index] = Some(sub.clone());
        group.len += 1;
        group.snapshot = None;
        sub.state.lock().slot = slot;
        self.attached.fetch_add(1, Ordering::AcqRel);
        sub
    }

    pub(crate) fn detach(&self, sub: &DirectSub) {
        let slot = sub.slot();
        sub.close();
        let mut slots = self.slots.lock();
        let Some(group) = slots.groups.get(slot / GROUP).cloned() else {
            return;
        };
        let mut subs = group.subs.lock();
        let same = subs
            .slots
            .get(slot % GROUP)
            .and_then(|s| s.as_deref())
            .is_some_and(|s| std::ptr::eq(s, sub));
        if !same {
            return;
        }
        subs.slots[slot % GROUP] = None;
        subs.len -= 1;
        subs.snapshot = None;
        drop(subs);
        slots.free.push(slot);
        if self.attached.fetch_sub(1, Ordering::AcqRel) == 1 {
            *slots = Slots::default();
        }
    }

    /// Queues `message` for the fan-out of every group with subscribers; called under the
    /// topic's lock, so each queue is in the topic's order. At most `capacity` wait in a
    /// group: past that the oldest are dropped and the group's subscribers are parked (they
    /// recover from history, as a lagging subscriber does).
    pub(crate) fn queue(&self, message: &Arc<Message>, capacity: usize) {
        let slots = self.slots.lock();
        for group in &slots.groups {
            if group.subs.lock().len == 0 {
                continue;
            }
            let mut queue = group.queue.lock();
            if queue.messages.len() >= capacity.max(1) {
                queue.messages.clear();
                queue.overflowed = true;
            }
            queue.messages.push(message.clone());
        }
    }

    /// Fans the queued messages out: the first group with work on this thread, every other
    /// one on a task of its own (when there is a runtime). A group another thread is at
    /// already is left to it: it takes these messages too.
    pub(crate) fn fan_out(&self) {
        let groups: Vec<Arc<Group>> = self.slots.lock().groups.clone();
        let mut here = None;
        for group in groups {
            if !group.has_work() {
                continue;
            }
            if here.is_none() {
                here = Some(group);
                continue;
            }
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move { group.fan_out() });
                }
                Err(_) => group.fan_out(),
            }
        }
        if let Some(group) = here {
            group.fan_out();
        }
    }

    /// Holds every group's fan-out, as another thread fanning out would.
    #[cfg(test)]
    pub(crate) fn running_for_test(&self) -> Vec<Arc<Group>> {
        self.slots.lock().groups.clone()
    }
}

impl Group {
    fn has_work(&self) -> bool {
        let queue = self.queue.lock();
        !queue.messages.is_empty() || queue.overflowed
    }

    fn snapshot(&self) -> Arc<[Arc<DirectSub>]> {
        let mut subs = self.subs.lock();
        if let Some(snapshot) = &subs.snapshot {
            return snapshot.clone();
        }
        let snapshot: Arc<[Arc<DirectSub>]> = subs.slots.iter().flatten().cloned().collect();
        subs.snapshot = Some(snapshot.clone());
        snapshot
    }

    /// Fans the group's queued messages out until its queue is empty, unless another thread
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
                    for sub in subs.iter() {
                        let mut state = sub.state.lock();
                        if state.direct {
                            sub.park(&mut state);
                        }
                    }
                    continue;
                }
                let now = Instant::now();
                for message in &messages {
                    let latency = now.saturating_duration_since(message.published_at());
                    let mut tally = Tally::default();
                    for sub in subs.iter() {
                        if let Some((counter, bytes)) = sub.offer(message, now) {
                            tally.add(counter, bytes, latency);
                        }
                    }
                    tally.flush(latency);
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
