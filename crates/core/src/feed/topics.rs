//! The feed, its topics and its events: subscribing, replay, live messages, lag recovery and
//! loss signals, the one `next()`.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use tokio_stream::Stream as _;
use tokio_stream::StreamMap;

use crate::cursor::Cursor;
use crate::direct::DirectSub;
use crate::error::FeedError;
use crate::history::LossReason;
use crate::lag::LagPolicy;
use crate::message::Message;
use crate::name::TopicName;
use crate::pattern::Patterns;
use crate::topic::{Subscription, Topic};

use super::live::{Live, LiveStream};

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
    /// Deliver this message as a delta when it has one for the transport's form (else in
    /// full): the subscription asked for deltas ([`Feed::want_deltas`]) and was delivered the
    /// message its delta applies to, right before it ([`Message::delta_base`]).
    Delta(Arc<Message>),
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
pub(super) struct Sub {
    pub(super) topic: Arc<Topic>,
    pub(super) position: Cursor,
    /// The subscription asked for deltas.
    pub(super) delta: bool,
    /// The message at `position` was delivered (and no loss signal came since): the client
    /// holds it, so the message after it may go as a delta.
    pub(super) based: bool,
}

/// The topics of one connection.
///
/// Every message passes a per-topic position check, so replayed and live messages join
/// without a gap or a duplicate, and a lagged subscriber recovering from history never sees a
/// message twice.
#[derive(Debug)]
pub struct Feed {
    pub(super) subs: Vec<Sub>,
    pub(super) streams: StreamMap<TopicName, LiveStream>,
    pub(super) pending: VecDeque<FeedEvent>,
    pub(super) policy: LagPolicy,
    /// `u32` (it packs beside `policy`): every connection holds a feed.
    pub(super) max_subscriptions: u32,
    /// The one topic's direct delivery, when the transport set it up ([`Self::link`]).
    pub(super) link: Option<Link>,
    /// The rest of a frame the fan-out wrote in part, for the transport to write first.
    pub(super) rest: Option<Box<Bytes>>,
    /// Prefix pattern subscriptions ([`Self::subscribe_pattern`]); boxed, as most feeds
    /// hold none.
    pub(super) patterns: Option<Box<Patterns>>,
}

#[derive(Debug)]
pub(super) struct Link {
    pub(super) sub: Arc<DirectSub>,
    /// The subscriber is direct (as far as this feed knows: the fan-out may have parked it
    /// since): it holds no live receiver.
    pub(super) live: bool,
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
            delta: false,
            based: false,
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

    /// Lets the subscription to `topic` take deltas ([`FeedEvent::Delta`]): from the second
    /// message it delivers after each (re)start, each message whose delta base is the one
    /// delivered right before it. False when `topic` is not subscribed (a pattern's topics
    /// always go in full).
    pub fn want_deltas(&mut self, topic: &str) -> bool {
        let Some(sub) = self
            .subs
            .iter_mut()
            .find(|s| s.topic.name().as_str() == topic)
        else {
            return false;
        };
        sub.delta = true;
        true
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
    /// [`crate::pattern::MAX_PATTERN_TOPICS`], least recently delivered first): what a client
    /// resumes from (SSE `id:`, long-poll `cursor`).
    pub fn resume_positions(&self) -> impl Iterator<Item = (&TopicName, Cursor)> {
        let by_pattern = (self.patterns.iter())
            .flat_map(|p| p.seen())
            .filter(|(t, _)| !self.subs.iter().any(|s| s.topic.name() == *t));
        self.positions().chain(by_pattern)
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
        std::future::poll_fn(|cx| self.poll_next_event(cx, true)).await
    }

    /// The next event if one is ready now, without waiting and without handing the socket to
    /// the topic's publisher ([`crate::direct`]): for a transport that gathers what is ready
    /// into one write, which must go out before the publisher may write again. The waker
    /// registered is a no-op one: the transport waits with [`Self::next`] afterwards.
    pub fn next_ready(&mut self) -> Option<FeedEvent> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll_next_event(&mut cx, false) {
            Poll::Ready(event) => Some(event),
            Poll::Pending => None,
        }
    }

    /// The next event; `direct`: the feed may go direct on the way (when idle).
    fn poll_next_event(&mut self, cx: &mut Context<'_>, direct: bool) -> Poll<FeedEvent> {
        let event = self.poll_next_inner(cx, direct);
        if let Poll::Ready(FeedEvent::Lost { topic, .. }) = &event
            && let Some(sub) = self.subs.iter_mut().find(|s| s.topic.name() == topic)
        {
            // The client drops its base on a loss signal: the next message goes in full.
            sub.based = false;
        }
        event
    }

    fn poll_next_inner(&mut self, cx: &mut Context<'_>, direct: bool) -> Poll<FeedEvent> {
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
            if direct && self.try_go_direct() {
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

    pub(super) fn is_subscribed(&self, topic: &TopicName) -> bool {
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
            sub.based = false;
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
        let delta = sub.delta && sub.based && message.delta_base() == Some(sub.position);
        sub.position = cursor;
        sub.based = true;
        Some(if delta {
            FeedEvent::Delta(message)
        } else {
            FeedEvent::Message(message)
        })
    }

    /// The topic's channel was replaced: a new receiver, and what it missed meanwhile from
    /// history (the position check drops anything already delivered).
    pub(super) fn reopen(&mut self, topic: TopicName) {
        let Some(sub) = self.subs.iter_mut().find(|s| *s.topic.name() == topic) else {
            return;
        };
        // A subscriber that has seen nothing takes everything the topic holds, in the epoch
        // its first message set (on a log-carried node that is the log's, learned from this very
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
            sub.based = false;
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
pub(super) fn coalesce(
    sub: &mut Sub,
    pending: &mut VecDeque<FeedEvent>,
    missed: u64,
) -> Subscription {
    let again = sub.topic.subscribe_last(1);
    let forward = again.start.epoch != sub.position.epoch || again.start.seq > sub.position.seq;
    let skipped = if forward {
        again.start.seq.saturating_sub(sub.position.seq)
    } else {
        0
    };
    if forward {
        sub.position = again.start;
        sub.based = false;
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
            FeedEvent::Message(m) | FeedEvent::Delta(m) => Some(m.topic()),
            FeedEvent::Lost { topic, .. }
            | FeedEvent::Recovered { topic, .. }
            | FeedEvent::Coalesced { topic, .. }
            | FeedEvent::Disconnect { topic, .. } => Some(topic),
            FeedEvent::Rest(_) => None,
        }
    }
}
