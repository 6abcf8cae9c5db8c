//! One topic: a broadcast channel for live delivery and a bounded history for resume.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::broadcast;

use crate::cursor::Cursor;
use crate::direct::{DirectSet, DirectSub};
use crate::history::{History, LossReason};
use crate::lag::LagPolicy;
use crate::message::{Message, Payload};
use crate::name::{EventName, TopicName};
use crate::pattern::PatternIndex;

mod unsent;
pub use unsent::Unsent;

/// Limits of every topic.
#[derive(Clone, Debug)]
pub struct TopicConfig {
    /// Capacity of the live broadcast channel: how far a subscriber may fall behind before it
    /// lags. tokio allocates it up front, about 32 bytes a slot.
    pub channel_capacity: usize,
    /// Most messages kept in history for resume.
    pub history_len: usize,
    /// Longest time a message is kept in history.
    pub history_ttl: Duration,
    /// Positions come from a shared log (a cluster bridge), not from this node: a topic's
    /// epoch is not known here until the log delivers its first message, so until then a
    /// resume cursor of any epoch is taken as "not arrived yet" rather than as lost.
    pub log_carried: bool,
    /// What happens to this topic's subscribers that fall behind, when not the feed's own
    /// policy (a namespace's `lag_policy`).
    pub lag_policy: Option<LagPolicy>,
    /// Its namespace allows delta compression: each message records the message before it
    /// as the base its deltas apply to ([`crate::delta`]).
    pub delta: bool,
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self {
            channel_capacity: 128,
            history_len: 256,
            history_ttl: Duration::from_secs(300),
            log_carried: false,
            lag_policy: None,
            delta: false,
        }
    }
}

/// What a new subscriber gets: the live receiver, the messages to replay before it, and
/// whether messages were lost.
#[derive(Debug)]
pub struct Subscription {
    /// Live messages, starting right after the replay.
    pub receiver: broadcast::Receiver<Arc<Message>>,
    /// The subscriber's position: `replay` holds exactly the messages after it, and the
    /// receiver the ones after those.
    pub start: Cursor,
    /// Messages after the requested cursor, oldest first.
    pub replay: Vec<Arc<Message>>,
    /// Set when the requested cursor could not be honoured; the subscriber then starts live.
    pub lost: Option<LossReason>,
}

/// A page of a topic's history ([`Topic::history`]).
#[derive(Clone, Debug)]
pub struct HistoryPage {
    /// The messages, oldest first.
    pub messages: Vec<Arc<Message>>,
    /// Why messages after the position asked for are not all held, when they are not: the
    /// page then starts at the oldest message held.
    pub lost: Option<LossReason>,
    /// Whether more messages follow the page (ask again after its last one).
    pub more: bool,
}

/// Counts describing a topic at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicStats {
    /// The topic.
    pub name: TopicName,
    /// Live subscribers on this node.
    pub subscribers: usize,
    /// Position of the newest message.
    pub head: Cursor,
    /// Messages in history.
    pub history_len: usize,
    /// Messages this node has delivered on the topic since it created it (the admin console
    /// derives message rates from it).
    pub messages: u64,
}

/// Where the log places a topic nobody published to yet, as this node reads the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogStart {
    /// The log's epoch and how far this node has read the topic's part of the log: the
    /// topic's head, hence the opening cursor its subscribers get.
    pub at: Cursor,
    /// The sequence number from which this node has read every entry of that part of the log
    /// (so it holds every message of the topic after it): a resume from a cursor at or after
    /// it is exact.
    pub floor: u64,
}

#[derive(Debug)]
struct State {
    epoch: u64,
    head: u64,
    /// Messages appended, for [`TopicStats::messages`].
    messages: u64,
    history: History,
    /// Last publish, subscribe or unsubscribe.
    last_active: Instant,
    /// How long an unused topic is kept (its epoch with it) after `last_active`.
    keep_idle: Duration,
    /// Whether `epoch` is the stream's real one: always for a local topic; for a log-carried
    /// topic once the log delivered a message.
    anchored: bool,
    /// The registry's count of topics a subscription created and no message reached yet,
    /// while this is one of them (its channel then has one slot).
    unpublished: Option<Arc<AtomicUsize>>,
    /// The live channel.
    sender: broadcast::Sender<Arc<Message>>,
    /// The full channel's capacity, `channel_capacity`.
    capacity: usize,
    /// The newest message's position and data, when the topic's messages carry a delta base
    /// ([`TopicConfig::delta`]).
    last: Option<Box<(Cursor, Payload)>>,
    delta: bool,
}

/// One topic. Publishing assigns the next position, stores the message in history and sends it
/// on the broadcast channel under one short mutex, so that a subscriber that joins under the
/// same mutex sees every message exactly once: in its replay or on its receiver.
///
/// A topic that a subscription created costs memory in proportion to its use: until its first
/// message its live channel has one slot, not `channel_capacity` (128 slots, ~4 KB). The first
/// message gives it the full channel; receivers of the small one see it closed and subscribe
/// again from their position ([`crate::Feed`] does), replaying that message from history.
#[derive(Debug)]
pub struct Topic {
    name: TopicName,
    /// The lag policy of the topic's namespace, if it sets one.
    lag_policy: Option<LagPolicy>,
    state: Mutex<State>,
    /// Subscribers the publisher writes to itself ([`crate::direct`]).
    pub(crate) direct: DirectSet,
    /// The registry's patterns, handed every message ([`crate::pattern`]).
    patterns: Option<Arc<PatternIndex>>,
}

impl Topic {
    /// A new, empty topic with a fresh random epoch.
    pub fn new(name: TopicName, config: &TopicConfig) -> Self {
        Self::with_epoch(name, config, rand::random::<u64>() | 1)
    }

    /// A new, empty topic in the given epoch.
    pub fn with_epoch(name: TopicName, config: &TopicConfig, epoch: u64) -> Self {
        Self::create(name, config, epoch, None)
    }

    /// A new, empty log-carried topic whose place the log already gave ([`LogStart`]): anchored
    /// from the start, its head where this node has read the log to, its history complete
    /// from the floor, so its opening cursor is one the log honours on any node.
    pub fn anchored_in(name: TopicName, config: &TopicConfig, start: LogStart) -> Self {
        let topic = Self::create(name, config, start.at.epoch, None);
        topic.anchor_at(start);
        topic
    }

    fn anchor_at(&self, start: LogStart) {
        let mut state = self.state.lock();
        state.anchored = true;
        state.head = start.at.seq;
        state.history.reset(start.floor.min(start.at.seq));
    }

    /// A new topic created by a subscription: counted in `unpublished` and given a one-slot
    /// channel until its first message; in the log's epoch when it is `known`.
    pub(crate) fn for_subscriber(
        name: TopicName,
        config: &TopicConfig,
        unpublished: Arc<AtomicUsize>,
        known: Option<LogStart>,
    ) -> Self {
        let epoch = known.map_or_else(|| rand::random::<u64>() | 1, |k| k.at.epoch);
        let topic = Self::create(name, config, epoch, Some(unpublished));
        if let Some(start) = known {
            topic.anchor_at(start);
        }
        topic
    }

    fn create(
        name: TopicName,
        config: &TopicConfig,
        epoch: u64,
        unpublished: Option<Arc<AtomicUsize>>,
    ) -> Self {
        let capacity = config.channel_capacity.max(1);
        let (sender, _) = broadcast::channel(if unpublished.is_some() { 1 } else { capacity });
        Self {
            name,
            lag_policy: config.lag_policy,
            state: Mutex::new(State {
                epoch,
                head: 0,
                messages: 0,
                history: History::new(config.history_len, config.history_ttl),
                last_active: Instant::now(),
                keep_idle: config.history_ttl,
                anchored: !config.log_carried,
                unpublished,
                sender,
                capacity,
                last: None,
                delta: config.delta,
            }),
            direct: DirectSet::default(),
            patterns: None,
        }
    }

    /// The topic, handing every message it delivers to `patterns` as well.
    pub(crate) fn watched_by(mut self, patterns: Arc<PatternIndex>) -> Self {
        self.patterns = Some(patterns);
        self
    }

    /// The topic's name.
    pub fn name(&self) -> &TopicName {
        &self.name
    }

    /// How many messages a live subscriber may fall behind before it lags.
    pub fn channel_capacity(&self) -> usize {
        self.state.lock().capacity
    }

    /// The lag policy its namespace sets for its subscribers, if any (else the feed's).
    pub fn lag_policy(&self) -> Option<LagPolicy> {
        self.lag_policy
    }

    /// Position of the newest message (`seq` 0 before the first).
    pub fn head(&self) -> Cursor {
        let state = self.state.lock();
        Cursor::new(state.epoch, state.head)
    }

    /// [`Self::head`] when it is a position in the topic's real stream (always for a local
    /// topic; for a log-carried one once the log gave its epoch), so that a subscription after it
    /// on any node misses nothing published later.
    pub fn anchored_head(&self) -> Option<Cursor> {
        let state = self.state.lock();
        state.anchored.then(|| Cursor::new(state.epoch, state.head))
    }

    /// Publishes a message at the next position and returns it.
    pub fn publish(&self, event: Option<EventName>, data: Payload) -> Arc<Message> {
        let message = self.publish_unsent(event, data);
        self.fan_out();
        message
    }

    /// Publishes as [`Self::publish`] does, except that the message waits for the next
    /// [`Self::fan_out`] to reach the subscribers the publisher writes to itself
    /// ([`crate::direct`]); subscribers with a task of their own get it now. A publisher of
    /// several messages in a row calls [`Self::fan_out`] once after the last, so each such
    /// subscriber takes them in one write (one batch frame when it asked for batches),
    /// instead of a write per message. The messages wait in the fan-out's bounded queue
    /// (past `channel_capacity` the subscribers recover from history, as laggards do).
    pub fn publish_unsent(&self, event: Option<EventName>, data: Payload) -> Arc<Message> {
        let mut state = self.state.lock();
        let cursor = Cursor::new(state.epoch, state.head + 1);
        self.append(
            &mut state,
            Message::new(self.name.clone(), cursor, event, data),
        )
    }

    /// Delivers a message whose position was assigned elsewhere (a shared log such as a
    /// Kafka partition or a Redis stream), so that every node gives it the same id.
    ///
    /// Idempotent: a position at or below the head of the same epoch has been delivered
    /// already and is dropped (`None`), which removes the duplicates an at-least-once log
    /// replays. A position in another epoch means the log's history was lost or replaced:
    /// the topic moves to that epoch with an empty history, and subscribers still holding
    /// the old epoch's cursors will be told messages were lost when they resume.
    pub fn ingest(
        &self,
        position: Cursor,
        event: Option<EventName>,
        data: Payload,
    ) -> Option<Arc<Message>> {
        let message = self.ingest_unsent(position, event, data)?;
        self.fan_out();
        Some(message)
    }

    /// [`Self::ingest`], leaving the direct subscribers' fan-out to a later
    /// [`Self::fan_out`], as [`Self::publish_unsent`] does: a reader of several records in a
    /// row fans out once after the last.
    pub fn ingest_unsent(
        &self,
        position: Cursor,
        event: Option<EventName>,
        data: Payload,
    ) -> Option<Arc<Message>> {
        let mut state = self.state.lock();
        if position.epoch == state.epoch && position.seq <= state.head {
            return None;
        }
        state.anchored = true;
        if position.epoch != state.epoch {
            state.epoch = position.epoch;
            state.history.reset(position.seq.saturating_sub(1));
        }
        Some(self.append(
            &mut state,
            Message::new(self.name.clone(), position, event, data),
        ))
    }

    /// Writes queued messages to the direct subscribers, unless no one is attached or
    /// another thread is at it (which then writes them).
    pub fn fan_out(&self) {
        if self.direct.len() > 0 {
            self.direct.fan_out();
        }
    }

    /// Attaches a subscriber at `position` whose frames the publisher may write itself
    /// ([`crate::direct`]); it is not direct until [`Self::try_direct`] says so.
    /// False when `sub` is attached to a topic already.
    pub(crate) fn attach_direct(&self, sub: &Arc<DirectSub>, position: Cursor) -> bool {
        self.direct.attach(sub, position)
    }

    /// Detaches a direct subscriber: the fan-out stops writing to it and lets go of it (its
    /// socket closes when the connection lets go too).
    pub(crate) fn detach_direct(&self, sub: &DirectSub) {
        self.direct.detach(sub);
        self.touch();
    }

    /// Makes `sub` direct when `position` is the topic's head: every later message is then
    /// queued for the fan-out after this, under the same lock, so none is missed. `delta`
    /// and `based` as [`DirectSub::go_direct`] takes them.
    pub(crate) fn try_direct(
        &self,
        sub: &DirectSub,
        position: Cursor,
        delta: bool,
        based: bool,
    ) -> bool {
        let state = self.state.lock();
        if Cursor::new(state.epoch, state.head) != position {
            return false;
        }
        sub.go_direct(position, delta, based)
    }

    fn append(&self, state: &mut State, mut message: Message) -> Arc<Message> {
        // The message this one follows: a direct subscriber at it takes this one next
        // (positions assigned by a shared log are not consecutive numbers).
        let previous = Cursor::new(state.epoch, state.head);
        if state.delta {
            // A delta applies to the message right before: a base from before a gap, an
            // epoch change or an anchoring is no base.
            if let Some(last) = state.last.take().filter(|last| last.0 == previous) {
                let (cursor, data) = *last;
                message = message.with_base(cursor, data);
            }
            state.last = Some(Box::new((message.cursor(), message.data().clone())));
        }
        let message = Arc::new(message);
        if let Some(count) = state.unpublished.take() {
            count.fetch_sub(1, Ordering::Relaxed);
            // In use now: the full channel. Dropping the one-slot sender closes it for its
            // receivers, which subscribe again from their position.
            state.sender = broadcast::channel(state.capacity).0;
        }
        state.head = message.cursor().seq;
        state.messages += 1;
        let now = Instant::now();
        state.last_active = now;
        state.history.evict_expired(now);
        state.history.push(message.clone());
        // No receiver is not an error: the message stays in history.
        let _ = state.sender.send(message.clone());
        if self.direct.len() > 0 {
            self.direct.queue(&message, previous, state.capacity);
        }
        // Under the lock: each pattern channel carries this topic's messages in order.
        if let Some(patterns) = &self.patterns {
            patterns.deliver(&message);
        }
        message
    }

    /// Subscribes live, replaying the history after `from` first when it covers it.
    pub fn subscribe(&self, from: Option<Cursor>) -> Subscription {
        let mut state = self.state.lock();
        state.last_active = Instant::now();
        let head = Cursor::new(state.epoch, state.head);
        let receiver = state.sender.subscribe();
        let Some(from) = from else {
            return Subscription {
                receiver,
                start: head,
                replay: Vec::new(),
                lost: None,
            };
        };
        if (from.epoch == state.epoch && from.seq > state.head)
            || (from.epoch != state.epoch && !state.anchored)
        {
            // Ahead of this node: the client saw messages (on another node) that this node's
            // log reader has not delivered yet. Nothing is lost; the feed skips them when they
            // arrive. On a log-carried topic whose epoch is not known yet the log decides: its
            // first message either continues the cursor's epoch or is reported as a new one.
            return Subscription {
                receiver,
                start: from,
                replay: Vec::new(),
                lost: None,
            };
        }
        if from.epoch != state.epoch {
            return Subscription {
                receiver,
                start: head,
                replay: Vec::new(),
                lost: Some(LossReason::Epoch),
            };
        }
        state.history.evict_expired(Instant::now());
        match state.history.since(from.seq) {
            Ok(replay) => Subscription {
                receiver,
                start: from,
                replay,
                lost: None,
            },
            Err(reason) => Subscription {
                receiver,
                start: head,
                replay: Vec::new(),
                lost: Some(reason),
            },
        }
    }

    /// Subscribes live with the newest `n` messages history holds replayed first (fewer when
    /// it holds fewer, and no loss signal for those it does not: the subscriber asked for at
    /// most `n`).
    pub fn subscribe_last(&self, n: usize) -> Subscription {
        let mut state = self.state.lock();
        state.last_active = Instant::now();
        state.history.evict_expired(Instant::now());
        let receiver = state.sender.subscribe();
        let (before, mut replay) = state.history.all();
        let skip = replay.len().saturating_sub(n);
        let seq = match skip.checked_sub(1) {
            Some(i) => replay[i].cursor().seq,
            None => before,
        };
        replay.drain(..skip);
        Subscription {
            receiver,
            start: Cursor::new(state.epoch, seq),
            replay,
            lost: None,
        }
    }

    /// Subscribes live with everything history holds replayed first: for a subscriber that
    /// has seen nothing of the topic yet and must not miss what arrived since it joined.
    pub(crate) fn subscribe_all(&self) -> Subscription {
        let mut state = self.state.lock();
        state.history.evict_expired(Instant::now());
        let receiver = state.sender.subscribe();
        let (before, replay) = state.history.all();
        Subscription {
            receiver,
            start: Cursor::new(state.epoch, before),
            replay,
            lost: None,
        }
    }

    /// The history after `after`, for a subscriber that lagged behind the live channel.
    pub fn since(&self, after: Cursor) -> Result<Vec<Arc<Message>>, LossReason> {
        let state = self.state.lock();
        if after.epoch != state.epoch {
            return Err(LossReason::Epoch);
        }
        state.history.since(after.seq)
    }

    /// Up to `limit` messages of history, oldest first: the newest `limit` without `after`,
    /// else the first `limit` after it. A position of another epoch, or one older than what is
    /// held, gives the oldest messages held and says so in `lost`; a position ahead of the head
    /// (same epoch) gives nothing: those messages have not arrived yet.
    pub fn history(&self, after: Option<Cursor>, limit: usize) -> HistoryPage {
        let state = self.state.lock();
        let (held, lost) = match after {
            None => {
                let (_, all) = state.history.all();
                let skip = all.len().saturating_sub(limit);
                return HistoryPage {
                    messages: all[skip..].to_vec(),
                    lost: None,
                    more: false,
                };
            }
            Some(after) if after.epoch != state.epoch => {
                (state.history.all().1, Some(LossReason::Epoch))
            }
            Some(after) => match state.history.since(after.seq) {
                Ok(held) => (held, None),
                Err(reason) => (state.history.all().1, Some(reason)),
            },
        };
        let more = held.len() > limit;
        let mut messages = held;
        messages.truncate(limit);
        HistoryPage {
            messages,
            lost,
            more,
        }
    }

    /// Live subscribers on this node.
    pub fn subscriber_count(&self) -> usize {
        let receivers = self.state.lock().sender.receiver_count();
        receivers + self.direct.direct_now()
    }

    /// [`Self::subscriber_count`] split: the direct subscribers (the fan-out writes to their
    /// sockets itself) and the rest (woken to take each message from the channel).
    pub fn subscriber_split(&self) -> (usize, usize) {
        let receivers = self.state.lock().sender.receiver_count();
        (self.direct.direct_now(), receivers)
    }

    /// Whether any subscriber is attached on this node (live or direct).
    pub fn has_subscribers(&self) -> bool {
        self.direct.len() > 0 || self.state.lock().sender.receiver_count() > 0
    }

    /// A snapshot of the topic's counts.
    pub fn stats(&self) -> TopicStats {
        let state = self.state.lock();
        TopicStats {
            name: self.name.clone(),
            subscribers: state.sender.receiver_count() + self.direct.direct_now(),
            head: Cursor::new(state.epoch, state.head),
            history_len: state.history.len(),
            messages: state.messages,
        }
    }

    /// Stops counting the topic as unpublished, if it still was.
    pub(crate) fn release_unpublished(&self) {
        if let Some(count) = self.state.lock().unpublished.take() {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Records that a subscriber left, so the topic (and its epoch) is kept for the history
    /// window after that: a client coming back within it resumes instead of being told
    /// messages were lost.
    pub fn touch(&self) {
        self.state.lock().last_active = Instant::now();
    }

    /// Evicts expired history; true when nothing is left to keep the topic for: no
    /// subscriber, no history, and no activity for the history window. Under `pressure`
    /// (the registry is full) the quiet window is not waited for: a topic with no subscriber
    /// and no history goes at once (a client resuming it later starts a new epoch).
    pub(crate) fn is_idle(&self, now: Instant, pressure: bool) -> bool {
        let mut state = self.state.lock();
        if state.sender.receiver_count() > 0 || self.direct.len() > 0 {
            return false;
        }
        state.history.evict_expired(now);
        state.history.is_empty()
            && (pressure || now.saturating_duration_since(state.last_active) >= state.keep_idle)
    }
}

#[cfg(test)]
mod tests;
