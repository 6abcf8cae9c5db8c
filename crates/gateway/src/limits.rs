//! Rate and connection limits: open connections and new connections per second from one
//! client address (checked in the accept loop before anything else is spent on the
//! connection), and publishes per second per credential and per WebSocket connection.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The address holds its maximum of open connections.
    TooManyFromAddress,
    /// The address opens connections faster than allowed.
    ConnectRate,
}

/// A rate: `per_second` on average, bursts of up to `burst`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// Tokens held at most.
    pub burst: f64,
}

impl Rate {
    /// `per_second` with bursts of `burst` (at least 1); `None` when `per_second` is 0 (no
    /// limit).
    pub(crate) fn new(per_second: f64, burst: f64) -> Option<Self> {
        (per_second > 0.0).then_some(Self {
            per_second,
            burst: burst.max(1.0),
        })
    }

    /// A full bucket of this rate.
    pub(crate) fn bucket(self) -> TokenBucket {
        self.bucket_at(Instant::now())
    }

    /// A full bucket of this rate, filled at `now`.
    pub(crate) fn bucket_at(self, now: Instant) -> TokenBucket {
        TokenBucket {
            tokens: self.burst,
            refilled: now,
        }
    }
}

/// A token bucket; the [`Rate`] is kept by its owner (one rate serves many buckets).
#[derive(Clone, Debug)]
pub(crate) struct TokenBucket {
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    fn refill(&mut self, rate: Rate, now: Instant) {
        self.tokens = (self.tokens
            + now.saturating_duration_since(self.refilled).as_secs_f64() * rate.per_second)
            .min(rate.burst);
        self.refilled = now;
    }

    /// Takes `n` tokens, or none and says how long until there are `n` (`n` above the burst
    /// can never be taken: the wait is then the time to refill the whole burst).
    pub(crate) fn take(&mut self, rate: Rate, n: f64) -> Result<(), Duration> {
        self.take_at(rate, n, Instant::now())
    }

    /// [`Self::take`] with the clock read by the caller, which needs `now` too.
    pub(crate) fn take_at(&mut self, rate: Rate, n: f64, now: Instant) -> Result<(), Duration> {
        self.refill(rate, now);
        if self.tokens >= n {
            self.tokens -= n;
            Ok(())
        } else {
            let missing = n.min(rate.burst) - self.tokens;
            // A tiny configured rate can make the wait overflow a Duration: wait "forever".
            Err(Duration::try_from_secs_f64(missing / rate.per_second).unwrap_or(Duration::MAX))
        }
    }

    /// When tokens were last asked for (taken or refused), or the bucket was filled.
    pub(crate) fn refilled(&self) -> Instant {
        self.refilled
    }

    /// Whether the bucket would be full now (nothing to remember about it).
    fn is_full(&self, rate: Rate, now: Instant) -> bool {
        self.tokens + now.saturating_duration_since(self.refilled).as_secs_f64() * rate.per_second
            >= rate.burst
    }
}

#[derive(Debug)]
struct Entry {
    open: u32,
    bucket: TokenBucket,
}

/// Open connections and a token bucket of new connections per client address.
///
/// Bounded: an entry exists only for an address with open connections or a bucket still
/// refilling; [`Self::sweep`] drops the others, and past `max_entries` addresses new ones are
/// not rate-limited (they are still counted against the connection limits).
#[derive(Debug)]
pub(crate) struct AddressLimits {
    max_open: u32,
    v6_prefix: u8,
    rate: Rate,
    max_entries: usize,
    entries: Mutex<HashMap<IpAddr, Entry>>,
}

/// What a connection holds while it is open: its place under the global limit and under its
/// address's. Moved into whichever task serves the connection for its whole life: held, never
/// read (dropping them gives the places back).
#[derive(Debug, Default)]
#[allow(dead_code)]
pub(crate) struct Permits {
    /// The global connection limit's permit.
    pub global: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The per-address permit.
    pub address: Option<AddressPermit>,
}

/// Holds one connection's place; releases it when dropped.
#[derive(Debug)]
pub(crate) struct AddressPermit {
    limits: Arc<AddressLimits>,
    ip: IpAddr,
}

impl AddressLimits {
    /// At most `max_open` open connections and `rate` new connections per second (bursts of
    /// `burst`) per address, IPv6 addresses counted per prefix of `v6_prefix` bits
    /// ([`address_key`]).
    pub(crate) fn new(
        max_open: u32,
        rate: f64,
        burst: f64,
        max_entries: usize,
        v6_prefix: u8,
    ) -> Arc<Self> {
        Arc::new(Self {
            max_open,
            v6_prefix,
            rate: Rate::new(rate, burst).unwrap_or(Rate {
                per_second: f64::MAX,
                burst: f64::MAX,
            }),
            max_entries,
            entries: Mutex::new(HashMap::new()),
        })
    }

    /// Admits a new connection from `ip`, or says why not.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<AddressPermit, Refusal> {
        let ip = address_key(ip, self.v6_prefix);
        let mut entries = self.entries.lock();
        let full = entries.len() >= self.max_entries;
        let entry = match entries.get_mut(&ip) {
            Some(e) => e,
            // Past the bound, new addresses are not tracked (fail open rather than grow).
            None if full => {
                return Ok(AddressPermit {
                    limits: self.clone(),
                    ip,
                });
            }
            None => entries.entry(ip).or_insert(Entry {
                open: 0,
                bucket: self.rate.bucket(),
            }),
        };
        if entry.open >= self.max_open {
            return Err(Refusal::TooManyFromAddress);
        }
        if entry.bucket.take(self.rate, 1.0).is_err() {
            return Err(Refusal::ConnectRate);
        }
        entry.open += 1;
        Ok(AddressPermit {
            limits: self.clone(),
            ip,
        })
    }

    /// Drops the entries of addresses with no open connection and a full bucket.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let rate = self.rate;
        self.entries
            .lock()
            .retain(|_, e| e.open > 0 || !e.bucket.is_full(rate, now));
    }

    /// Addresses tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether no address is tracked.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The client a per-address limit counts `ip` against: an IPv4 address (an IPv4-mapped IPv6
/// one included) as it is; an IPv6 address cut to its first `v6_prefix` bits
/// (`limits.ipv6_prefix`, 64 by default), because one host commonly holds a whole /64 and
/// could otherwise take a fresh address, and a fresh budget, for every connection.
pub(crate) fn address_key(ip: IpAddr, v6_prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let bits = u32::from(v6_prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// The key of a client for the per-client limits ([`PublishLimits`], [`TopicQuota`],
/// [`ColdTopics`]) when it has no API key: its token's subject, else its address as
/// [`address_key`] cuts it (`addr:2001:db8:1:2::/64`), so that opening more connections, or
/// connecting from more addresses of one IPv6 prefix, does not multiply the budget. HTTP and
/// WebSocket use the same keys.
pub(crate) fn publisher_key(sub: Option<&str>, peer: IpAddr, v6_prefix: u8) -> String {
    match (sub, address_key(peer, v6_prefix)) {
        (Some(sub), _) => format!("sub:{sub}"),
        (None, IpAddr::V6(prefix)) if v6_prefix < 128 => format!("addr:{prefix}/{v6_prefix}"),
        (None, address) => format!("addr:{address}"),
    }
}

/// Publishes per second per publisher (an API key, a token's subject, or a client address).
///
/// Bounded like [`AddressLimits`]: a publisher is remembered while its bucket refills, and
/// past `max_entries` publishers new ones are not limited.
#[derive(Debug)]
pub(crate) struct PublishLimits {
    rate: Option<Rate>,
    max_entries: usize,
    buckets: Mutex<HashMap<String, TokenBucket>>,
}

impl PublishLimits {
    /// `rate` publishes per second per publisher (`None`: no limit).
    pub(crate) fn new(rate: Option<Rate>, max_entries: usize) -> Self {
        Self {
            rate,
            max_entries,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Admits `n` publishes by `publisher` at once, or says how long to wait.
    pub(crate) fn admit(&self, publisher: &str, n: usize) -> Result<(), Duration> {
        let Some(rate) = self.rate else {
            return Ok(());
        };
        let mut buckets = self.buckets.lock();
        if let Some(bucket) = buckets.get_mut(publisher) {
            return bucket.take(rate, n as f64);
        }
        if buckets.len() >= self.max_entries {
            return Ok(());
        }
        let mut bucket = rate.bucket();
        let taken = bucket.take(rate, n as f64);
        buckets.insert(publisher.to_owned(), bucket);
        taken
    }

    /// Forgets publishers whose bucket is full again.
    pub(crate) fn sweep(&self) {
        let Some(rate) = self.rate else { return };
        let now = Instant::now();
        self.buckets.lock().retain(|_, b| !b.is_full(rate, now));
    }

    /// Publishers remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.lock().len()
    }

    /// Whether no publisher is remembered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The client key of the admin API's own feeds (`/v1/tail`): trusted, never limited by
/// [`ColdTopics`]. No client's [`publisher_key`] is this (theirs start `sub:` or `addr:`).
pub(crate) const ADMIN_CLIENT: &str = "admin";

/// Topics per minute each client (its [`publisher_key`]) may ask this node for that the
/// node holds no topic for (`limits.cold_topics_per_minute`): on a node that reads the
/// cluster's log by interest, each such topic may make it follow one more partition, so
/// this bounds how fast subscriptions, long-polls and history reads (which hold no
/// subscription) can walk a node onto every partition. Charged after every other refusal, just
/// before the node is made to read ([`crate::app::AppState::backfill`]).
#[derive(Debug)]
pub(crate) struct ColdTopics {
    per_minute: usize,
    buckets: PublishLimits,
}

impl ColdTopics {
    /// `per_minute` topics per client, in bursts of as many (0: no limit); at most
    /// `max_entries` clients remembered (past it, new ones are not limited, as
    /// [`PublishLimits`]).
    pub(crate) fn new(per_minute: usize, max_entries: usize) -> Self {
        let rate = Rate::new(per_minute as f64 / 60.0, per_minute as f64);
        Self {
            per_minute,
            buckets: PublishLimits::new(rate, max_entries),
        }
    }

    /// Admits `cold` topics asked for by `client`, all or none: `429 cold_topics` with
    /// `retry-after` past the budget.
    pub(crate) fn admit(&self, client: &str, cold: usize) -> Result<(), crate::error::ApiError> {
        if cold == 0 || client == ADMIN_CLIENT {
            return Ok(());
        }
        self.buckets.admit(client, cold).map_err(|wait| {
            crate::error::ApiError::rate_limited(
                "cold_topics",
                format!(
                    "this client asked for more than {} topics per minute that this node did not hold (limits.cold_topics_per_minute); ask again later",
                    self.per_minute
                ),
                wait,
            )
        })
    }

    /// Forgets clients whose budget is whole again.
    pub(crate) fn sweep(&self) {
        self.buckets.sweep();
    }
}

/// Topics each client (its token's subject, else its address: the keys of
/// [`publisher_key`]) holds that its own subscriptions created, counted while those
/// subscriptions last. Bounds what one client can pin in the registry through subscriptions
/// (`limits.max_new_topics_per_client`); the registry's `max_unpublished` bounds all clients
/// together. Entries exist only for clients holding a charge. The same quota, with its own
/// maximum, counts the prefix patterns each client's subscriptions made new on the node
/// (`limits.max_new_patterns_per_client`; all clients together: `topics.max_patterns`).
#[derive(Debug)]
pub(crate) struct TopicQuota {
    max: usize,
    /// What is counted: `false` topics, `true` patterns.
    patterns: bool,
    held: Mutex<HashMap<String, usize>>,
}

/// One topic charged to a client; dropping it gives the room back.
#[derive(Debug)]
pub(crate) struct QuotaCharge {
    quota: Arc<TopicQuota>,
    client: Box<str>,
}

impl TopicQuota {
    /// `max` topics per client.
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            patterns: false,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// `max` new prefix patterns per client.
    pub(crate) fn for_patterns(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            patterns: true,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// Charges one topic to `client`, or refuses when it holds its maximum.
    pub(crate) fn charge(
        self: &Arc<Self>,
        client: &str,
    ) -> Result<QuotaCharge, crate::error::ApiError> {
        let mut held = self.held.lock();
        let n = held.entry(client.to_owned()).or_insert(0);
        if *n >= self.max {
            if *n == 0 {
                held.remove(client);
            }
            let (code, reason) = if self.patterns {
                (
                    "pattern_quota",
                    format!(
                        "this client's subscriptions hold {} patterns no other client held; subscribe to topics, or drop some patterns first",
                        self.max
                    ),
                )
            } else {
                (
                    "topic_quota",
                    format!(
                        "this client's subscriptions created {} topics that have no message yet; subscribe to existing topics, or drop some first",
                        self.max
                    ),
                )
            };
            return Err(crate::error::ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                code,
                reason,
            ));
        }
        *n += 1;
        Ok(QuotaCharge {
            quota: self.clone(),
            client: client.into(),
        })
    }
}

impl Drop for QuotaCharge {
    fn drop(&mut self) {
        let mut held = self.quota.held.lock();
        if let Some(n) = held.get_mut(&*self.client) {
            *n -= 1;
            if *n == 0 {
                held.remove(&*self.client);
            }
        }
    }
}

impl Drop for AddressPermit {
    fn drop(&mut self) {
        if let Some(e) = self.limits.entries.lock().get_mut(&self.ip) {
            e.open = e.open.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_open_connections_and_rate_per_address() {
        let limits = AddressLimits::new(2, 0.0001, 3.0, 100, 64);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let p1 = limits.admit(a).unwrap();
        let _p2 = limits.admit(a).unwrap();
        assert_eq!(limits.admit(a).unwrap_err(), Refusal::TooManyFromAddress);
        assert!(limits.admit(b).is_ok());
        drop(p1);
        // Room again, but the burst of 3 is spent.
        let _p3 = limits.admit(a).unwrap();
        drop(_p3);
        assert_eq!(limits.admit(a).unwrap_err(), Refusal::ConnectRate);
    }

    #[test]
    fn publish_limits_per_publisher_all_or_nothing() {
        let limits = PublishLimits::new(Rate::new(0.001, 5.0), 2);
        assert!(limits.admit("key:a", 3).is_ok());
        let wait = limits.admit("key:a", 3).unwrap_err();
        assert!(wait > Duration::from_secs(100), "{wait:?}");
        assert!(
            limits.admit("key:a", 2).is_ok(),
            "a refused batch took nothing"
        );
        assert!(limits.admit("key:a", 1).is_err());
        assert!(limits.admit("key:b", 5).is_ok(), "publishers are separate");
        // Past the bound, new publishers are not remembered.
        assert!(limits.admit("key:c", 5).is_ok());
        assert!(limits.admit("key:c", 5).is_ok());
        assert_eq!(limits.len(), 2);
        let unlimited = PublishLimits::new(Rate::new(0.0, 1.0), 2);
        assert!(unlimited.admit("x", 1_000_000).is_ok());
        assert!(unlimited.is_empty());
    }

    #[test]
    fn publish_limits_forget_refilled_publishers() {
        let limits = PublishLimits::new(Rate::new(1_000_000.0, 1.0), 100);
        limits.admit("key:a", 1).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        limits.sweep();
        assert!(limits.is_empty());
    }

    #[test]
    fn ipv6_neighbours_are_one_client_per_prefix() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Addresses of one /64 are one client; another /64 is another.
        let key = |s: &str| publisher_key(None, ip(s), 64);
        assert_eq!(key("2001:db8:1:2::1"), "addr:2001:db8:1:2::/64");
        assert_eq!(
            key("2001:db8:1:2:ffff:ffff:ffff:ffff"),
            "addr:2001:db8:1:2::/64"
        );
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
        // IPv4, IPv4-mapped IPv6 and a token's subject as before.
        assert_eq!(key("10.0.0.1"), "addr:10.0.0.1");
        assert_eq!(key("::ffff:10.0.0.1"), "addr:10.0.0.1");
        assert_eq!(publisher_key(Some("ann"), ip("2001:db8::1"), 64), "sub:ann");
        // Other prefixes, the whole address, and none at all.
        assert_eq!(
            publisher_key(None, ip("2001:db8:1:2:3::1"), 48),
            "addr:2001:db8:1::/48"
        );
        assert_eq!(
            publisher_key(None, ip("2001:db8::1"), 128),
            "addr:2001:db8::1"
        );
        assert_eq!(address_key(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(address_key(ip("2001:db8::1:2"), 127), ip("2001:db8::1:2"));

        // Connections: a /64 holds the limit of one address, whatever addresses it uses.
        let limits = AddressLimits::new(2, 1_000_000.0, 1_000.0, 100, 64);
        let _a = limits.admit(ip("2001:db8:1:2::1")).unwrap();
        let b = limits.admit(ip("2001:db8:1:2::2")).unwrap();
        assert_eq!(
            limits.admit(ip("2001:db8:1:2::3")).unwrap_err(),
            Refusal::TooManyFromAddress
        );
        assert!(limits.admit(ip("2001:db8:1:3::1")).is_ok(), "another /64");
        drop(b);
        assert!(
            limits.admit(ip("2001:db8:1:2::4")).is_ok(),
            "the place given back"
        );
        // Per address when configured so.
        let whole = AddressLimits::new(1, 1_000_000.0, 1_000.0, 100, 128);
        let _c = whole.admit(ip("2001:db8::1")).unwrap();
        assert!(whole.admit(ip("2001:db8::2")).is_ok());
    }

    #[test]
    fn cold_topics_are_bounded_per_client_and_never_for_the_admin() {
        let cold = ColdTopics::new(64, 100);
        cold.admit("addr:10.0.0.1", 60).unwrap();
        let refused = cold.admit("addr:10.0.0.1", 5).unwrap_err();
        assert_eq!(refused.code(), "cold_topics");
        assert_eq!(refused.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        cold.admit("addr:10.0.0.1", 4).unwrap();
        cold.admit("addr:10.0.0.2", 64).unwrap();
        cold.admit("addr:10.0.0.2", 0).unwrap();
        for _ in 0..10 {
            cold.admit(ADMIN_CLIENT, 64).unwrap();
        }
        let off = ColdTopics::new(0, 100);
        off.admit("addr:10.0.0.1", 1_000_000).unwrap();
    }

    #[test]
    fn sweep_forgets_idle_addresses() {
        let limits = AddressLimits::new(10, 1_000_000.0, 1.0, 100, 64);
        let p = limits.admit("10.0.0.1".parse().unwrap()).unwrap();
        drop(p);
        std::thread::sleep(std::time::Duration::from_millis(5));
        limits.sweep();
        assert!(limits.is_empty());
    }
}
