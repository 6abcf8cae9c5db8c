//! A topic's direct subscribers ([`DirectSet`]), in cohorts of [`COHORT`] fanned out each by
//! one thread at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::link::{Attachment, DirectSub};
use super::writer::DeliveryCounter;
use crate::cursor::Cursor;
use crate::message::Message;

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
pub(super) struct Entry {
    pub(super) sub: Arc<DirectSub>,
    pub(super) generation: u32,
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

    pub(super) fn snapshot(&self) -> Arc<[Entry]> {
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
