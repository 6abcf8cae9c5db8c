//! A subscriber's merged view of its topics: replay, live messages, lag recovery and loss
//! signals, in one cancel-safe `next()` that every transport drives the same way.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tokio::sync::broadcast;

use bytes::Bytes;
use tokio_stream::Stream as _;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::cursor::Cursor;
use crate::direct::DirectSub;
use crate::error::FeedError;
use crate::history::LossReason;
pub use crate::lag::LagPolicy;
use crate::message::Message;
use crate::name::TopicName;
use crate::pattern::{self, Patterns};
use crate::registry::Registry;
use crate::topic::{Subscription, Topic};

/// Where a new subscription begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// With the next message published.
    Live,
    /// After this position (a resumed subscription): the history after it is replayed first,
    /// or a loss reported when history no longer covers it.
    After(Cursor),
    /// With the newest `n` messages history holds (fewer if it holds fewer), then live.
    Last(usize),
}

/// One thing for a transport to do.
#[derive(Clone, Debug)]
pub enum FeedEvent {
    /// Deliver this message.
    Message(Arc<Message>),
    /// Tell the client that messages of `topic` were lost; it is live again after this.
    Lost {
        /// The topic.
        topic: TopicName,
        /// Why.
        reason: LossReason,
    },
    /// The subscriber lagged on `topic` and the missed messages follow from history (count it;
    /// nothing to tell the client).
    Recovered {
        /// The topic.
        topic: TopicName,
        /// Messages the live channel skipped.
        missed: u64,
    },
    /// The subscriber lagged on `topic` under [`LagPolicy::Coalesce`]: it skipped `skipped`
    /// messages and goes on from the newest (count it; nothing to tell the client).
    Coalesced {
        /// The topic.
        topic: TopicName,
        /// Messages skipped (at least; the live channel's count).
        skipped: u64,
    },
    /// The subscriber is too slow: close the connection with a reason saying so.
    Disconnect {
        /// The topic it lagged on.
        topic: TopicName,
        /// Messages the live channel skipped.
        missed: u64,
    },
    /// The rest of a frame the topic's fan-out wrote in part to a direct subscriber's socket
    /// ([`Feed::link`]): write it before anything else.
    Rest(Bytes),
}

#[derive(Debug)]
struct Sub {
    topic: Arc<Topic>,
    position: Cursor,
}

/// What a subscription's live receiver yields.
enum Live {
    Message(Arc<Message>),
    Lagged(u64),
    /// The topic replaced its channel (its first message gave it the full one): subscribe
    /// again from the position reached.
    Closed,
}

/// A topic's live receiver as a stream that says when its channel closed, rather than
/// ending silently inside the `StreamMap`. The receiver becomes a stream (a boxed future)
/// only when first polled: a feed that goes direct before that never allocates one.
enum LiveStream {
    Receiver(broadcast::Receiver<Arc<Message>>),
    Stream(BroadcastStream<Arc<Message>>),
    Closed,
}

impl LiveStream {
    fn new(receiver: broadcast::Receiver<Arc<Message>>) -> Self {
        Self::Receiver(receiver)
    }
}

impl std::fmt::Debug for LiveStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveStream")
    }
}

impl tokio_stream::Stream for LiveStream {
    type Item = Live;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Live>> {
        if let Self::Receiver(_) = &*self {
            let Self::Receiver(receiver) = std::mem::replace(&mut *self, Self::Closed) else {
                unreachable!("matched above")
            };
            *self = Self::Stream(BroadcastStream::new(receiver));
        }
        let Self::Stream(stream) = &mut *self else {
            return Poll::Ready(None);
        };
        match std::pin::Pin::new(stream).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(message))) => Poll::Ready(Some(Live::Message(message))),
            Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => {
                Poll::Ready(Some(Live::Lagged(n)))
            }
            Poll::Ready(None) => {
                *self = Self::Closed;
                Poll::Ready(Some(Live::Closed))
            }
        }
    }
}

/// The topics of one connection.
///
/// Every message passes a per-topic position check, so replayed and live messages join
/// without a gap or a duplicate, and a lagged subscriber recovering from history never sees a
/// message twice.
#[derive(Debug)]
pub struct Feed {
    subs: Vec<Sub>,
    streams: StreamMap<TopicName, LiveStream>,
    pending: VecDeque<FeedEvent>,
    policy: LagPolicy,
    /// `u32` (it packs beside `policy`): every connection holds a feed.
    max_subscriptions: u32,
    /// The one topic's direct delivery, when the transport set it up ([`Self::link`]).
    link: Option<Link>,
    /// The rest of a frame the fan-out wrote in part, for the transport to write first.
    rest: Option<Box<Bytes>>,
    /// Prefix pattern subscriptions ([`Self::subscribe_pattern`]); boxed, as most feeds
    /// hold none.
    patterns: Option<Box<Patterns>>,
}

#[derive(Debug)]
struct Link {
    sub: Arc<DirectSub>,
    /// The subscriber is direct (as far as this feed knows: the fan-out may have parked it
    /// since): it holds no live receiver.
    live: bool,
}

impl Feed {
    /// An empty feed.
    pub fn new(policy: LagPolicy, max_subscriptions: usize) -> Self {
        Self {
            subs: Vec::new(),
            streams: StreamMap::new(),
            pending: VecDeque::new(),
            policy,
            max_subscriptions: u32::try_from(max_subscriptions).unwrap_or(u32::MAX),
            link: None,
            rest: None,
            patterns: None,
        }
    }

    /// Lets the topic's publisher write this feed's messages itself through the connection's
    /// `link` while the feed is idle, instead of waking the feed's task for each
    /// ([`crate::direct`]). Only for a feed of one topic; subscribing to another topic ends
    /// it. False when not taken (or when `link` is attached elsewhere).
    ///
    /// The transport must call [`Self::hold`] before it writes anything itself, and write
    /// what it returns first, and write [`FeedEvent::Rest`] when it comes.
    pub fn link(&mut self, link: Arc<DirectSub>) -> bool {
        if self.subs.len() != 1 || self.link.is_some() || self.has_patterns() {
            return false;
        }
        let sub = &self.subs[0];
        if !sub.topic.attach_direct(&link, sub.position) {
            return false;
        }
        self.link = Some(Link {
            sub: link,
            live: false,
        });
        true
    }

    /// Stops direct delivery for a moment, before the transport writes something of its own:
    /// the live receiver takes over from the position reached. Returns the rest of a frame
    /// the fan-out wrote in part, to write first. The feed goes direct again when it is idle.
    pub fn hold(&mut self) -> Option<Bytes> {
        if self.link.as_ref().is_some_and(|l| l.live) {
            self.take_over();
        }
        self.rest.take().map(|rest| *rest)
    }

    /// The link to the topic's fan-out, while the feed has one.
    pub fn direct_link(&self) -> Option<&Arc<DirectSub>> {
        self.link.as_ref().map(|l| &l.sub)
    }

    /// When the topic's publisher last wrote to the socket itself.
    pub fn last_direct_write(&self) -> Option<std::time::Instant> {
        self.link.as_ref().and_then(|l| l.sub.last_write())
    }

    /// Whether the topic's publisher writes this feed's messages now.
    pub fn is_direct(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|l| l.live && l.sub.is_direct())
    }

    /// The linked subscriber was parked (or is being held): take its position and partial
    /// frame, and subscribe again live from there.
    fn take_over(&mut self) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let handover = link.sub.take();
        let was_live = std::mem::replace(&mut link.live, false);
        if let Some(rest) = handover.rest {
            // Boxed: rare (a partial write), and every idle feed carries the field.
            self.rest = Some(Box::new(rest));
        }
        let Some(sub) = self.subs.first_mut() else {
            return;
        };
        sub.position = handover.position;
        if was_live {
            self.resume_after_park();
        }
    }

    /// Subscribes the linked topic live again from the position the fan-out reached, with
    /// what it missed meanwhile from history. A gap history no longer covers is a lag, under
    /// the feed's policy.
    fn resume_after_park(&mut self) {
        let Some(sub) = self.subs.first_mut() else {
            return;
        };
        let name = sub.topic.name().clone();
        let policy = sub.topic.lag_policy().unwrap_or(self.policy);
        if sub.position.seq == 0 && sub.topic.head().epoch != sub.position.epoch {
            // Nothing seen yet, and the topic's log set its epoch since: as `accept` does,
            // take what the topic holds in that epoch.
            return self.reopen(name);
        }
        let mut again = sub.topic.subscribe(Some(sub.position));
        match again.lost {
            // Parked further behind than the live channel holds: a lag, as a receiver would
            // report it (a hold for the transport's own write is not one).
            None if policy == LagPolicy::Coalesce
                && again.replay.len() > sub.topic.channel_capacity() =>
            {
                // All but the newest are skipped.
                let skipped = again.replay.len() as u64 - 1;
                again = coalesce(sub, &mut self.pending, skipped);
            }
            None => {}
            Some(reason @ LossReason::Epoch) => {
                // The topic's log moved to another epoch: told, then given everything the
                // topic holds in the new one, as `accept` does for a live subscriber.
                again = sub.topic.subscribe_all();
                sub.position = again.start;
                self.pending.push_back(FeedEvent::Lost {
                    topic: name.clone(),
                    reason,
                });
            }
            Some(_) if policy == LagPolicy::Coalesce => {
                again = coalesce(sub, &mut self.pending, 0);
            }
            Some(_) if policy == LagPolicy::RecoverOrNotify => {
                // Told, then given what history still holds, as a lagging receiver would.
                again = sub.topic.subscribe_all();
                sub.position = again.start;
                self.pending.push_back(FeedEvent::Lost {
                    topic: name.clone(),
                    reason: LossReason::Lagged,
                });
            }
            Some(_) => self.pending.push_back(FeedEvent::Disconnect {
                topic: name.clone(),
                missed: 0,
            }),
        }
        self.pending
            .extend(again.replay.into_iter().map(FeedEvent::Message));
        self.streams.insert(name, LiveStream::new(again.receiver));
    }

    /// Ends direct delivery for good (a second topic, an unsubscribe, the end).
    fn unlink(&mut self) {
        if self.link.is_none() {
            return;
        }
        self.take_over();
        if let (Some(link), Some(sub)) = (self.link.take(), self.subs.first()) {
            sub.topic.detach_direct(&link.sub);
        }
    }

    /// Goes direct when idle and the topic has nothing this feed has not seen.
    fn try_go_direct(&mut self) -> bool {
        let (Some(link), [sub]) = (self.link.as_mut(), self.subs.as_slice()) else {
            return false;
        };
        if link.live || !self.pending.is_empty() || self.rest.is_some() || !link.sub.writer_ready()
        {
            return false;
        }
        if !sub.topic.try_direct(&link.sub, sub.position) {
            return false;
        }
        link.live = true;
        let name = sub.topic.name().clone();
        self.streams.remove(&name);
        true
    }

    /// Subscribes to `topic`, resuming after `from` when given, and returns the position the
    /// subscription starts at. The loss signal and the replay, if any, come out of
    /// [`Self::next`] first. Subscribing again to a topic already held changes nothing.
    pub fn subscribe(
        &mut self,
        topic: Arc<Topic>,
        from: Option<Cursor>,
    ) -> Result<Cursor, FeedError> {
        let start = match from {
            Some(cursor) => Start::After(cursor),
            None => Start::Live,
        };
        self.subscribe_from(topic, start)
    }

    /// Subscribes to `topic` from `start` ([`Self::subscribe`] with a choice of where to
    /// begin); returns the position the subscription starts after.
    pub fn subscribe_from(&mut self, topic: Arc<Topic>, start: Start) -> Result<Cursor, FeedError> {
        if let Some(sub) = self.subs.iter().find(|s| s.topic.name() == topic.name()) {
            return Ok(sub.position);
        }
        if self.len() >= self.max_subscriptions as usize {
            return Err(FeedError::TooManySubscriptions {
                max: self.max_subscriptions as usize,
            });
        }
        self.unlink();
        // A topic a pattern delivered goes on from there, not from its head: what the
        // pattern had not delivered yet comes from history.
        let seen = (self.patterns.as_ref()).and_then(|p| p.position(topic.name().as_str()));
        let start = match (start, seen) {
            (Start::Live, Some(position)) => Start::After(position),
            (start, _) => start,
        };
        if self.subs.capacity() == 0 && self.streams.is_empty() {
            // Most connections hold one topic: room for exactly one (a growing `Vec` starts
            // at four), measured at ~190 bytes per idle connection.
            self.subs.reserve_exact(1);
            self.streams = StreamMap::with_capacity(1);
        }
        let sub = match start {
            Start::Live => topic.subscribe(None),
            Start::After(cursor) => topic.subscribe(Some(cursor)),
            Start::Last(n) => topic.subscribe_last(n),
        };
        let name = topic.name().clone();
        if let Some(reason) = sub.lost {
            self.pending.push_back(FeedEvent::Lost {
                topic: name.clone(),
                reason,
            });
        }
        self.pending
            .extend(sub.replay.into_iter().map(FeedEvent::Message));
        self.streams.insert(name, LiveStream::new(sub.receiver));
        self.subs.push(Sub {
            topic,
            position: sub.start,
        });
        Ok(sub.start)
    }

    /// Drops the subscription to `topic` (a topic or a pattern); true when there was one.
    pub fn unsubscribe(&mut self, topic: &str) -> bool {
        if topic.ends_with('*') {
            return self.unsubscribe_pattern(topic);
        }
        let Some(sub) = self.subs.iter().find(|s| s.topic.name().as_str() == topic) else {
            return false;
        };
        if let Some(patterns) = self.patterns.as_mut().filter(|p| p.covers(topic)) {
            // A pattern delivers it from now on, from where this subscription stopped.
            patterns.set_position(sub.topic.name(), sub.position, true);
        }
        self.unlink();
        let before = self.subs.len();
        self.subs.retain(|s| {
            let keep = s.topic.name().as_str() != topic;
            if !keep {
                s.topic.touch();
            }
            keep
        });
        let name = self.streams.keys().find(|k| k.as_str() == topic).cloned();
        if let Some(name) = name {
            self.streams.remove(&name);
        }
        before != self.subs.len()
    }

    /// Number of subscriptions (a pattern counts as one).
    pub fn len(&self) -> usize {
        self.subs.len() + self.patterns.as_ref().map_or(0, |p| p.len())
    }

    /// Whether there is no subscription.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the feed holds a pattern subscription (its messages then come from several
    /// topics whatever [`Self::len`] says).
    pub fn has_patterns(&self) -> bool {
        self.patterns.as_ref().is_some_and(|p| !p.is_empty())
    }

    /// Whether `name` (a topic or a pattern) is subscribed to.
    pub fn holds(&self, name: &str) -> bool {
        if name.ends_with('*') {
            return self.patterns.as_ref().is_some_and(|p| p.holds(name));
        }
        self.subs.iter().any(|s| s.topic.name().as_str() == name)
    }

    /// Every subscription: the topics in subscription order, then the patterns.
    pub fn subscriptions(&self) -> impl Iterator<Item = &TopicName> {
        self.subs
            .iter()
            .map(|s| s.topic.name())
            .chain(self.patterns.iter().flat_map(|p| p.names()))
    }

    /// [`Self::positions`], then the topics the patterns delivered (at most
    /// [`pattern::MAX_PATTERN_TOPICS`], least recently delivered first): what a client
    /// resumes from (SSE `id:`, long-poll `cursor`).
    pub fn resume_positions(&self) -> impl Iterator<Item = (&TopicName, Cursor)> {
        let by_pattern = (self.patterns.iter())
            .flat_map(|p| p.seen())
            .filter(|(t, _)| !self.subs.iter().any(|s| s.topic.name() == *t));
        self.positions().chain(by_pattern)
    }

    /// Subscribes to the prefix pattern `pattern` (a [`TopicName::is_pattern`] name): every
    /// message published from now on to a topic of `registry` that the pattern matches,
    /// topics created later included, comes out of [`Self::next`] with its own topic and
    /// position. A message several of the feed's subscriptions match (another pattern, or
    /// its topic named too) is delivered once: they share the topic's one position.
    ///
    /// `resume` holds positions the client reached (any topics; those the pattern matches
    /// are taken): each such topic replays its history after its position, or reports a
    /// loss, as [`Self::subscribe`] does. A matching topic not in `resume` is delivered from
    /// now on only. Subscribing again to a pattern held changes nothing.
    pub fn subscribe_pattern<'a>(
        &mut self,
        registry: &Registry,
        pattern: TopicName,
        resume: impl IntoIterator<Item = (&'a TopicName, Cursor)>,
    ) -> Result<(), FeedError> {
        debug_assert!(pattern.is_pattern());
        if self.holds(pattern.as_str()) {
            return Ok(());
        }
        if self.len() >= self.max_subscriptions as usize {
            return Err(FeedError::TooManySubscriptions {
                max: self.max_subscriptions as usize,
            });
        }
        self.unlink();
        let policy = registry.config().topic_config(pattern.prefix()).lag_policy;
        let prefix = pattern.prefix().to_owned();
        let patterns = self.patterns.get_or_insert_with(Box::default);
        // The live channel first: a message published while the history is read is then in
        // both, and the position check drops the second.
        let receiver = patterns.add(pattern.clone(), registry.patterns().clone(), policy)?;
        for (topic, cursor) in resume {
            // The feed's patterns track at most MAX_PATTERN_TOPICS positions together: a
            // longer resume list would replay histories whose positions are then forgotten
            // (and could deliver twice). The rest are live from now on.
            if patterns.tracked() >= pattern::MAX_PATTERN_TOPICS {
                break;
            }
            if !pattern::matches(&prefix, topic.as_str())
                || self.subs.iter().any(|s| s.topic.name() == topic)
                || patterns.position(topic.as_str()).is_some()
            {
                continue;
            }
            let Some(found) = registry.get(topic.as_str()) else {
                // Not on this node (yet): what arrives up to the position is skipped.
                patterns.set_position(topic, cursor, false);
                continue;
            };
            let sub = found.subscribe(Some(cursor));
            if let Some(reason) = sub.lost {
                self.pending.push_back(FeedEvent::Lost {
                    topic: topic.clone(),
                    reason,
                });
            }
            self.pending
                .extend(sub.replay.into_iter().map(FeedEvent::Message));
            patterns.set_position(topic, sub.start, false);
        }
        self.streams.insert(pattern, LiveStream::new(receiver));
        Ok(())
    }

    fn unsubscribe_pattern(&mut self, pattern: &str) -> bool {
        let Some(patterns) = self.patterns.as_mut() else {
            return false;
        };
        let key = self.streams.keys().find(|k| k.as_str() == pattern).cloned();
        if let Some(key) = key {
            self.streams.remove(&key);
        }
        let removed = patterns.remove(pattern);
        // What the pattern had queued (a resume's replay) goes with it, so that subscribing
        // and unsubscribing in a loop cannot pile up replays faster than they are sent.
        if removed && !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            self.pending = pending
                .into_iter()
                .filter(|e| e.topic().is_none_or(|t| self.is_subscribed(t)))
                .collect();
        }
        removed
    }

    /// Whether the message `message`, read from `pattern`'s channel, is for this feed to
    /// take: `pattern` is the held pattern that delivers its topic. (A topic also subscribed
    /// to by name comes on both its own receiver and the pattern's; both pass its one
    /// position check, so whichever comes first is delivered, once, without a gap.)
    fn pattern_delivers(&self, pattern: &TopicName, message: &Message) -> bool {
        // A topic also subscribed to by name is delivered by its own receiver alone: the
        // pattern's channel, shared by all its topics, may lag (or skip ahead after a lag)
        // while the topic's own receiver does not, and the one position check would then
        // drop the named topic's messages the pattern skipped.
        !self.subs.iter().any(|s| s.topic.name() == message.topic())
            && self
                .patterns
                .as_ref()
                .and_then(|p| p.deliverer(message.topic().as_str()))
                == Some(pattern)
    }

    /// A pattern's channel lagged: its subscriber missed `missed` messages of topics it
    /// cannot name, so nothing is recovered from history. Under `Coalesce` it goes on with
    /// what the channel still holds; under `RecoverOrNotify` it is told (the loss names the
    /// pattern); otherwise it is disconnected.
    fn on_pattern_lag(&mut self, pattern: TopicName, missed: u64) {
        let policy = (self.patterns.as_ref())
            .and_then(|p| p.policy(pattern.as_str()))
            .unwrap_or(self.policy);
        self.pending.push_back(match policy {
            LagPolicy::Coalesce => FeedEvent::Coalesced {
                topic: pattern,
                skipped: missed,
            },
            LagPolicy::RecoverOrNotify => FeedEvent::Lost {
                topic: pattern,
                reason: LossReason::Lagged,
            },
            LagPolicy::RecoverOrDisconnect | LagPolicy::Disconnect => FeedEvent::Disconnect {
                topic: pattern,
                missed,
            },
        });
    }

    /// Passes `message` of a topic a pattern covers when it is the next one on its topic.
    fn accept_matched(&mut self, message: Arc<Message>) -> Option<FeedEvent> {
        let patterns = self.patterns.as_mut()?;
        let topic = message.topic();
        if !patterns.covers(topic.as_str()) {
            return None;
        }
        let cursor = message.cursor();
        match patterns.position(topic.as_str()) {
            // A topic followed through a pattern alone is forgotten when its history
            // expires (no receiver of its own keeps it) and comes back in a new epoch at its
            // next publish: its first message, after a position reached live, loses nothing.
            Some(position)
                if position.epoch != cursor.epoch
                    && position.seq != 0
                    && !(cursor.seq == 1 && patterns.delivered_live(topic.as_str())) =>
            {
                // As `accept` does: a new epoch is a loss for a subscriber that saw any of
                // the old one; the message follows the signal.
                let topic = topic.clone();
                patterns.set_position(&topic, Cursor::new(cursor.epoch, 0), true);
                self.pending.push_front(FeedEvent::Message(message));
                return Some(FeedEvent::Lost {
                    topic,
                    reason: LossReason::Epoch,
                });
            }
            Some(position) if position.epoch == cursor.epoch && cursor.seq <= position.seq => {
                return None;
            }
            _ => {}
        }
        patterns.set_position(topic, cursor, true);
        Some(FeedEvent::Message(message))
    }

    /// Each subscribed topic with the position of the last message delivered on it (or where
    /// the subscription started), in subscription order.
    pub fn positions(&self) -> impl Iterator<Item = (&TopicName, Cursor)> {
        // A linked feed has one topic, whose position the fan-out moves while direct.
        let direct = self
            .link
            .as_ref()
            .filter(|l| l.live)
            .map(|l| l.sub.position());
        self.subs
            .iter()
            .map(move |s| (s.topic.name(), direct.unwrap_or(s.position)))
    }

    /// The next event. Cancel-safe: dropping the future loses nothing, so it can sit in a
    /// `select!` beside timers and socket reads. Never returns while there is no subscription
    /// (or while the topic's publisher delivers directly).
    pub async fn next(&mut self) -> FeedEvent {
        std::future::poll_fn(|cx| self.poll_next_event(cx)).await
    }

    fn poll_next_event(&mut self, cx: &mut Context<'_>) -> Poll<FeedEvent> {
        loop {
            if let Some(rest) = self.rest.take() {
                return Poll::Ready(FeedEvent::Rest(*rest));
            }
            if let Some(event) = self.pop_pending() {
                return Poll::Ready(event);
            }
            if let Some(link) = self.link.as_ref().filter(|l| l.live) {
                if link.sub.register(cx.waker()) {
                    return Poll::Pending;
                }
                // Parked by the fan-out: this task takes over.
                self.take_over();
                continue;
            }
            // Caught up with the topic: go direct before the receiver is ever polled (it
            // holds nothing this feed has not seen).
            if self.try_go_direct() {
                continue;
            }
            match std::pin::Pin::new(&mut self.streams).poll_next(cx) {
                Poll::Ready(Some((name, item))) if name.is_pattern() => match item {
                    Live::Message(message) => {
                        if self.pattern_delivers(&name, &message)
                            && let Some(event) = self.accept(message)
                        {
                            return Poll::Ready(event);
                        }
                    }
                    Live::Lagged(missed) => self.on_pattern_lag(name, missed),
                    // Never while the feed holds the receiver; the stream is gone now.
                    Live::Closed => {}
                },
                Poll::Ready(Some((name, item))) => match item {
                    Live::Message(message) => {
                        if let Some(event) = self.accept(message) {
                            return Poll::Ready(event);
                        }
                    }
                    Live::Lagged(missed) => self.on_lag(name, missed),
                    Live::Closed => self.reopen(name),
                },
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// The next event if one is ready now, without waiting.
    pub fn try_next(&mut self) -> Option<FeedEvent> {
        let mut cx = Context::from_waker(Waker::noop());
        match pin!(self.next()).as_mut().poll(&mut cx) {
            Poll::Ready(event) => Some(event),
            Poll::Pending => None,
        }
    }

    fn pop_pending(&mut self) -> Option<FeedEvent> {
        while let Some(event) = self.pending.pop_front() {
            let event = match event {
                FeedEvent::Message(message) => self.accept(message),
                other => other
                    .topic()
                    .is_some_and(|t| self.is_subscribed(t))
                    .then_some(other),
            };
            if event.is_some() {
                return event;
            }
        }
        None
    }

    fn is_subscribed(&self, topic: &TopicName) -> bool {
        self.subs.iter().any(|s| s.topic.name() == topic)
            || self
                .patterns
                .as_ref()
                .is_some_and(|p| p.holds(topic.as_str()) || p.covers(topic.as_str()))
    }

    /// Passes `message` when it is the subscriber's next one on its topic.
    fn accept(&mut self, message: Arc<Message>) -> Option<FeedEvent> {
        let Some(sub) = self
            .subs
            .iter_mut()
            .find(|s| s.topic.name() == message.topic())
        else {
            return self.accept_matched(message);
        };
        let cursor = message.cursor();
        if cursor.epoch != sub.position.epoch {
            // The topic moved to another epoch (its shared log was reset, or this node
            // learned the log's epoch after the subscriber joined). Nothing was lost if the
            // subscriber had seen nothing yet; otherwise say so, then go on in the new epoch.
            let seen_nothing = sub.position.seq == 0;
            sub.position = Cursor::new(cursor.epoch, 0);
            if !seen_nothing {
                let topic = sub.topic.name().clone();
                self.pending.push_front(FeedEvent::Message(message));
                return Some(FeedEvent::Lost {
                    topic,
                    reason: LossReason::Epoch,
                });
            }
            return self.accept(message);
        }
        if cursor.seq <= sub.position.seq {
            return None;
        }
        sub.position = cursor;
        Some(FeedEvent::Message(message))
    }

    /// The topic's channel was replaced: a new receiver, and what it missed meanwhile from
    /// history (the position check drops anything already delivered).
    fn reopen(&mut self, topic: TopicName) {
        let Some(sub) = self.subs.iter_mut().find(|s| *s.topic.name() == topic) else {
            return;
        };
        // A subscriber that has seen nothing takes everything the topic holds, in the epoch
        // its first message set (on a log-fed node that is the log's, learned from this very
        // message), as `accept` follows an epoch for it. One whose position the topic can no
        // longer continue from is told so, then gets everything held, as `accept` would.
        let (lost, again) = if sub.position.seq == 0 {
            (None, sub.topic.subscribe_all())
        } else {
            let again = sub.topic.subscribe(Some(sub.position));
            match again.lost {
                None => (None, again),
                Some(reason) => (Some(reason), sub.topic.subscribe_all()),
            }
        };
        if lost.is_some() || sub.position.seq == 0 {
            sub.position = again.start;
        }
        if let Some(reason) = lost {
            self.pending.push_back(FeedEvent::Lost {
                topic: topic.clone(),
                reason,
            });
        }
        self.pending
            .extend(again.replay.into_iter().map(FeedEvent::Message));
        self.streams.insert(topic, LiveStream::new(again.receiver));
    }

    fn on_lag(&mut self, topic: TopicName, missed: u64) {
        let Some(sub) = self.subs.iter_mut().find(|s| *s.topic.name() == topic) else {
            return;
        };
        let policy = sub.topic.lag_policy().unwrap_or(self.policy);
        if policy == LagPolicy::Coalesce {
            // A fresh receiver at the head, after the newest message held: what the old one
            // still buffers is skipped.
            let again = coalesce(sub, &mut self.pending, missed);
            self.pending
                .extend(again.replay.into_iter().map(FeedEvent::Message));
            self.streams.insert(topic, LiveStream::new(again.receiver));
            return;
        }
        let recovered = match policy {
            LagPolicy::Disconnect | LagPolicy::Coalesce => None,
            LagPolicy::RecoverOrNotify | LagPolicy::RecoverOrDisconnect => {
                sub.topic.since(sub.position).ok()
            }
        };
        match recovered {
            Some(replay) => {
                self.pending
                    .push_back(FeedEvent::Recovered { topic, missed });
                self.pending
                    .extend(replay.into_iter().map(FeedEvent::Message));
            }
            None if policy == LagPolicy::RecoverOrNotify => {
                self.pending.push_back(FeedEvent::Lost {
                    topic,
                    reason: LossReason::Lagged,
                });
            }
            None => self
                .pending
                .push_back(FeedEvent::Disconnect { topic, missed }),
        }
    }
}

/// Skips a lagging subscription to the newest message held ([`LagPolicy::Coalesce`]): its
/// position moves there (never back: a position ahead of this node stays), the skip is
/// counted in `pending`, and the new subscription (the newest message, then live) returned.
fn coalesce(sub: &mut Sub, pending: &mut VecDeque<FeedEvent>, missed: u64) -> Subscription {
    let again = sub.topic.subscribe_last(1);
    let forward = again.start.epoch != sub.position.epoch || again.start.seq > sub.position.seq;
    let skipped = if forward {
        again.start.seq.saturating_sub(sub.position.seq)
    } else {
        0
    };
    if forward {
        sub.position = again.start;
    }
    pending.push_back(FeedEvent::Coalesced {
        topic: sub.topic.name().clone(),
        skipped: skipped.max(missed),
    });
    again
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Some(mut patterns) = self.patterns.take() {
            // Their receivers first: the index forgets a pattern with its last receiver.
            let keys: Vec<TopicName> = patterns.names().cloned().collect();
            for key in keys {
                self.streams.remove(&key);
            }
            patterns.clear();
        }
        if let (Some(link), Some(sub)) = (self.link.take(), self.subs.first()) {
            sub.topic.detach_direct(&link.sub);
        }
        for sub in &self.subs {
            sub.topic.touch();
        }
    }
}

impl FeedEvent {
    /// The topic the event is about (none for [`FeedEvent::Rest`]).
    pub fn topic(&self) -> Option<&TopicName> {
        match self {
            FeedEvent::Message(m) => Some(m.topic()),
            FeedEvent::Lost { topic, .. }
            | FeedEvent::Recovered { topic, .. }
            | FeedEvent::Coalesced { topic, .. }
            | FeedEvent::Disconnect { topic, .. } => Some(topic),
            FeedEvent::Rest(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Payload;
    use crate::topic::TopicConfig;
    use std::time::Duration;

    fn topic(name: &str, capacity: usize, history_len: usize) -> Arc<Topic> {
        let config = TopicConfig {
            channel_capacity: capacity,
            history_len,
            history_ttl: Duration::from_secs(60),
            log_fed: false,
            lag_policy: None,
        };
        Arc::new(Topic::with_epoch(TopicName::new(name).unwrap(), &config, 5))
    }

    fn publish(t: &Topic, n: u64) {
        for i in 0..n {
            t.publish(None, Payload::from_value(&serde_json::json!(i)));
        }
    }

    fn drain(feed: &mut Feed) -> Vec<String> {
        std::iter::from_fn(|| feed.try_next())
            .map(|e| match e {
                FeedEvent::Message(m) => format!("{}:{}", m.topic(), m.cursor().seq),
                FeedEvent::Lost { topic, reason } => format!("lost {topic} {}", reason.as_str()),
                FeedEvent::Recovered { topic, missed } => format!("recovered {topic} {missed}"),
                FeedEvent::Coalesced { topic, skipped } => format!("coalesced {topic} {skipped}"),
                FeedEvent::Disconnect { topic, .. } => format!("disconnect {topic}"),
                FeedEvent::Rest(rest) => format!("rest {}", String::from_utf8_lossy(&rest)),
            })
            .collect()
    }

    /// A socket in memory for direct delivery: takes up to `room` bytes, then would block.
    #[derive(Clone, Default)]
    struct Socket {
        written: Arc<parking_lot::Mutex<Vec<u8>>>,
        room: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Socket {
        fn with_room(room: usize) -> Self {
            let socket = Self::default();
            socket.room.store(room, std::sync::atomic::Ordering::SeqCst);
            socket
        }

        /// The data of every whole SSE frame written, in order, and what follows the last.
        fn frames(&self) -> (Vec<String>, String) {
            let text = String::from_utf8(self.written.lock().clone()).unwrap();
            let mut parts: Vec<&str> = text.split("\n\n").collect();
            let tail = parts.pop().unwrap_or_default().to_string();
            let data = parts
                .iter()
                .map(|f| {
                    f.lines()
                        .find_map(|l| l.strip_prefix("data: "))
                        .unwrap()
                        .to_string()
                })
                .collect();
            (data, tail)
        }
    }

    impl crate::DirectWriter for Socket {
        fn frame<'m>(&self, message: &'m Message) -> &'m Bytes {
            message.sse_frame()
        }

        fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
            let room = self.room.load(std::sync::atomic::Ordering::SeqCst);
            if room == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let n = room.min(buf.len());
            self.room.fetch_sub(n, std::sync::atomic::Ordering::SeqCst);
            self.written.lock().extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn counter(&self) -> &'static dyn crate::DeliveryCounter {
            &NO_COUNT
        }
    }

    struct NoCount;

    impl crate::DeliveryCounter for NoCount {
        fn delivered(&self, _n: u64, _bytes: u64, _latency: Duration) {}
    }

    static NO_COUNT: NoCount = NoCount;

    #[test]
    fn a_coalescing_topic_s_slow_subscriber_skips_to_the_newest_message() {
        let config = TopicConfig {
            channel_capacity: 4,
            history_len: 8,
            history_ttl: Duration::from_secs(60),
            log_fed: false,
            lag_policy: Some(LagPolicy::Coalesce),
        };
        let ticker = Arc::new(Topic::with_epoch(TopicName::new("t").unwrap(), &config, 5));
        // The feed's own policy is to disconnect; the topic's wins.
        let mut feed = Feed::new(LagPolicy::Disconnect, 4);
        feed.subscribe(ticker.clone(), None).unwrap();
        publish(&ticker, 10);
        let got = drain(&mut feed);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with("coalesced t "), "{got:?}");
        assert_eq!(got[1], "t:10");
        publish(&ticker, 1);
        assert_eq!(drain(&mut feed), ["t:11"]);
        let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
        assert_eq!(positions, ["t=5-11"]);
    }

    #[tokio::test]
    async fn a_parked_direct_subscriber_of_a_coalescing_topic_skips_to_the_newest() {
        // History covers the gap (64 > 10), the channel does not (2): a lag all the same.
        let config = TopicConfig {
            channel_capacity: 2,
            history_len: 64,
            history_ttl: Duration::from_secs(60),
            log_fed: false,
            lag_policy: Some(LagPolicy::Coalesce),
        };
        let a = Arc::new(Topic::with_epoch(TopicName::new("a").unwrap(), &config, 5));
        let socket = Socket::with_room(usize::MAX);
        let mut feed = linked(&a, &socket);
        let groups = a.direct.running_for_test();
        let running: Vec<_> = groups.iter().map(|g| g.running.lock()).collect();
        publish(&a, 9);
        drop(running);
        publish(&a, 1);
        assert!(!feed.is_direct());
        assert_eq!(drain(&mut feed), ["coalesced a 9", "a:10"]);
    }

    #[test]
    fn a_subscription_can_start_with_the_last_n_messages_held() {
        let a = topic("a", 16, 4);
        publish(&a, 6); // seq 1..=6; history holds 3..=6
        let start = |n| {
            let mut feed = Feed::new(LagPolicy::default(), 4);
            let after = feed.subscribe_from(a.clone(), Start::Last(n)).unwrap();
            (after.seq, drain(&mut feed))
        };
        assert_eq!(start(2), (4, vec!["a:5".into(), "a:6".into()]));
        assert_eq!(start(0), (6, vec![]));
        // More than history holds: what it holds, and no loss signal.
        let (after, all) = start(10);
        assert_eq!((after, all.len()), (2, 4), "{all:?}");
        assert_eq!(all[0], "a:3");
        // Live messages follow the replay without a gap or a duplicate.
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe_from(a.clone(), Start::Last(1)).unwrap();
        publish(&a, 1);
        assert_eq!(drain(&mut feed), ["a:6", "a:7"]);
    }

    fn linked(t: &Arc<Topic>, socket: &Socket) -> Feed {
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe(t.clone(), None).unwrap();
        assert!(feed.link(Arc::new(DirectSub::new(socket.clone()))));
        assert!(feed.try_next().is_none());
        assert!(feed.is_direct(), "an idle linked feed goes direct");
        feed
    }

    #[tokio::test]
    async fn an_idle_linked_feed_is_written_by_the_publisher_and_counted_once() {
        let a = topic("a", 8, 8);
        let socket = Socket::with_room(usize::MAX);
        let mut feed = linked(&a, &socket);
        assert_eq!(a.subscriber_count(), 1);
        publish(&a, 3);
        assert_eq!(
            socket.frames(),
            (vec!["0".into(), "1".into(), "2".into()], String::new())
        );
        assert!(
            drain(&mut feed).is_empty(),
            "the task is not given them again"
        );
        let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
        assert_eq!(positions, ["a=5-3"]);
        assert_eq!(a.subscriber_count(), 1);
        drop(feed);
        assert_eq!(a.subscriber_count(), 0);
        publish(&a, 1);
        assert_eq!(
            socket.frames().0.len(),
            3,
            "nothing is written after the end"
        );
    }

    #[tokio::test]
    async fn a_socket_that_would_block_parks_the_feed_which_resumes_from_history() {
        let a = topic("a", 8, 8);
        let first = a.publish(None, Payload::from_value(&serde_json::json!(0)));
        let frame_len = first.sse_frame().len();
        // Room for one frame and a half of the next (frames are the same length here).
        let socket = Socket::with_room(frame_len + frame_len / 2);
        let mut feed = linked(&a, &socket);
        publish(&a, 4); // data 0..=3 at seq 2..=5
        let (whole, tail) = socket.frames();
        assert_eq!(whole, ["0"]);
        assert!(!tail.is_empty(), "half a frame is on the wire");
        assert!(!feed.is_direct());
        // The task writes the rest of the frame first, then the messages from history.
        let got = drain(&mut feed);
        assert!(got[0].starts_with("rest "), "{got:?}");
        assert_eq!(format!("{tail}{}", &got[0][5..]), first_frame_of(&a, 3));
        assert_eq!(got[1..], ["a:4", "a:5"]);
        // Caught up and idle: direct again, and the next message is written by the publisher.
        assert!(feed.try_next().is_none());
        assert!(feed.is_direct());
        socket
            .room
            .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
        publish(&a, 1);
        let written = String::from_utf8(socket.written.lock().clone()).unwrap();
        assert!(written.ends_with(&first_frame_of(&a, 6)), "{written}");
        assert!(drain(&mut feed).is_empty());
    }

    fn first_frame_of(t: &Topic, seq: u64) -> String {
        let page = t.history(None, 64);
        let m = page
            .messages
            .iter()
            .find(|m| m.cursor().seq == seq)
            .unwrap();
        String::from_utf8(m.sse_frame().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn hold_hands_the_stream_to_the_task_until_it_is_idle_again() {
        let a = topic("a", 8, 8);
        let socket = Socket::with_room(usize::MAX);
        let mut feed = linked(&a, &socket);
        publish(&a, 1);
        assert_eq!(feed.hold(), None);
        assert!(!feed.is_direct());
        publish(&a, 2);
        assert_eq!(
            socket.frames().0,
            ["0"],
            "held: the publisher does not write"
        );
        assert_eq!(drain(&mut feed), ["a:2", "a:3"]);
        assert!(feed.is_direct());
        assert_eq!(a.subscriber_count(), 1);
    }

    #[tokio::test]
    async fn a_second_topic_ends_direct_delivery() {
        let (a, b) = (topic("a", 8, 8), topic("b", 8, 8));
        let socket = Socket::with_room(usize::MAX);
        let mut feed = linked(&a, &socket);
        publish(&a, 1);
        feed.subscribe(b.clone(), None).unwrap();
        assert!(!feed.is_direct());
        publish(&a, 1);
        publish(&b, 1);
        let mut got = drain(&mut feed);
        got.sort();
        assert_eq!(got, ["a:2", "b:1"]);
        assert_eq!(socket.frames().0, ["0"]);
        assert_eq!(a.subscriber_count(), 1);
    }

    #[test]
    fn publishers_on_several_threads_are_written_in_order_once() {
        let a = topic("a", 1024, 1024);
        let sockets: Vec<Socket> = (0..8).map(|_| Socket::with_room(usize::MAX)).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let mut feeds: Vec<Feed> = sockets.iter().map(|s| linked(&a, s)).collect();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| publish(&a, 100));
            }
        });
        for (socket, feed) in sockets.iter().zip(&mut feeds) {
            // Written by the fan-out, or (had it parked) by the task: together, every
            // position once, in order.
            let text = String::from_utf8(socket.written.lock().clone()).unwrap();
            let mut seqs: Vec<u64> = text
                .lines()
                .filter_map(|l| l.strip_prefix("id: a="))
                .map(|id| id.parse::<Cursor>().unwrap().seq)
                .collect();
            seqs.extend(drain(feed).iter().map(|e| e[2..].parse::<u64>().unwrap()));
            assert_eq!(seqs, (1..=400).collect::<Vec<_>>());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_topic_is_fanned_out_by_groups_on_several_tasks_in_order() {
        let a = topic("a", 64, 64);
        let sockets: Vec<Socket> = (0..2500).map(|_| Socket::with_room(usize::MAX)).collect();
        let _feeds: Vec<Feed> = sockets.iter().map(|s| linked(&a, s)).collect();
        assert_eq!(a.subscriber_count(), 2500);
        publish(&a, 20);
        let expected: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        for socket in &sockets {
            while socket.frames().0.len() < 20 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "a group was not fanned out"
                );
                tokio::task::yield_now().await;
            }
            assert_eq!(socket.frames(), (expected.clone(), String::new()));
        }
    }

    /// A topic fed by a shared log (positions assigned elsewhere), epoch 5.
    fn log_fed(name: &str) -> Arc<Topic> {
        let config = TopicConfig {
            channel_capacity: 8,
            history_len: 8,
            history_ttl: Duration::from_secs(60),
            log_fed: true,
            lag_policy: None,
        };
        Arc::new(Topic::with_epoch(TopicName::new(name).unwrap(), &config, 5))
    }

    fn text(v: &str) -> Payload {
        Payload::from_value(&serde_json::json!(v))
    }

    #[tokio::test]
    async fn a_direct_subscriber_whose_log_moves_to_another_epoch_is_told_then_gets_the_message() {
        let a = log_fed("a");
        a.ingest(Cursor::new(5, 1), None, text("before")).unwrap();
        let socket = Socket::with_room(usize::MAX);
        let mut feed = linked(&a, &socket);
        a.ingest(Cursor::new(5, 2), None, text("direct")).unwrap();
        assert_eq!(socket.frames().0, ["direct"]);
        // The log lost its data: its next message is in a new epoch.
        a.ingest(Cursor::new(9, 1), None, text("after")).unwrap();
        assert_eq!(drain(&mut feed), ["lost a epoch", "a:1"]);
        assert_eq!(socket.frames().0, ["direct"]);
    }

    #[tokio::test]
    async fn a_log_fed_topic_s_gapped_positions_are_written_directly_without_waking_the_task() {
        // A Redis stream's ids or a shared Kafka partition's offsets: one topic's positions
        // are not consecutive numbers.
        let a = log_fed("a");
        a.ingest(Cursor::new(5, 10), None, text("before")).unwrap();
        let socket = Socket::with_room(usize::MAX);
        let mut feed = linked(&a, &socket);
        for (seq, data) in [(25, "one"), (26, "two"), (4_000, "three")] {
            a.ingest(Cursor::new(5, seq), None, text(data)).unwrap();
            assert!(feed.is_direct(), "parked at {seq}");
        }
        assert_eq!(socket.frames().0, ["one", "two", "three"]);
        assert!(drain(&mut feed).is_empty(), "the task is not given them");
        let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
        assert_eq!(positions, ["a=5-4000"]);
    }

    #[tokio::test]
    async fn a_queue_overflow_parks_direct_subscribers_who_recover_under_the_lag_policy() {
        let a = topic("a", 2, 2);
        let socket = Socket::with_room(usize::MAX);
        let mut feed = linked(&a, &socket);
        // Hold the fan-out so that messages queue past the channel's capacity.
        let groups = a.direct.running_for_test();
        let running: Vec<_> = groups.iter().map(|g| g.running.lock()).collect();
        publish(&a, 5);
        drop(running);
        publish(&a, 1);
        assert!(!feed.is_direct());
        assert_eq!(drain(&mut feed), ["lost a lagged", "a:5", "a:6"]);
    }

    #[tokio::test]
    async fn merges_topics_and_tracks_positions() {
        let (a, b) = (topic("a", 8, 8), topic("b", 8, 8));
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe(a.clone(), None).unwrap();
        feed.subscribe(b.clone(), None).unwrap();
        publish(&a, 2);
        publish(&b, 1);
        let mut got = drain(&mut feed);
        got.sort();
        assert_eq!(got, ["a:1", "a:2", "b:1"]);
        let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
        assert_eq!(positions, ["a=5-2", "b=5-1"]);
    }

    #[tokio::test]
    async fn replay_then_live_without_duplicates() {
        let a = topic("a", 8, 8);
        publish(&a, 3);
        let mut feed = Feed::new(LagPolicy::default(), 4);
        assert_eq!(
            feed.subscribe(a.clone(), Some(Cursor::new(5, 1))).unwrap(),
            Cursor::new(5, 1)
        );
        publish(&a, 2);
        assert_eq!(drain(&mut feed), ["a:2", "a:3", "a:4", "a:5"]);
    }

    #[tokio::test]
    async fn lost_cursor_is_signalled_first() {
        let a = topic("a", 8, 2);
        publish(&a, 5);
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe(a.clone(), Some(Cursor::new(5, 1))).unwrap();
        publish(&a, 1);
        assert_eq!(drain(&mut feed), ["lost a expired", "a:6"]);
    }

    #[tokio::test]
    async fn lagging_subscriber_recovers_from_history() {
        let a = topic("a", 2, 64);
        let mut feed = Feed::new(LagPolicy::RecoverOrNotify, 4);
        feed.subscribe(a.clone(), None).unwrap();
        publish(&a, 10);
        let got = drain(&mut feed);
        assert_eq!(got[0], "recovered a 8");
        let expected: Vec<String> = (1..=10).map(|i| format!("a:{i}")).collect();
        assert_eq!(got[1..], expected[..]);
    }

    #[tokio::test]
    async fn lag_beyond_history_follows_the_policy() {
        for (policy, first) in [
            (LagPolicy::RecoverOrNotify, "lost a lagged"),
            (LagPolicy::RecoverOrDisconnect, "disconnect a"),
            (LagPolicy::Disconnect, "disconnect a"),
        ] {
            let a = topic("a", 2, 3);
            let mut feed = Feed::new(policy, 4);
            feed.subscribe(a.clone(), None).unwrap();
            publish(&a, 10);
            let got = drain(&mut feed);
            assert_eq!(got[0], first, "{policy:?}");
            if policy == LagPolicy::RecoverOrNotify {
                assert_eq!(got[1..], ["a:9", "a:10"]);
            }
        }
    }

    #[tokio::test]
    async fn unsubscribe_drops_queued_events_and_limits_hold() {
        let (a, b) = (topic("a", 8, 8), topic("b", 8, 8));
        publish(&a, 2);
        let mut feed = Feed::new(LagPolicy::default(), 1);
        feed.subscribe(a.clone(), Some(Cursor::new(5, 0))).unwrap();
        assert_eq!(
            feed.subscribe(b, None),
            Err(FeedError::TooManySubscriptions { max: 1 })
        );
        assert!(feed.unsubscribe("a"));
        assert!(!feed.unsubscribe("a"));
        publish(&a, 1);
        assert!(drain(&mut feed).is_empty());
        assert!(feed.is_empty());
        assert_eq!(a.subscriber_count(), 0);
    }

    #[tokio::test]
    async fn follows_the_topic_into_a_new_epoch() {
        let a = topic("a", 8, 8);
        let data = || Payload::from_value(&serde_json::json!(0));
        let mut fresh = Feed::new(LagPolicy::default(), 4);
        fresh.subscribe(a.clone(), None).unwrap();
        let mut seasoned = Feed::new(LagPolicy::default(), 4);
        seasoned.subscribe(a.clone(), None).unwrap();
        publish(&a, 1);
        assert_eq!(drain(&mut seasoned), ["a:1"]);
        assert_eq!(drain(&mut fresh), ["a:1"]);
        // The log's epoch arrives: both follow; whoever had seen messages is told.
        a.ingest(Cursor::new(77, 40), None, data());
        let mut newcomer = Feed::new(LagPolicy::default(), 4);
        let b = topic("b", 8, 8);
        newcomer.subscribe(b.clone(), None).unwrap();
        b.ingest(Cursor::new(77, 3), None, data());
        assert_eq!(drain(&mut newcomer), ["b:3"]);
        assert_eq!(drain(&mut seasoned), ["lost a epoch", "a:40"]);
        a.ingest(Cursor::new(77, 41), None, data());
        assert_eq!(drain(&mut seasoned), ["a:41"]);
    }

    #[tokio::test]
    async fn resuming_ahead_of_a_lagging_node_skips_what_the_client_saw() {
        // Node B has read n=1..2 of the log; the client saw up to n=5 on node A.
        let a = topic("a", 8, 8);
        let data = || Payload::from_value(&serde_json::json!(0));
        for seq in 1..=2 {
            a.ingest(Cursor::new(5, seq), None, data());
        }
        let mut feed = Feed::new(LagPolicy::default(), 4);
        assert_eq!(
            feed.subscribe(a.clone(), Some(Cursor::new(5, 5))).unwrap(),
            Cursor::new(5, 5)
        );
        for seq in 3..=7 {
            a.ingest(Cursor::new(5, seq), None, data());
        }
        assert_eq!(
            drain(&mut feed),
            ["a:6", "a:7"],
            "no loss signal, no duplicate"
        );
    }

    #[tokio::test]
    async fn a_topic_created_by_a_subscriber_grows_its_channel_without_losing_a_message() {
        let registry = crate::Registry::new(crate::RegistryConfig {
            shards: 1,
            max_topics: 8,
            max_unpublished: 8,
            max_patterns: 16,
            namespaces: Default::default(),
            topic: TopicConfig {
                channel_capacity: 8,
                ..TopicConfig::default()
            },
        });
        let name = TopicName::new("lazy").unwrap();
        let (a, created) = registry.get_or_create_for_subscriber(&name).unwrap();
        assert!(created);
        let mut early = Feed::new(LagPolicy::default(), 4);
        early.subscribe(a.clone(), None).unwrap();
        // The first message swaps the one-slot channel for the full one: the early subscriber
        // gets it from history, then the rest live, each once; no lag at 5 < 8.
        publish(&a, 1);
        let mut late = Feed::new(LagPolicy::default(), 4);
        late.subscribe(a.clone(), None).unwrap();
        publish(&a, 5);
        assert_eq!(
            drain(&mut early),
            ["lazy:1", "lazy:2", "lazy:3", "lazy:4", "lazy:5", "lazy:6"]
        );
        assert_eq!(
            drain(&mut late),
            ["lazy:2", "lazy:3", "lazy:4", "lazy:5", "lazy:6"]
        );
        assert_eq!(a.subscriber_count(), 2);
    }

    #[tokio::test]
    async fn a_log_fed_topic_created_by_a_subscriber_follows_the_log_s_epoch() {
        let registry = crate::Registry::new(crate::RegistryConfig {
            shards: 1,
            max_topics: 8,
            max_unpublished: 8,
            max_patterns: 16,
            namespaces: Default::default(),
            topic: TopicConfig {
                log_fed: true,
                lag_policy: None,
                ..TopicConfig::default()
            },
        });
        let (a, _) = registry
            .get_or_create_for_subscriber(&TopicName::new("fed").unwrap())
            .unwrap();
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe(a.clone(), None).unwrap();
        let data = || Payload::from_value(&serde_json::json!(0));
        a.ingest(Cursor::new(77, 10), None, data());
        a.ingest(Cursor::new(77, 11), None, data());
        assert_eq!(drain(&mut feed), ["fed:10", "fed:11"], "no loss signal");
        // A cursor from another epoch, kept until the log spoke, is then reported lost; the
        // log's messages follow.
        let (b, _) = registry
            .get_or_create_for_subscriber(&TopicName::new("fed-b").unwrap())
            .unwrap();
        let mut resumed = Feed::new(LagPolicy::default(), 4);
        resumed
            .subscribe(b.clone(), Some(Cursor::new(5, 9)))
            .unwrap();
        b.ingest(Cursor::new(77, 3), None, data());
        assert_eq!(drain(&mut resumed), ["lost fed-b epoch", "fed-b:3"]);
    }

    fn registry() -> crate::Registry {
        crate::Registry::new(crate::RegistryConfig {
            shards: 4,
            max_topics: 64,
            max_unpublished: 64,
            max_patterns: 16,
            namespaces: Default::default(),
            topic: TopicConfig {
                channel_capacity: 8,
                history_len: 8,
                ..TopicConfig::default()
            },
        })
    }

    fn send(r: &crate::Registry, topic: &str, n: usize) {
        for i in 0..n {
            r.publish(
                &TopicName::new(topic).unwrap(),
                None,
                Payload::from_value(&serde_json::json!(i)),
            )
            .unwrap();
        }
    }

    fn pattern(p: &str) -> TopicName {
        TopicName::subscription(p).unwrap()
    }

    #[tokio::test]
    async fn a_pattern_delivers_every_matching_topic_even_ones_created_later() {
        let r = registry();
        send(&r, "orders.eu", 1);
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe_pattern(&r, pattern("orders.*"), []).unwrap();
        assert_eq!(feed.len(), 1);
        assert!(feed.has_patterns() && feed.holds("orders.*"));
        send(&r, "orders.eu", 1);
        send(&r, "orders.us", 2); // created now
        send(&r, "news", 1);
        send(&r, "ordersx", 1);
        assert_eq!(
            drain(&mut feed),
            ["orders.eu:2", "orders.us:1", "orders.us:2"]
        );
        let ids: Vec<String> = feed
            .resume_positions()
            .map(|(t, c)| format!("{t}={}", c.seq))
            .collect();
        assert_eq!(ids, ["orders.eu=2", "orders.us=2"]);
        assert_eq!(feed.positions().count(), 0, "no topic subscribed by name");
        assert!(feed.unsubscribe("orders.*"));
        assert!(r.patterns().is_empty(), "the node forgot the pattern");
        send(&r, "orders.eu", 1);
        assert!(drain(&mut feed).is_empty());
    }

    #[tokio::test]
    async fn a_resumed_pattern_replays_the_topics_it_saw_and_the_rest_live() {
        let r = registry();
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        send(&r, "a.x", 2);
        drain(&mut feed);
        let resume: Vec<(TopicName, Cursor)> = feed
            .resume_positions()
            .map(|(t, c)| (t.clone(), c))
            .collect();
        drop(feed);
        // Away: a.x goes on, a.y is new, b.z another topic (its resume entry is ignored).
        send(&r, "a.x", 2);
        send(&r, "a.y", 1);
        let mut resumed = Feed::new(LagPolicy::default(), 4);
        let other = TopicName::new("b.z").unwrap();
        let with_other = resume
            .iter()
            .map(|(t, c)| (t, *c))
            .chain([(&other, Cursor::new(1, 1))]);
        resumed
            .subscribe_pattern(&r, pattern("a.*"), with_other)
            .unwrap();
        send(&r, "a.y", 1);
        assert_eq!(drain(&mut resumed), ["a.x:3", "a.x:4", "a.y:2"]);
    }

    #[tokio::test]
    async fn overlapping_subscriptions_deliver_each_message_once() {
        let r = registry();
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe_pattern(&r, pattern("a.b.*"), []).unwrap();
        feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        let (eu, _) = r
            .get_or_create_for_subscriber(&TopicName::new("a.b.c").unwrap())
            .unwrap();
        feed.subscribe(eu, None).unwrap();
        send(&r, "a.b.c", 1);
        send(&r, "a.b.d", 1);
        send(&r, "a.e", 1);
        let mut got = drain(&mut feed);
        got.sort();
        assert_eq!(got, ["a.b.c:1", "a.b.d:1", "a.e:1"]);
        // Named while the pattern has messages of it not yet delivered: each comes once.
        send(&r, "a.e", 2);
        let (e, _) = r
            .get_or_create_for_subscriber(&TopicName::new("a.e").unwrap())
            .unwrap();
        feed.subscribe(e, None).unwrap();
        send(&r, "a.e", 1);
        assert_eq!(drain(&mut feed), ["a.e:2", "a.e:3", "a.e:4"]);
        // Unnamed again, the pattern goes on from where the name stopped.
        assert!(feed.unsubscribe("a.e"));
        send(&r, "a.e", 1);
        assert_eq!(drain(&mut feed), ["a.e:5"]);
        assert!(feed.subscribe_pattern(&r, pattern("a.e.*"), []).is_ok());
        assert!(feed.unsubscribe("a.e.*"));
        // Without the narrower pattern, the wider one delivers its topics.
        assert!(feed.unsubscribe("a.b.*"));
        send(&r, "a.b.d", 1);
        assert_eq!(drain(&mut feed), ["a.b.d:2"]);
        assert_eq!(feed.len(), 2);
    }

    #[tokio::test]
    async fn a_named_topic_keeps_every_message_when_its_pattern_lags() {
        let r = registry();
        let mut feed = Feed::new(LagPolicy::RecoverOrNotify, 4);
        feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        let (n, _) = r
            .get_or_create_for_subscriber(&TopicName::new("a.n").unwrap())
            .unwrap();
        feed.subscribe(n, None).unwrap();
        // The pattern's channel (8 slots) overflows with a.x; a.n's own receiver does not.
        send(&r, "a.n", 1);
        send(&r, "a.x", 10);
        send(&r, "a.n", 1);
        let got = drain(&mut feed);
        let named: Vec<&String> = got.iter().filter(|e| e.starts_with("a.n")).collect();
        assert_eq!(named, ["a.n:1", "a.n:2"], "{got:?}");
        let lost: Vec<&String> = got.iter().filter(|e| e.starts_with("lost")).collect();
        assert_eq!(lost, ["lost a.* lagged"], "only the pattern lost: {got:?}");
    }

    #[tokio::test]
    async fn unsubscribing_a_pattern_drops_its_queued_replay() {
        let r = registry();
        let mut first = Feed::new(LagPolicy::default(), 4);
        first.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        send(&r, "a.x", 1);
        assert_eq!(drain(&mut first), ["a.x:1"]);
        let resume: Vec<(TopicName, Cursor)> = first
            .resume_positions()
            .map(|(t, c)| (t.clone(), c))
            .collect();
        send(&r, "a.x", 5);
        let mut feed = Feed::new(LagPolicy::default(), 4);
        let entries = resume.iter().map(|(t, c)| (t, *c));
        feed.subscribe_pattern(&r, pattern("a.*"), entries).unwrap();
        assert_eq!(feed.pending.len(), 5, "the replay is queued");
        assert!(feed.unsubscribe("a.*"));
        assert!(feed.pending.is_empty());
        assert!(drain(&mut feed).is_empty());
    }

    #[tokio::test]
    async fn a_resume_list_replays_at_most_the_tracked_number_of_topics() {
        let r = registry();
        let mut first = Feed::new(LagPolicy::default(), 4);
        first.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        let names: Vec<TopicName> = (0..crate::pattern::MAX_PATTERN_TOPICS + 8)
            .map(|i| TopicName::new(&format!("a.{i}")).unwrap())
            .collect();
        for name in &names {
            send(&r, name.as_str(), 1);
        }
        drain(&mut first);
        // A list longer than a connection tracks: only the first MAX_PATTERN_TOPICS replay.
        let entries: Vec<(TopicName, Cursor)> = names
            .iter()
            .map(|n| (n.clone(), r.get(n.as_str()).unwrap().head()))
            .map(|(n, c)| (n, Cursor::new(c.epoch, 0)))
            .collect();
        let mut feed = Feed::new(LagPolicy::default(), 4);
        let entries = entries.iter().map(|(t, c)| (t, *c));
        feed.subscribe_pattern(&r, pattern("a.*"), entries).unwrap();
        assert_eq!(feed.pending.len(), crate::pattern::MAX_PATTERN_TOPICS);
    }

    #[tokio::test]
    async fn a_pattern_topic_forgotten_and_made_again_is_no_loss() {
        let r = crate::Registry::new(crate::RegistryConfig {
            topic: TopicConfig {
                channel_capacity: 8,
                history_len: 8,
                history_ttl: Duration::ZERO,
                ..TopicConfig::default()
            },
            ..crate::RegistryConfig::default()
        });
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        send(&r, "a.x", 1);
        assert_eq!(drain(&mut feed), ["a.x:1"]);
        // Its history expired and no receiver of its own holds it: the topic is forgotten,
        // and its next publish makes it again in another epoch.
        assert_eq!(r.reclaim(), 1);
        send(&r, "a.x", 1);
        assert_eq!(drain(&mut feed), ["a.x:1"], "no loss signal");
    }

    #[tokio::test]
    async fn a_pattern_counts_as_one_subscription() {
        let r = registry();
        let mut feed = Feed::new(LagPolicy::default(), 1);
        feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        assert_eq!(
            feed.subscribe_pattern(&r, pattern("b.*"), []),
            Err(FeedError::TooManySubscriptions { max: 1 })
        );
        let b = r.get_or_create(&TopicName::new("b").unwrap()).unwrap();
        assert_eq!(
            feed.subscribe(b, None),
            Err(FeedError::TooManySubscriptions { max: 1 })
        );
    }

    #[tokio::test]
    async fn a_lagging_pattern_follows_the_policy_naming_the_pattern() {
        for (policy, first) in [
            (LagPolicy::RecoverOrNotify, "lost a.* lagged"),
            (LagPolicy::Disconnect, "disconnect a.*"),
            (LagPolicy::Coalesce, "coalesced a.* 2"),
        ] {
            let r = registry();
            let mut feed = Feed::new(policy, 4);
            feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
            send(&r, "a.x", 8 + 2);
            // A fresh coop budget: the previous round drained a thousand messages.
            tokio::task::yield_now().await;
            let got = drain(&mut feed);
            assert_eq!(got[0], first, "{policy:?}");
        }
    }

    #[tokio::test]
    async fn next_waits_for_a_message() {
        let a = topic("a", 8, 8);
        let mut feed = Feed::new(LagPolicy::default(), 4);
        feed.subscribe(a.clone(), None).unwrap();
        let publisher = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            publish(&a, 1);
        });
        let event = tokio::time::timeout(Duration::from_secs(5), feed.next())
            .await
            .unwrap();
        assert!(matches!(event, FeedEvent::Message(m) if m.cursor().seq == 1));
        publisher.await.unwrap();
    }
}
