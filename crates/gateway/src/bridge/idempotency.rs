//! Retry-safe publishing: a publisher's idempotency key, checked ([`IdempotencyKey`]), and the
//! bounded record of the keys a node has seen ([`Seen`]), so that a publish retried with the
//! same key to the same topic within `cluster.idempotency_window` is answered with the first
//! one's position instead of being published again.
//!
//! Where each log decides: a lone node (no log) in [`Retries`], around its registry's
//! publish; the Kafka bridge at ingest, per partition, by the records' own timestamps (every
//! node reads a partition in the same order, so every node drops the same records); the Redis
//! bridge in its append script.
//!
//! Bounded, whoever sends the keys: a [`Seen`] holds at most its `cap` entries (the oldest
//! goes first) and none older than the window, so a client sending a fresh key with every
//! publish costs at most `cluster.idempotency_max_keys` entries of at most ~400 bytes, and
//! only pushes the oldest keys out (a retry arriving after its key was pushed out is
//! published again).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_core::Cursor;

use crate::error::ApiError;

/// The longest idempotency key, in bytes.
pub(crate) const MAX_KEY_LEN: usize = 128;

/// The longest key as stored and carried by a log: a client's key with its publisher's
/// scope before it ([`IdempotencyKey::for_client`]: 32 hex digits and `~`).
pub(crate) const MAX_STORED_LEN: usize = MAX_KEY_LEN + 33;

/// The Kafka record header that carries a record's idempotency key.
pub(crate) const KAFKA_HEADER: &str = "herald-idempotency-key";

/// A publisher's idempotency key, checked: 1 to [`MAX_KEY_LEN`] bytes of visible ASCII (`!`
/// to `~`: no space, no control character), so that it fits a header, a log record and a
/// Redis key as it is; as stored, at most [`MAX_STORED_LEN`] bytes of the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IdempotencyKey(Box<str>);

impl IdempotencyKey {
    /// A trusted publisher's key (the admin API, an API key, dev mode), stored as given:
    /// trusted publishers share one key space per topic, with the records other services
    /// produce to Kafka. `400 bad_idempotency_key` with what is wrong.
    pub(crate) fn new(key: &str) -> Result<Self, ApiError> {
        Self::check(key)
            .map(|()| Self(key.into()))
            .map_err(|reason| ApiError::bad_request("bad_idempotency_key", reason))
    }

    /// A client's key, kept apart from every other publisher's: stored as
    /// `<32 hex digits of SHA-256 of publisher>~<key>`, so that a client cannot make another's
    /// publish be answered with its own message by sending that client's key first, and two
    /// clients counting their keys from 1 do not swallow each other's messages.
    /// `publisher` names the client (its token's `sub`, else its address).
    pub(crate) fn for_client(key: &str, publisher: &str) -> Result<Self, ApiError> {
        use sha2::Digest as _;
        let key = Self::new(key)?;
        let digest = sha2::Sha256::digest(publisher.as_bytes());
        let mut stored = String::with_capacity(33 + key.0.len());
        for b in &digest[..16] {
            stored.push_str(&format!("{b:02x}"));
        }
        stored.push('~');
        stored.push_str(&key.0);
        Ok(Self(stored.into()))
    }

    /// Whether `stored`, a key as a log record carries it, is one: 1 to [`MAX_STORED_LEN`]
    /// bytes of visible ASCII.
    pub(crate) fn is_stored(stored: &str) -> bool {
        (1..=MAX_STORED_LEN).contains(&stored.len()) && stored.bytes().all(|b| b.is_ascii_graphic())
    }

    /// Whether `key` is a valid key; else why not.
    pub(crate) fn check(key: &str) -> Result<(), String> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(format!(
                "an idempotency key is 1 to {MAX_KEY_LEN} bytes; this one is {}",
                key.len()
            ));
        }
        if let Some(at) = key.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(format!(
                "an idempotency key is visible ASCII (! to ~, no space); byte {at} is not"
            ));
        }
        Ok(())
    }

    /// The key.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The keys seen within a window, each with the position of the first publish that carried
/// it: at most `cap` entries, none older than the window by the clock the caller gives
/// (milliseconds; it never goes back: a time before the latest seen counts as the latest).
#[derive(Debug)]
pub(crate) struct Seen {
    window_ms: u64,
    cap: usize,
    /// The latest time given.
    clock: u64,
    /// `topic NUL key` → (first position, when it was published, entry number).
    map: HashMap<Arc<str>, (Cursor, u64, u64)>,
    /// The entries in the order they were made, with the clock then and their number (an
    /// entry replaced after its window keeps its old place here, under its old number).
    order: VecDeque<(Arc<str>, u64, u64)>,
    made: u64,
}

impl Seen {
    /// An empty record of at most `cap` keys (at least one), each kept `window`.
    pub(crate) fn new(window: Duration, cap: usize) -> Self {
        Self {
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
            cap: cap.max(1),
            clock: 0,
            map: HashMap::new(),
            order: VecDeque::new(),
            made: 0,
        }
    }

    /// How many keys are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The position of the first publish of `key` to `topic` within the window before `now`.
    pub(crate) fn get(&mut self, topic: &str, key: &str, now: u64) -> Option<Cursor> {
        self.expire(now);
        let window = self.window_ms;
        let (position, at, _) = self.map.get(entry(topic, key).as_str())?;
        (now.saturating_sub(*at) <= window).then_some(*position)
    }

    /// The position of the first publish of `key` to `topic` within the window before `now`,
    /// without moving the clock (a log's clock is its records' time, not the caller's).
    pub(crate) fn peek(&self, topic: &str, key: &str, now: u64) -> Option<Cursor> {
        let (position, at, _) = self.map.get(entry(topic, key).as_str())?;
        (now.saturating_sub(*at) <= self.window_ms).then_some(*position)
    }

    /// Records that `key` was first published to `topic` at `position`, at `at`, unless a
    /// publish of it within the window before `at` is held already: then that one's position.
    /// The same position recorded again (a record read after its own append was recorded,
    /// or read again) is not a repeat: `None`, its time set to `at`.
    pub(crate) fn first(
        &mut self,
        topic: &str,
        key: &str,
        position: Cursor,
        at: u64,
    ) -> Option<Cursor> {
        self.expire(at);
        self.remember(topic, key, position, at)
    }

    /// [`Self::first`] without moving the clock.
    pub(crate) fn remember(
        &mut self,
        topic: &str,
        key: &str,
        position: Cursor,
        at: u64,
    ) -> Option<Cursor> {
        let name = entry(topic, key);
        if let Some((held, when, _)) = self.map.get_mut(name.as_str()) {
            if *held == position {
                *when = at;
                return None;
            }
            if at.saturating_sub(*when) <= self.window_ms {
                return Some(*held);
            }
        }
        self.insert(name, position, at);
        None
    }

    /// Replaces what is held for `key` on `topic` with `position`, at `at`: a record read
    /// from a log that comes before the one held (appended by this node, answered already).
    pub(crate) fn replace(&mut self, topic: &str, key: &str, position: Cursor, at: u64) {
        self.expire(at);
        self.insert(entry(topic, key), position, at);
    }

    fn insert(&mut self, name: String, position: Cursor, at: u64) {
        while self.order.len() >= self.cap {
            self.pop_oldest();
        }
        let name: Arc<str> = name.into();
        self.made += 1;
        self.map.insert(name.clone(), (position, at, self.made));
        self.order.push_back((name, self.clock.max(at), self.made));
    }

    /// Moves the clock to `now` and drops the entries older than the window.
    fn expire(&mut self, now: u64) {
        self.clock = self.clock.max(now);
        while let Some((_, made_at, _)) = self.order.front()
            && self.clock.saturating_sub(*made_at) > self.window_ms
        {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((name, _, number)) = self.order.pop_front()
            && self.map.get(&name).is_some_and(|(_, _, n)| *n == number)
        {
            self.map.remove(&name);
        }
    }
}

/// The map key of `key` on `topic` (neither holds a NUL).
fn entry(topic: &str, key: &str) -> String {
    let mut name = String::with_capacity(topic.len() + 1 + key.len());
    name.push_str(topic);
    name.push('\0');
    name.push_str(key);
    name
}

/// Shards of a lone node's record (publishes of different keys rarely wait for each other).
const SHARDS: usize = 32;

/// A lone node's keys: who publishes with a key publishes through [`Retries::once`].
#[derive(Debug)]
pub(crate) struct Retries {
    shards: Box<[parking_lot::Mutex<Seen>]>,
    started: Instant,
}

impl Retries {
    /// A record of at most `cap` keys (split evenly over its shards, rounded up), each kept
    /// `window`.
    pub(crate) fn new(window: Duration, cap: usize) -> Self {
        let per_shard = cap.div_ceil(SHARDS).max(1);
        Self {
            shards: (0..SHARDS)
                .map(|_| parking_lot::Mutex::new(Seen::new(window, per_shard)))
                .collect(),
            started: Instant::now(),
        }
    }

    /// Publishes with `publish` unless `key` was published to `topic` within the window:
    /// then that publish's position, and `publish` is not called. Two publishes of one key
    /// at once publish once (the shard is held while `publish` runs; it must not block).
    /// `Ok((position, true))` for a repeat.
    pub(crate) fn once<E>(
        &self,
        topic: &str,
        key: &str,
        publish: impl FnOnce() -> Result<Cursor, E>,
    ) -> Result<(Cursor, bool), E> {
        use std::hash::{Hash as _, Hasher as _};
        let mut hasher = fnv::FnvHasher::default();
        (topic, key).hash(&mut hasher);
        let shard = &self.shards[hasher.finish() as usize % SHARDS];
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut seen = shard.lock();
        if let Some(first) = seen.get(topic, key, now) {
            return Ok((first, true));
        }
        let position = publish()?;
        seen.first(topic, key, position, now);
        Ok((position, false))
    }

    /// How many keys are held (every shard).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_one_to_128_bytes_of_visible_ascii() {
        for good in ["a", "order-1234:retry/2", &"k".repeat(128), "!~"] {
            assert!(IdempotencyKey::new(good).is_ok(), "{good:?}");
        }
        for bad in ["", &"k".repeat(129), "a b", "a\nb", "é", "\u{7f}"] {
            let e = IdempotencyKey::new(bad).expect_err(bad);
            assert_eq!(
                (e.status(), e.code()),
                (axum::http::StatusCode::BAD_REQUEST, "bad_idempotency_key")
            );
        }
    }

    #[test]
    fn a_client_s_key_is_its_own() {
        let alice = IdempotencyKey::for_client("1", "sub:alice").unwrap();
        let bob = IdempotencyKey::for_client("1", "sub:bob").unwrap();
        assert_ne!(alice, bob);
        assert_eq!(alice, IdempotencyKey::for_client("1", "sub:alice").unwrap());
        assert_ne!(
            alice,
            IdempotencyKey::new("1").unwrap(),
            "nor a trusted publisher's"
        );
        let longest = IdempotencyKey::for_client(&"k".repeat(128), "sub:alice").unwrap();
        assert_eq!(longest.as_str().len(), MAX_STORED_LEN);
        assert!(IdempotencyKey::is_stored(longest.as_str()) && IdempotencyKey::is_stored("k"));
        assert!(!IdempotencyKey::is_stored("") && !IdempotencyKey::is_stored("a b"));
        let e = IdempotencyKey::for_client("", "sub:alice").unwrap_err();
        assert_eq!(e.code(), "bad_idempotency_key");
    }

    fn at(seq: u64) -> Cursor {
        Cursor::new(7, seq)
    }

    #[test]
    fn the_first_publish_of_a_key_wins_within_the_window_only() {
        let mut seen = Seen::new(Duration::from_millis(100), 10);
        assert_eq!(seen.first("t", "k", at(1), 1000), None);
        assert_eq!(seen.first("t", "k", at(2), 1050), Some(at(1)), "a repeat");
        assert_eq!(seen.get("t", "k", 1100), Some(at(1)));
        assert_eq!(seen.first("t", "k", at(1), 1060), None, "the same record");
        // Another key, another topic: distinct.
        assert_eq!(seen.first("t", "other", at(3), 1070), None);
        assert_eq!(seen.first("u", "k", at(4), 1070), None);
        // Past the window, the key is new again.
        assert_eq!(seen.get("t", "k", 1161), None);
        assert_eq!(seen.first("t", "k", at(5), 1300), None);
        assert_eq!(seen.first("t", "k", at(6), 1301), Some(at(5)));
        assert_eq!(seen.len(), 1, "the others expired");
    }

    #[test]
    fn the_record_holds_at_most_its_cap_the_oldest_going_first() {
        let mut seen = Seen::new(Duration::from_secs(60), 3);
        for (i, key) in ["a", "b", "c", "d"].into_iter().enumerate() {
            seen.first("t", key, at(i as u64), 10 + i as u64);
        }
        assert_eq!(seen.len(), 3);
        assert_eq!(seen.get("t", "a", 20), None, "the oldest was pushed out");
        assert_eq!(seen.get("t", "d", 20), Some(at(3)));
        // Replacements do not grow it either.
        for i in 0..100 {
            seen.replace("t", "d", at(100 + i), 30 + i);
        }
        assert!(seen.len() <= 3 && seen.order.len() <= 3);
        assert_eq!(seen.get("t", "d", 200), Some(at(199)));
    }

    #[test]
    fn a_lone_node_publishes_a_key_once_and_stays_bounded() {
        let retries = Retries::new(Duration::from_secs(60), 64);
        let mut published = 0;
        let mut publish = |_: &str| {
            published += 1;
            Ok::<_, ()>(at(published))
        };
        let first = retries.once("t", "k", || publish("t")).unwrap();
        let again = retries.once("t", "k", || publish("t")).unwrap();
        assert_eq!((first, again), ((at(1), false), (at(1), true)));
        for i in 0..10_000 {
            retries
                .once("t", &format!("flood-{i}"), || Ok::<_, ()>(at(i)))
                .unwrap();
        }
        assert!(retries.len() <= 64, "{} keys held", retries.len());
    }
}
