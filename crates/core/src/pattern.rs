//! Prefix patterns: a subscription to `orders.*` receives the messages of every topic whose
//! name starts with `orders.`, including topics created after it subscribed.
//!
//! A pattern is `<prefix>*` where the prefix is a valid topic name ending in a separator, `.`
//! or `:` (`orders.*`, `chat:*`, `chat:room.*`). A pattern matches only topics of its own
//! namespace (the part of a name before its first `:`): `orders.*` matches `orders.eu` but not
//! `orders.eu:x`, whose namespace is `orders.eu`. A bare `*` (every topic) and patterns over
//! the personal namespaces `user:` and `conn:` are refused.
//!
//! Matching cost: the [`PatternIndex`] keeps one broadcast channel per distinct prefix that
//! someone subscribed to, in a hash map. Publishing a message (locally or from a cluster log)
//! looks up each prefix of the topic's name that ends at a separator, at most one lookup per
//! `.` or `:` in the name, and sends the message on each channel found. A publish costs
//! the same with 10 or 100,000 patterns held; it grows with the depth of the topic's name
//! and with the number of distinct patterns that match it. With no pattern held at all it
//! costs one atomic load.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;
use tokio::sync::broadcast;

use crate::cursor::Cursor;
use crate::error::RegistryError;
use crate::lag::LagPolicy;
use crate::message::Message;
use crate::name::TopicName;
pub use crate::name::validate_pattern;

/// Most topics whose positions a connection's pattern subscriptions track for resume (all
/// its patterns together). Past it, the topic delivered least recently is forgotten: it
/// leaves the connection's resume list (SSE `id:`, long-poll `cursor`), and a client resuming
/// from that list gets it live only. Bounds an SSE `id:` to 32 entries of at most
/// 128 + 1 + 37 bytes beyond the explicitly subscribed topics.
pub const MAX_PATTERN_TOPICS: usize = 32;

/// The default of [`crate::RegistryConfig::max_patterns`]: most distinct patterns a node
/// holds at once (each has a broadcast channel of the topics' channel capacity, ~5 KB at the
/// default 128 slots). Past it, subscribing to a new one is refused
/// ([`RegistryError::TooManyPatterns`]) until one is released; patterns already held can
/// always be subscribed to.
pub const MAX_PATTERNS: usize = 10_000;

/// Whether the topic `topic` matches the pattern whose prefix is `prefix`: it starts with the
/// prefix and lies in the same namespace.
pub fn matches(prefix: &str, topic: &str) -> bool {
    topic.starts_with(prefix) && (prefix.contains(':') || !topic.contains(':'))
}

/// The patterns held on this node, by prefix, each with the broadcast channel its subscribers
/// read. Every topic of a [`crate::Registry`] hands its messages to the registry's index.
#[derive(Debug)]
pub struct PatternIndex {
    channels: RwLock<HashMap<Box<str>, broadcast::Sender<Arc<Message>>>>,
    /// `channels.len()`, read without the lock on every publish.
    held: AtomicUsize,
    /// Slots of each pattern's channel: how far a pattern's subscriber may fall behind the
    /// messages of all its topics together before it lags.
    capacity: usize,
    max: usize,
}

impl PatternIndex {
    /// An empty index of at most `max` patterns whose channels hold `capacity` messages.
    pub fn new(capacity: usize, max: usize) -> Self {
        Self {
            channels: RwLock::new(HashMap::new()),
            held: AtomicUsize::new(0),
            capacity: capacity.max(1),
            max,
        }
    }

    /// A receiver of every message published from now on to a topic that `prefix` matches;
    /// refused when the prefix is new and the node holds [`MAX_PATTERNS`] already.
    pub fn subscribe(
        &self,
        prefix: &str,
    ) -> Result<broadcast::Receiver<Arc<Message>>, RegistryError> {
        // A pattern held already takes the read lock only, as publishes do: subscribers of
        // a held pattern coming and going do not hold up the node's publishers.
        if let Some(sender) = self.channels.read().get(prefix) {
            return Ok(sender.subscribe());
        }
        let mut channels = self.channels.write();
        if let Some(sender) = channels.get(prefix) {
            return Ok(sender.subscribe());
        }
        if channels.len() >= self.max {
            return Err(RegistryError::TooManyPatterns { max: self.max });
        }
        let (sender, receiver) = broadcast::channel(self.capacity);
        channels.insert(prefix.into(), sender);
        self.held.store(channels.len(), Ordering::Release);
        Ok(receiver)
    }

    /// Forgets `prefix` when its last receiver is gone.
    pub fn release(&self, prefix: &str) {
        // Under the read lock first: the write lock only when this was the last receiver.
        if self
            .channels
            .read()
            .get(prefix)
            .is_none_or(|s| s.receiver_count() > 0)
        {
            return;
        }
        let mut channels = self.channels.write();
        if channels
            .get(prefix)
            .is_some_and(|s| s.receiver_count() == 0)
        {
            channels.remove(prefix);
            if channels.capacity() > 64 && channels.len() < channels.capacity() / 4 {
                channels.shrink_to_fit();
            }
            self.held.store(channels.len(), Ordering::Release);
        }
    }

    /// Whether some subscriber on this node holds the pattern of `prefix`.
    pub fn holds(&self, prefix: &str) -> bool {
        self.channels.read().contains_key(prefix)
    }

    /// Distinct patterns held.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Whether no pattern is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends `message` to the subscribers of every pattern matching its topic. The topic calls
    /// it under its own lock, so each pattern channel carries a topic's messages in order.
    pub fn deliver(&self, message: &Arc<Message>) {
        if self.held.load(Ordering::Acquire) == 0 {
            return;
        }
        let name = message.topic().as_str();
        // A pattern without `:` matches no namespaced topic: in `ns.a:b` only the prefixes
        // from the namespace's `:` on can match.
        let from = name.find(':').unwrap_or(0);
        let channels = self.channels.read();
        for (i, byte) in name.bytes().enumerate().skip(from) {
            if (byte == b'.' || byte == b':')
                && let Some(sender) = channels.get(&name[..=i])
            {
                // No receiver is not an error: the last one is being released.
                let _ = sender.send(message.clone());
            }
        }
    }
}

/// One pattern a feed holds.
#[derive(Debug)]
struct Held {
    pattern: TopicName,
    index: Arc<PatternIndex>,
    policy: Option<LagPolicy>,
}

/// A feed's pattern subscriptions, and the positions of the topics they delivered (the
/// [`MAX_PATTERN_TOPICS`] most recent).
#[derive(Debug, Default)]
pub(crate) struct Patterns {
    held: Vec<Held>,
    /// Least recently delivered first; `true` when the position was reached by a live
    /// delivery (not taken from a client's resume list).
    seen: Vec<(TopicName, Cursor, bool)>,
}

impl Patterns {
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub(crate) fn holds(&self, pattern: &str) -> bool {
        self.held.iter().any(|h| h.pattern.as_str() == pattern)
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &TopicName> {
        self.held.iter().map(|h| &h.pattern)
    }

    /// The pattern that delivers `topic`'s messages: the first held that matches it (each
    /// matching pattern's channel carries them; only this one's are taken, so overlapping
    /// patterns never deliver a message twice).
    pub(crate) fn deliverer(&self, topic: &str) -> Option<&TopicName> {
        self.held
            .iter()
            .find(|h| matches(h.pattern.prefix(), topic))
            .map(|h| &h.pattern)
    }

    pub(crate) fn covers(&self, topic: &str) -> bool {
        self.deliverer(topic).is_some()
    }

    /// Holds `pattern`; returns the receiver of its channel.
    pub(crate) fn add(
        &mut self,
        pattern: TopicName,
        index: Arc<PatternIndex>,
        policy: Option<LagPolicy>,
    ) -> Result<broadcast::Receiver<Arc<Message>>, RegistryError> {
        let receiver = index.subscribe(pattern.prefix())?;
        self.held.push(Held {
            pattern,
            index,
            policy,
        });
        Ok(receiver)
    }

    /// Drops `pattern` (its receiver must be dropped already) and the positions of the topics
    /// no other held pattern covers; true when it was held.
    pub(crate) fn remove(&mut self, pattern: &str) -> bool {
        let Some(i) = self.held.iter().position(|h| h.pattern.as_str() == pattern) else {
            return false;
        };
        let held = self.held.remove(i);
        held.index.release(held.pattern.prefix());
        let seen = std::mem::take(&mut self.seen);
        self.seen = seen
            .into_iter()
            .filter(|(t, _, _)| self.covers(t.as_str()))
            .collect();
        true
    }

    /// Drops every pattern (their receivers must be dropped already).
    pub(crate) fn clear(&mut self) {
        for held in self.held.drain(..) {
            held.index.release(held.pattern.prefix());
        }
        self.seen.clear();
    }

    pub(crate) fn policy(&self, pattern: &str) -> Option<LagPolicy> {
        self.held
            .iter()
            .find(|h| h.pattern.as_str() == pattern)
            .and_then(|h| h.policy)
    }

    pub(crate) fn position(&self, topic: &str) -> Option<Cursor> {
        self.seen
            .iter()
            .find(|(t, _, _)| t.as_str() == topic)
            .map(|(_, c, _)| *c)
    }

    /// Whether `topic`'s position was reached by a live delivery on this connection (so the
    /// connection has every message of the topic up to it).
    pub(crate) fn delivered_live(&self, topic: &str) -> bool {
        self.seen
            .iter()
            .any(|(t, _, live)| *live && t.as_str() == topic)
    }

    /// How many topics' positions are tracked.
    pub(crate) fn tracked(&self) -> usize {
        self.seen.len()
    }

    /// Records `topic`'s position as the most recent, reached by a live delivery when
    /// `live`; forgets the least recent past the bound.
    pub(crate) fn set_position(&mut self, topic: &TopicName, cursor: Cursor, live: bool) {
        if let Some(i) = self.seen.iter().position(|(t, _, _)| t == topic) {
            let mut entry = self.seen.remove(i);
            entry.1 = cursor;
            entry.2 = live;
            self.seen.push(entry);
            return;
        }
        if self.seen.len() >= MAX_PATTERN_TOPICS {
            self.seen.remove(0);
        }
        self.seen.push((topic.clone(), cursor, live));
    }

    /// The tracked topics with their positions, least recently delivered first.
    pub(crate) fn seen(&self) -> impl Iterator<Item = (&TopicName, Cursor)> {
        self.seen.iter().map(|(t, c, _)| (t, *c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TopicNameError;
    use crate::message::Payload;

    fn message(topic: &str) -> Arc<Message> {
        Arc::new(Message::new(
            TopicName::new(topic).unwrap(),
            Cursor::new(1, 1),
            None,
            Payload::from_value(&serde_json::json!(1)),
        ))
    }

    #[test]
    fn accepts_prefixes_ending_at_a_separator() {
        for ok in ["orders.*", "chat:*", "chat:room.*", "a.b.c.*", "x-1_y@z.*"] {
            assert_eq!(validate_pattern(ok), Ok(()), "{ok}");
            assert!(TopicName::subscription(ok).unwrap().is_pattern());
        }
        assert!(!TopicName::subscription("orders").unwrap().is_pattern());
    }

    #[test]
    fn refuses_the_rest_with_a_reason() {
        for bad in ["*", "orders*", "ord*", "user:*", "conn:*", "user:alice.*"] {
            assert!(
                matches!(validate_pattern(bad), Err(TopicNameError::BadPattern(_))),
                "{bad}"
            );
        }
        assert_eq!(
            validate_pattern("a.*.b*"),
            Err(TopicNameError::BadChar('*'))
        );
        assert_eq!(validate_pattern("a b.*"), Err(TopicNameError::BadChar(' ')));
        assert_eq!(
            TopicName::subscription("a*b"),
            Err(TopicNameError::BadChar('*'))
        );
        let long = format!("{}.*", "x".repeat(127));
        assert_eq!(
            validate_pattern(&long),
            Err(TopicNameError::TooLong { max: 128 })
        );
    }

    #[test]
    fn matches_within_the_pattern_s_namespace() {
        assert!(matches("orders.", "orders.eu"));
        assert!(matches("orders.", "orders.eu.paris"));
        assert!(!matches("orders.", "orders"));
        assert!(!matches("orders.", "ordersx.eu"));
        assert!(!matches("orders.", "orders.eu:x"), "another namespace");
        assert!(matches("chat:", "chat:room.1"));
        assert!(matches("chat:room.", "chat:room.1"));
        assert!(!matches("chat.", "chat:room"));
    }

    #[test]
    fn a_publish_reaches_each_matching_pattern_once_by_prefix() {
        let index = PatternIndex::new(8, 4);
        assert!(index.is_empty());
        let mut orders = index.subscribe("orders.").unwrap();
        let mut eu = index.subscribe("orders.eu.").unwrap();
        let mut chat = index.subscribe("chat:").unwrap();
        let mut plain = index.subscribe("chat.").unwrap();
        assert_eq!(index.len(), 4);
        assert_eq!(
            index.subscribe("more.").unwrap_err(),
            RegistryError::TooManyPatterns { max: 4 }
        );
        let _again = index
            .subscribe("chat.")
            .expect("a pattern held is not one more");
        index.deliver(&message("orders.eu.paris"));
        index.deliver(&message("orders.us"));
        index.deliver(&message("ordersx.us"));
        index.deliver(&message("chat:room.1"));
        index.deliver(&message("orders.eu:x"));
        let topics = |rx: &mut broadcast::Receiver<Arc<Message>>| {
            std::iter::from_fn(|| rx.try_recv().ok())
                .map(|m| m.topic().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(topics(&mut orders), ["orders.eu.paris", "orders.us"]);
        assert_eq!(topics(&mut eu), ["orders.eu.paris"]);
        assert_eq!(topics(&mut chat), ["chat:room.1"]);
        assert!(topics(&mut plain).is_empty());
    }

    #[test]
    fn a_pattern_is_forgotten_with_its_last_receiver() {
        let index = PatternIndex::new(8, 4);
        let a = index.subscribe("a.").unwrap();
        let b = index.subscribe("a.").unwrap();
        drop(a);
        index.release("a.");
        assert_eq!(index.len(), 1, "one receiver left");
        drop(b);
        index.release("a.");
        assert!(index.is_empty());
        index.deliver(&message("a.x"));
    }

    #[test]
    fn tracked_positions_are_bounded_least_recent_first_out() {
        let mut patterns = Patterns::default();
        let index = Arc::new(PatternIndex::new(8, 4));
        let rx = patterns
            .add(TopicName::subscription("t.*").unwrap(), index.clone(), None)
            .unwrap();
        for i in 0..MAX_PATTERN_TOPICS + 2 {
            let name = TopicName::new(&format!("t.{i}")).unwrap();
            patterns.set_position(&name, Cursor::new(1, i as u64), true);
        }
        // t.2 delivered again: the most recent now.
        patterns.set_position(&TopicName::new("t.2").unwrap(), Cursor::new(1, 99), true);
        let seen: Vec<String> = patterns.seen().map(|(t, _)| t.to_string()).collect();
        assert_eq!(seen.len(), MAX_PATTERN_TOPICS);
        assert_eq!(seen.first().unwrap(), "t.3");
        assert_eq!(seen.last().unwrap(), "t.2");
        assert_eq!(patterns.position("t.0"), None);
        drop(rx);
        assert!(patterns.remove("t.*"));
        assert_eq!(patterns.seen().count(), 0);
        assert!(index.is_empty());
    }
}
