//! `[limits]`: what protects the gateway from its clients.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits that protect the gateway from its clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Open connections on the public listener; past it new ones get 503.
    /// Bound: At least 1.
    pub max_connections: usize,
    /// Open connections from one client address; past it new ones get 429.
    /// Bound: At least 1.
    pub max_connections_per_address: u32,
    /// New connections per second from one client address (token bucket); faster gets 429.
    /// Bound: Above 0.
    pub connect_rate_per_address: f64,
    /// Burst of new connections one address may open at once.
    /// Bound: At least 1.
    pub connect_burst_per_address: f64,
    /// Topics one connection may subscribe to (also the most topics in one request).
    /// Bound: 1 to 1024.
    pub max_subscriptions: usize,
    /// Largest published payload (compact JSON) in bytes; larger is 413.
    /// Bound: 16 to 16777216.
    pub max_payload_bytes: usize,
    /// Most messages in one batch publish.
    /// Bound: 1 to 10000.
    pub max_batch_publish: usize,
    /// Bytes of messages one long-poll answer or one history page holds: messages are added
    /// until their frames reach it (at least one, so a larger message still goes through),
    /// then the answer says `"more":true` and its cursor (`next`) continues after them.
    /// Bounds what one request can make the gateway hold for a client that reads slowly.
    /// Bound: 1024 to 268435456.
    pub max_answer_bytes: usize,
    /// Publishes per second on the public listener per publisher: an API key, a token's
    /// subject, or (dev mode, tokens without `sub`) a client address; a batch counts each
    /// message. Faster gets 429 with `retry-after`. 0 turns the limit off. The admin listener
    /// is not limited.
    /// Bound: At least 0 (0: no limit).
    pub publish_rate_per_key: f64,
    /// Burst of publishes one publisher may make at once.
    /// Bound: At least 0.
    pub publish_burst_per_key: f64,
    /// Publishes per second on one WebSocket connection; faster gets a `rate_limited` error
    /// frame (the connection stays). 0 turns the limit off.
    /// Bound: At least 0 (0: no limit).
    pub publish_rate_per_connection: f64,
    /// Burst of publishes one WebSocket connection may make at once.
    /// Bound: At least 0.
    pub publish_burst_per_connection: f64,
    /// Time a client has to send its request headers (slowloris protection).
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero.
    pub header_read_timeout: Duration,
    /// Longest time one write to an SSE or WebSocket client may wait for a client that does
    /// not read; then the connection is closed as a slow consumer. Bounds what each
    /// connection holds queued to the kernel's socket buffer.
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero.
    pub write_timeout: Duration,
    /// Largest request head (request line and headers) in bytes; larger gets 431.
    /// Bound: 1024 to 1048576.
    pub max_header_bytes: usize,
    /// Time a client has to send a request body (publish API, both listeners); slower gets
    /// 408. A body declared larger than the limit gets 413 before it is read.
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero.
    pub body_read_timeout: Duration,
    /// Topics one client (its token's subject, else its address) may hold that its own
    /// subscriptions created and that have had no message yet; past it, subscribing to yet
    /// another new topic gets 429 `topic_quota`. Subscribing to topics that exist is not
    /// counted.
    pub max_new_topics_per_client: usize,
    /// Prefix patterns (`orders.*`) one client (its token's subject, else its address) may
    /// hold that its own subscriptions made new on this node; past it, yet another new
    /// pattern gets 429 `pattern_quota`. A pattern some other subscription holds already is
    /// not counted. Keeps a few clients from taking `topics.max_patterns` from everyone.
    /// Bound: 1 to 100000.
    pub max_new_patterns_per_client: usize,
    /// Topics per minute one client (its token's subject, else its address) may ask this
    /// node for that the node holds no topic for: subscribing (SSE, WebSocket), long-polling
    /// or reading history. In a cluster under `cluster.routing = "interest"` each such topic
    /// may make the node start reading one more partition of the cluster's log, so this
    /// bounds how fast a client, even one holding no subscription, can walk a node onto every
    /// partition. Past it, 429 `cold_topics` with `retry-after`. Charged only on such a node, after
    /// every other refusal; bursts of a whole minute's worth. 0 turns the limit off.
    /// Bound: 0 (off), or at least `limits.max_subscriptions`.
    pub cold_topics_per_minute: usize,
    /// Bits of an IPv6 client address that name the client for every per-address limit
    /// (connections and connect rate per address, and, for clients without a token subject,
    /// the publish rate, topic, pattern and cold-topic quotas): 64 counts a whole /64, which one
    /// host commonly holds, as one client; 128 counts each address. IPv4 addresses count
    /// whole.
    /// Bound: 1 to 128.
    pub ipv6_prefix: u8,
    /// Connections the kernel may hold completed but not yet accepted, per listener (the
    /// `listen(2)` backlog; the kernel caps it at `net.core.somaxconn`). A burst of new
    /// connections larger than this waits on SYN retransmits (1 s, then 3 s).
    /// Bound: 1 to 65535.
    pub listen_backlog: u32,
    /// Open connections on the admin listener; past it new ones are closed.
    /// Bound: At least 1.
    pub admin_max_connections: usize,
    /// Open connections on the admin listener from one address; past it new ones get 429.
    /// Bound: At least 1.
    pub admin_max_connections_per_address: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 100_000,
            max_connections_per_address: 10_000,
            connect_rate_per_address: 1_000.0,
            connect_burst_per_address: 5_000.0,
            max_subscriptions: 64,
            max_payload_bytes: 64 * 1024,
            max_batch_publish: 100,
            max_answer_bytes: 1 << 20,
            publish_rate_per_key: 1_000.0,
            publish_burst_per_key: 2_000.0,
            publish_rate_per_connection: 100.0,
            publish_burst_per_connection: 200.0,
            header_read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            body_read_timeout: Duration::from_secs(10),
            max_new_topics_per_client: 1_000,
            max_new_patterns_per_client: 16,
            cold_topics_per_minute: 1_024,
            ipv6_prefix: 64,
            listen_backlog: 4096,
            admin_max_connections: 1024,
            admin_max_connections_per_address: 64,
        }
    }
}
