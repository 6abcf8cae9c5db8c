//! The topic registry: topics by name, split into shards by hash of the name.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use crate::error::RegistryError;
use crate::message::{Message, Payload};
use crate::name::{EventName, TopicName};
use crate::pattern::PatternIndex;
use crate::topic::{LogStart, Topic, TopicConfig, TopicStats};

/// Limits of the registry.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// Number of shards (rounded up to a power of two).
    pub shards: usize,
    /// Most topics held at once. Creating one more first drops the topics that have no
    /// subscriber and no history (at most one such scan per [`PRESSURE_SCAN_EVERY`]), then
    /// fails.
    pub max_topics: usize,
    /// Most topics held that a subscription created and that no message reached yet: past
    /// it [`Registry::get_or_create_for_subscriber`] fails. The rest of `max_topics` stays
    /// for publishers and logs, so subscribers alone cannot make a publish fail.
    pub max_unpublished: usize,
    /// Most distinct prefix patterns held at once ([`crate::pattern`]); 0 refuses them.
    pub max_patterns: usize,
    /// Limits of every topic outside the namespaces below.
    pub topic: TopicConfig,
    /// Limits of the topics of a namespace (the part of a name before its first `:`), by
    /// namespace.
    pub namespaces: HashMap<String, TopicConfig>,
}

impl RegistryConfig {
    /// The limits of the topic named `name`: its namespace's, else the default.
    pub fn topic_config(&self, name: &str) -> &TopicConfig {
        name.split_once(':')
            .and_then(|(ns, _)| self.namespaces.get(ns))
            .unwrap_or(&self.topic)
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            shards: 64,
            max_topics: 100_000,
            max_unpublished: 25_000,
            max_patterns: crate::pattern::MAX_PATTERNS,
            topic: TopicConfig::default(),
            namespaces: HashMap::new(),
        }
    }
}

type Shard = RwLock<HashMap<TopicName, Arc<Topic>>>;

/// Shortest time between two reclaim scans made because the registry is full: while it stays
/// full, a refused creation costs a lookup, not a scan of every topic.
pub const PRESSURE_SCAN_EVERY: Duration = Duration::from_millis(100);

/// Every topic of this node.
///
/// A lookup takes the read side of one shard's lock, so lookups never wait on each other and
/// publishers of topics in other shards never contend with them; creating or reclaiming a
/// topic takes that shard's write side briefly. (Publishing itself then takes the topic's own
/// mutex and tokio's broadcast mutex, both per topic.)
#[derive(Debug)]
pub struct Registry {
    shards: Box<[Shard]>,
    hasher: std::collections::hash_map::RandomState,
    count: AtomicUsize,
    /// Topics created by a subscription that no message reached yet.
    unpublished: Arc<AtomicUsize>,
    config: RegistryConfig,
    created: Instant,
    /// When the last scan under pressure ran, in ms since `created` (+1; 0 = never).
    last_pressure_scan: AtomicU64,
    /// The prefix patterns subscribed to on this node; every topic hands its messages here.
    patterns: Arc<PatternIndex>,
    /// Where a log-carried topic's epoch is known before its first message (a cluster bridge
    /// that follows the topic's partition): see [`Registry::set_epoch_source`].
    epochs: Epochs,
}

/// The registry's [`EpochSource`], once set.
#[derive(Default)]
struct Epochs(std::sync::OnceLock<EpochSource>);

impl std::fmt::Debug for Epochs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Epochs(set)"
        } else {
            "Epochs(unset)"
        })
    }
}

/// Where a log-carried topic starts before any message of it was read (`None`: not known).
pub type EpochSource = Box<dyn Fn(&str) -> Option<LogStart> + Send + Sync>;

impl Registry {
    /// An empty registry.
    pub fn new(config: RegistryConfig) -> Self {
        let n = config.shards.max(1).next_power_of_two();
        let patterns = Arc::new(PatternIndex::new(
            config.topic.channel_capacity,
            config.max_patterns,
        ));
        Self {
            shards: (0..n).map(|_| RwLock::new(HashMap::new())).collect(),
            hasher: Default::default(),
            count: AtomicUsize::new(0),
            unpublished: Arc::new(AtomicUsize::new(0)),
            config,
            created: Instant::now(),
            last_pressure_scan: AtomicU64::new(0),
            patterns,
            epochs: Epochs::default(),
        }
    }

    /// Tells the registry where a log-carried topic's epoch is known before the log delivered a
    /// message of it: a topic created then starts in that epoch, anchored, at the position
    /// from which the node holds all of it, so the opening cursor a subscriber gets is one the
    /// log will honour (a resume from it replays what was published since, on any node that
    /// holds the topic from there). Set once; later calls are ignored.
    pub fn set_epoch_source(&self, source: EpochSource) {
        let _ = self.epochs.0.set(source);
    }

    /// Where the log starts `name` now, if the log knows it.
    fn known_epoch(&self, name: &str) -> Option<LogStart> {
        self.epochs.0.get().and_then(|source| source(name))
    }

    /// The prefix patterns subscribed to on this node ([`crate::pattern`]).
    pub fn patterns(&self) -> &Arc<PatternIndex> {
        &self.patterns
    }

    /// The registry's limits.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    fn shard(&self, name: &str) -> &Shard {
        let i = self.hasher.hash_one(name) as usize & (self.shards.len() - 1);
        &self.shards[i]
    }

    /// The topic named `name`, if it exists.
    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.shard(name).read().get(name).cloned()
    }

    /// The topic named `name`, created if needed.
    pub fn get_or_create(&self, name: &TopicName) -> Result<Arc<Topic>, RegistryError> {
        if let Some(topic) = self.get(name.as_str()) {
            return Ok(topic);
        }
        self.create(name, false).map(|(topic, _)| topic)
    }

    /// The topic named `name` for a subscriber, created if needed (then counted as
    /// unpublished until its first message, against
    /// [`RegistryConfig::max_unpublished`]); true when this call created it.
    pub fn get_or_create_for_subscriber(
        &self,
        name: &TopicName,
    ) -> Result<(Arc<Topic>, bool), RegistryError> {
        if let Some(topic) = self.get(name.as_str()) {
            return Ok((topic, false));
        }
        self.create(name, true)
    }

    fn create(
        &self,
        name: &TopicName,
        unpublished: bool,
    ) -> Result<(Arc<Topic>, bool), RegistryError> {
        match self.try_create(name, unpublished) {
            Err(RegistryError::TooManyTopics { .. } | RegistryError::TooManyUnpublished { .. }) => {
                // Try again even when this call did not scan: a scan running on another
                // thread frees room shard by shard.
                self.reclaim_under_pressure();
                self.try_create(name, unpublished)
            }
            other => other,
        }
    }

    /// Topics a subscription created that no message reached yet.
    pub fn unpublished(&self) -> usize {
        self.unpublished.load(Ordering::Relaxed)
    }

    /// The registry is full: drops the topics with no subscriber and no history without
    /// waiting for their quiet window (a client spraying subscriptions to new topics would
    /// otherwise fill the registry for that long, locking out every new topic). At most one
    /// scan per [`PRESSURE_SCAN_EVERY`]; returns how many topics went.
    fn reclaim_under_pressure(&self) -> usize {
        let now = self.created.elapsed().as_millis() as u64 + 1;
        let last = self.last_pressure_scan.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < PRESSURE_SCAN_EVERY.as_millis() as u64 {
            return 0;
        }
        if self
            .last_pressure_scan
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return 0; // another thread is scanning
        }
        self.reclaim_where(true)
    }

    fn try_create(
        &self,
        name: &TopicName,
        unpublished: bool,
    ) -> Result<(Arc<Topic>, bool), RegistryError> {
        let mut shard = self.shard(name.as_str()).write();
        if let Some(topic) = shard.get(name.as_str()) {
            return Ok((topic.clone(), false));
        }
        if unpublished
            && self.unpublished.fetch_add(1, Ordering::Relaxed) >= self.config.max_unpublished
        {
            self.unpublished.fetch_sub(1, Ordering::Relaxed);
            return Err(RegistryError::TooManyUnpublished {
                max: self.config.max_unpublished,
            });
        }
        if self.count.fetch_add(1, Ordering::Relaxed) >= self.config.max_topics {
            self.count.fetch_sub(1, Ordering::Relaxed);
            if unpublished {
                self.unpublished.fetch_sub(1, Ordering::Relaxed);
            }
            return Err(RegistryError::TooManyTopics {
                max: self.config.max_topics,
            });
        }
        let config = self.config.topic_config(name.as_str());
        let known = match config.log_carried {
            true => self.known_epoch(name.as_str()),
            false => None,
        };
        let topic = if unpublished {
            Topic::for_subscriber(name.clone(), config, self.unpublished.clone(), known)
        } else {
            match known {
                Some(start) => Topic::anchored_in(name.clone(), config, start),
                None => Topic::new(name.clone(), config),
            }
        };
        let topic = Arc::new(topic.watched_by(self.patterns.clone()));
        shard.insert(name.clone(), topic.clone());
        Ok((topic, true))
    }

    /// Publishes to `topic`, creating it if needed.
    pub fn publish(
        &self,
        topic: &TopicName,
        event: Option<EventName>,
        data: Payload,
    ) -> Result<Arc<Message>, RegistryError> {
        Ok(self.get_or_create(topic)?.publish(event, data))
    }

    /// Removes the topics nobody holds that have no subscriber and no history left; returns how
    /// many. A topic in use (held by a subscriber or a publisher) is never removed, so nobody
    /// can end up on an orphaned topic.
    pub fn reclaim(&self) -> usize {
        self.reclaim_where(false)
    }

    fn reclaim_where(&self, pressure: bool) -> usize {
        let now = Instant::now();
        let mut removed = 0;
        let mut gone = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            shard.retain(|_, topic| {
                let keep = Arc::strong_count(topic) > 1 || !topic.is_idle(now, pressure);
                if !keep {
                    gone.push(topic.clone());
                }
                keep
            });
            if shard.capacity() > 64 && shard.len() < shard.capacity() / 4 {
                shard.shrink_to_fit();
            }
            drop(shard);
            for topic in &gone {
                topic.release_unpublished();
            }
            // Room is given back shard by shard, and the topics are freed outside the lock,
            // so creations elsewhere go on while a large scan runs.
            self.count.fetch_sub(gone.len(), Ordering::Relaxed);
            removed += gone.len();
            gone.clear();
        }
        removed
    }

    /// Calls `f` with the name of every topic that has a subscriber on this node (interest
    /// routing asks which partitions of the log the node must follow).
    pub fn each_subscribed(&self, mut f: impl FnMut(&TopicName)) {
        for shard in self.shards.iter() {
            for topic in shard.read().values() {
                if topic.has_subscribers() {
                    f(topic.name());
                }
            }
        }
    }

    /// Drops every topic that `forget` picks and that has no subscriber, whatever its
    /// history: the node stops reading those topics from its log (interest routing), and a
    /// topic kept would hold history with a hole in it once the node reads them again.
    /// Returns how many went.
    pub fn forget(&self, forget: impl Fn(&TopicName) -> bool) -> usize {
        let mut removed = 0;
        let mut gone = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            shard.retain(|_, topic| {
                let keep = !forget(topic.name()) || topic.has_subscribers();
                if !keep {
                    gone.push(topic.clone());
                }
                keep
            });
            drop(shard);
            for topic in &gone {
                topic.release_unpublished();
            }
            self.count.fetch_sub(gone.len(), Ordering::Relaxed);
            removed += gone.len();
            gone.clear();
        }
        removed
    }

    /// Number of topics held.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether no topic is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts of up to `limit` topics, most subscribed first.
    pub fn stats(&self, limit: usize) -> Vec<TopicStats> {
        let mut all: Vec<TopicStats> = self
            .shards
            .iter()
            .flat_map(|shard| {
                let topics: Vec<Arc<Topic>> = shard.read().values().cloned().collect();
                topics.into_iter().map(|t| t.stats())
            })
            .collect();
        all.sort_by(|a, b| {
            b.subscribers
                .cmp(&a.subscribers)
                .then_with(|| a.name.cmp(&b.name))
        });
        all.truncate(limit);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn registry(max_topics: usize) -> Registry {
        Registry::new(RegistryConfig {
            shards: 4,
            max_topics,
            max_unpublished: max_topics,
            max_patterns: 16,
            namespaces: Default::default(),
            topic: TopicConfig {
                channel_capacity: 4,
                history_len: 4,
                history_ttl: Duration::from_millis(1),
                log_carried: false,
                lag_policy: None,
                delta: false,
            },
        })
    }

    fn name(s: &str) -> TopicName {
        TopicName::new(s).unwrap()
    }

    #[test]
    fn same_name_same_topic() {
        let r = registry(10);
        let a = r.get_or_create(&name("a")).unwrap();
        let b = r.get_or_create(&name("a")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(r.len(), 1);
        assert!(r.get("b").is_none());
    }

    #[test]
    fn bounded_and_reclaims_idle_topics() {
        let r = registry(2);
        let a = r.get_or_create(&name("a")).unwrap();
        let _sub = a.subscribe(None);
        drop(a);
        r.publish(&name("b"), None, Payload::from_value(&serde_json::json!(1)))
            .unwrap();
        // "a" has a subscriber; "b" has history until it expires.
        std::thread::sleep(Duration::from_millis(5));
        // "b" expired and is reclaimed to make room for "c".
        let _c = r.get_or_create(&name("c")).unwrap();
        assert!(r.get("b").is_none());
        assert_eq!(
            r.get_or_create(&name("d")).unwrap_err(),
            RegistryError::TooManyTopics { max: 2 }
        );
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn a_full_registry_drops_unused_topics_at_once_but_scans_rarely() {
        let r = Registry::new(RegistryConfig {
            shards: 4,
            max_topics: 3,
            max_unpublished: 3,
            max_patterns: 16,
            namespaces: Default::default(),
            topic: TopicConfig {
                history_ttl: Duration::from_secs(600),
                ..TopicConfig::default()
            },
        });
        // A sprayer's topics: subscribed, then left, never published. Their quiet window
        // (600 s) has not passed.
        for n in ["spray-1", "spray-2"] {
            let t = r.get_or_create(&name(n)).unwrap();
            drop(t.subscribe(None));
        }
        r.publish(
            &name("kept"),
            None,
            Payload::from_value(&serde_json::json!(1)),
        )
        .unwrap();
        assert_eq!(
            r.reclaim(),
            0,
            "the periodic reclaim waits for the quiet window"
        );
        // Full: a new topic still gets in; the unused ones go, the one with history stays.
        let _fresh = r.get_or_create(&name("fresh")).unwrap();
        assert!(r.get("kept").is_some());
        assert!(r.get("spray-1").is_none() || r.get("spray-2").is_none());
        let _other = r.get_or_create(&name("other")).unwrap();
        assert_eq!(r.len(), 3);
        // Full of topics in use: refused, and the next refusal within the scan interval does
        // not scan again.
        assert_eq!(
            r.get_or_create(&name("refused")).unwrap_err(),
            RegistryError::TooManyTopics { max: 3 }
        );
        let scanned = r.last_pressure_scan.load(Ordering::Relaxed);
        assert!(r.get_or_create(&name("refused-2")).is_err());
        assert_eq!(r.last_pressure_scan.load(Ordering::Relaxed), scanned);
    }

    #[test]
    fn subscribers_cannot_take_the_room_publishers_need() {
        let r = Registry::new(RegistryConfig {
            shards: 4,
            max_topics: 4,
            max_unpublished: 2,
            max_patterns: 16,
            namespaces: Default::default(),
            topic: TopicConfig::default(),
        });
        // Held by their subscribers (the Arcs): nothing can be reclaimed.
        let (a, created) = r.get_or_create_for_subscriber(&name("a")).unwrap();
        assert!(created);
        let (b, _) = r.get_or_create_for_subscriber(&name("b")).unwrap();
        assert_eq!(
            r.get_or_create_for_subscriber(&name("c")).unwrap_err(),
            RegistryError::TooManyUnpublished { max: 2 }
        );
        let (again, created) = r.get_or_create_for_subscriber(&name("a")).unwrap();
        assert!(
            !created && Arc::ptr_eq(&a, &again),
            "an existing topic is not counted"
        );
        // Publishers still have the rest of the registry.
        let p = r.publish(&name("p"), None, Payload::from_value(&serde_json::json!(1)));
        assert!(p.is_ok());
        // A first message makes a topic an ordinary one, and frees room for subscribers.
        a.publish(None, Payload::from_value(&serde_json::json!(1)));
        assert_eq!(r.unpublished(), 1);
        let (c, _) = r.get_or_create_for_subscriber(&name("c")).unwrap();
        drop((b, c));
        // Dropped from the registry, an unpublished topic gives its room back.
        r.reclaim_where(true);
        assert_eq!(r.unpublished(), 0);
    }

    #[test]
    fn a_held_topic_is_never_reclaimed() {
        let r = registry(10);
        let held = r.get_or_create(&name("a")).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(r.reclaim(), 0);
        drop(held);
        assert_eq!(r.reclaim(), 1);
        assert!(r.is_empty());
    }

    #[test]
    fn concurrent_creation_yields_one_topic() {
        let r = Arc::new(registry(1000));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    (0..200)
                        .map(|i| {
                            Arc::as_ptr(&r.get_or_create(&name(&format!("t{i}"))).unwrap()) as usize
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<Vec<usize>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(r.len(), 200);
    }
}
