//! A subscriber's merged view of its topics: replay, live messages, lag recovery and loss
//! signals, in one cancel-safe `next()` that every transport drives the same way.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use serde::{Deserialize, Serialize};
use tokio_stream::StreamExt as _;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::cursor::Cursor;
use crate::error::FeedError;
use crate::history::LossReason;
use crate::message::Message;
use crate::name::TopicName;
use crate::topic::Topic;

/// What happens to a subscriber that falls behind its topic's live channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LagPolicy {
    /// Replay the missed messages from history; if history no longer covers them, tell the
    /// client that messages were lost and go on live.
    #[default]
    RecoverOrNotify,
    /// Replay from history; if history no longer covers the gap, disconnect the client.
    RecoverOrDisconnect,
    /// Disconnect at once.
    Disconnect,
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
    /// The subscriber is too slow: close the connection with a reason saying so.
    Disconnect {
        /// The topic it lagged on.
        topic: TopicName,
        /// Messages the live channel skipped.
        missed: u64,
    },
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
/// ending silently inside the `StreamMap`.
struct LiveStream(Option<BroadcastStream<Arc<Message>>>);

impl std::fmt::Debug for LiveStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveStream")
    }
}

impl tokio_stream::Stream for LiveStream {
    type Item = Live;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Live>> {
        let Some(stream) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        match std::pin::Pin::new(stream).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(message))) => Poll::Ready(Some(Live::Message(message))),
            Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => {
                Poll::Ready(Some(Live::Lagged(n)))
            }
            Poll::Ready(None) => {
                self.0 = None;
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
    max_subscriptions: usize,
}

impl Feed {
    /// An empty feed.
    pub fn new(policy: LagPolicy, max_subscriptions: usize) -> Self {
        Self {
            subs: Vec::new(),
            streams: StreamMap::new(),
            pending: VecDeque::new(),
            policy,
            max_subscriptions,
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
        if let Some(sub) = self.subs.iter().find(|s| s.topic.name() == topic.name()) {
            return Ok(sub.position);
        }
        if self.subs.len() >= self.max_subscriptions {
            return Err(FeedError::TooManySubscriptions {
                max: self.max_subscriptions,
            });
        }
        let sub = topic.subscribe(from);
        let name = topic.name().clone();
        if let Some(reason) = sub.lost {
            self.pending.push_back(FeedEvent::Lost {
                topic: name.clone(),
                reason,
            });
        }
        self.pending
            .extend(sub.replay.into_iter().map(FeedEvent::Message));
        self.streams
            .insert(name, LiveStream(Some(BroadcastStream::new(sub.receiver))));
        self.subs.push(Sub {
            topic,
            position: sub.start,
        });
        Ok(sub.start)
    }

    /// Drops the subscription to `topic`; true when there was one.
    pub fn unsubscribe(&mut self, topic: &str) -> bool {
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

    /// Number of subscriptions.
    pub fn len(&self) -> usize {
        self.subs.len()
    }

    /// Whether there is no subscription.
    pub fn is_empty(&self) -> bool {
        self.subs.is_empty()
    }

    /// Each subscribed topic with the position of the last message delivered on it (or where
    /// the subscription started), in subscription order.
    pub fn positions(&self) -> impl Iterator<Item = (&TopicName, Cursor)> {
        self.subs.iter().map(|s| (s.topic.name(), s.position))
    }

    /// The next event. Cancel-safe: dropping the future loses nothing, so it can sit in a
    /// `select!` beside timers and socket reads. Never returns while there is no subscription.
    pub async fn next(&mut self) -> FeedEvent {
        loop {
            if let Some(event) = self.pop_pending() {
                return event;
            }
            let Some((name, item)) = self.streams.next().await else {
                return std::future::pending().await;
            };
            match item {
                Live::Message(message) => {
                    if let Some(event) = self.accept(message) {
                        return event;
                    }
                }
                Live::Lagged(missed) => self.on_lag(name, missed),
                Live::Closed => self.reopen(name),
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
                other => self.is_subscribed(other_topic(&other)).then_some(other),
            };
            if event.is_some() {
                return event;
            }
        }
        None
    }

    fn is_subscribed(&self, topic: &TopicName) -> bool {
        self.subs.iter().any(|s| s.topic.name() == topic)
    }

    /// Passes `message` when it is the subscriber's next one on its topic.
    fn accept(&mut self, message: Arc<Message>) -> Option<FeedEvent> {
        let sub = self
            .subs
            .iter_mut()
            .find(|s| s.topic.name() == message.topic())?;
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
        self.streams.insert(
            topic,
            LiveStream(Some(BroadcastStream::new(again.receiver))),
        );
    }

    fn on_lag(&mut self, topic: TopicName, missed: u64) {
        let Some(sub) = self.subs.iter().find(|s| *s.topic.name() == topic) else {
            return;
        };
        let recovered = match self.policy {
            LagPolicy::Disconnect => None,
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
            None if self.policy == LagPolicy::RecoverOrNotify => {
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

impl Drop for Feed {
    fn drop(&mut self) {
        for sub in &self.subs {
            sub.topic.touch();
        }
    }
}

fn other_topic(event: &FeedEvent) -> &TopicName {
    match event {
        FeedEvent::Message(m) => m.topic(),
        FeedEvent::Lost { topic, .. }
        | FeedEvent::Recovered { topic, .. }
        | FeedEvent::Disconnect { topic, .. } => topic,
    }
}

impl FeedEvent {
    /// The topic the event is about.
    pub fn topic(&self) -> &TopicName {
        other_topic(self)
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
                FeedEvent::Disconnect { topic, .. } => format!("disconnect {topic}"),
            })
            .collect()
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
            topic: TopicConfig {
                log_fed: true,
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
