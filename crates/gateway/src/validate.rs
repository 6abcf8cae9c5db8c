//! Validation of a [`Config`]: every value checked once, before anything binds, and every file the
//! configuration names read once, here. [`Config::validate`] returns what it loaded (the token
//! keys, the TLS certificate) so that nothing reads those files again at start-up.
//!
//! Each bound is written once: a check below produces its own message from the key and the
//! range (`limits.max_subscriptions must be within 1..=1024`), and the field's doc on the
//! schema ([`crate::config`]) states the same range. This module sits above the schema: it
//! uses the access rules ([`crate::auth`]), TLS ([`crate::server::tls`]) and the Redis
//! settings ([`crate::bridge::redis_conn`]) to load what the configuration names, while the
//! schema imports none of them.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure};

use crate::auth::Auth;
use crate::config::Config;
use crate::server::tls::Tls;

/// What a valid configuration loaded: each file it names, read once.
#[derive(Debug)]
pub struct Loaded {
    /// Who decides what clients may do.
    pub(crate) access: Access,
    /// The public listener's TLS certificate and key, when TLS is on.
    pub(crate) tls: Option<Arc<Tls>>,
}

/// Who decides what clients may do: the token rules, and the application's hooks.
#[derive(Debug)]
pub(crate) struct Access {
    /// The access rules, with the token keys read from their files.
    pub auth: Auth,
    /// The hooks, with the CA certificates an `https://` hook is checked against.
    pub hooks: crate::hooks::Hooks,
}

impl Access {
    /// Reads the token key files and the hooks' CA file `config` names.
    pub(crate) fn load(config: &Config) -> anyhow::Result<Self> {
        Ok(Self {
            auth: Auth::from_config(&config.auth)
                .map_err(|e| anyhow::anyhow!("auth: {e:#}"))?
                .with_namespaces(&config.namespaces)
                .with_ambient_credentials(config.hooks.forwards_cookies()),
            hooks: crate::hooks::Hooks::from_config(&config.hooks)?,
        })
    }
}

/// `value` of `key` must be within `range`.
fn within<T: PartialOrd + Display>(
    key: &str,
    value: T,
    range: RangeInclusive<T>,
) -> anyhow::Result<()> {
    ensure!(
        range.contains(&value),
        "{key} must be within {}..={}",
        range.start(),
        range.end()
    );
    Ok(())
}

/// `value` of `key` must be at least `min`.
fn at_least<T: PartialOrd + Display>(key: &str, value: T, min: T) -> anyhow::Result<()> {
    ensure!(value >= min, "{key} must be at least {min}");
    Ok(())
}

/// A duration that must not be zero.
fn above_zero(key: &str, value: Duration) -> anyhow::Result<()> {
    ensure!(!value.is_zero(), "{key} must be above zero");
    Ok(())
}

/// A rate or burst: a number of at least 0 (0 turns the limit off).
fn rate(key: &str, value: f64) -> anyhow::Result<()> {
    ensure!(
        value.is_finite() && value >= 0.0,
        "{key} must be a number of at least 0"
    );
    Ok(())
}

impl Config {
    /// Checks every value and reads every file the configuration names (token keys, TLS
    /// certificate and key, the hooks' CA); the error says which field is wrong and why. What was
    /// read is returned, so start-up uses it instead of reading again.
    pub fn validate(&self) -> anyhow::Result<Loaded> {
        ensure!(
            self.listen != self.admin_listen || self.listen.port() == 0,
            "listen and admin_listen must differ (both are {})",
            self.listen
        );
        let t = &self.topics;
        at_least("topics.max_topics", t.max_topics, 1)?;
        within("topics.history_len", t.history_len, 0..=100_000)?;
        within("topics.max_patterns", t.max_patterns, 0..=1_000_000)?;
        within("topics.channel_capacity", t.channel_capacity, 1..=65_536)?;
        above_zero("topics.history_ttl", t.history_ttl)?;
        above_zero("topics.reclaim_interval", t.reclaim_interval)?;
        ensure!(
            t.unpublished_share > 0.0 && t.unpublished_share <= 1.0,
            "topics.unpublished_share must be above 0 and at most 1"
        );
        above_zero("sse.heartbeat", self.sse.heartbeat)?;
        above_zero("sse.min_heartbeat", self.sse.min_heartbeat)?;
        ensure!(
            self.sse.min_heartbeat <= self.sse.max_heartbeat,
            "sse.min_heartbeat must be at most sse.max_heartbeat"
        );
        within("worker_threads", self.worker_threads, 0..=1024)?;
        let ws = &self.ws;
        within("ws.max_message_size", ws.max_message_size, 1024..=16 << 20)?;
        rate("ws.inbound_rate", ws.inbound_rate)?;
        rate("ws.inbound_burst", ws.inbound_burst)?;
        within("ws.read_buffer_size", ws.read_buffer_size, 256..=1 << 20)?;
        within("ws.write_buffer_size", ws.write_buffer_size, 0..=1 << 20)?;
        within("ws.deflate_min_size", ws.deflate_min_size, 0..=16 << 20)?;
        above_zero("ws.ping_interval", ws.ping_interval)?;
        above_zero("ws.min_ping_interval", ws.min_ping_interval)?;
        ensure!(
            ws.min_ping_interval <= ws.max_ping_interval,
            "ws.min_ping_interval must be at most ws.max_ping_interval"
        );
        ensure!(
            ws.idle_timeout > ws.ping_interval,
            "ws.idle_timeout must be longer than ws.ping_interval"
        );
        above_zero("poll.timeout", self.poll.timeout)?;
        at_least("poll.max_batch", self.poll.max_batch, 1)?;
        ensure!(
            !self.auth.cors_credentials
                || (!self.auth.allowed_origins.is_empty()
                    && !self.auth.allowed_origins.iter().any(|o| o == "*")),
            "auth.cors_credentials needs auth.allowed_origins to list the origins (and not `*`)"
        );
        let l = &self.limits;
        at_least("limits.max_connections", l.max_connections, 1)?;
        at_least(
            "limits.max_connections_per_address",
            l.max_connections_per_address,
            1,
        )?;
        ensure!(
            l.connect_rate_per_address.is_finite() && l.connect_rate_per_address > 0.0,
            "limits.connect_rate_per_address must be above 0"
        );
        at_least(
            "limits.connect_burst_per_address",
            l.connect_burst_per_address,
            1.0,
        )?;
        rate("limits.publish_rate_per_key", l.publish_rate_per_key)?;
        rate("limits.publish_burst_per_key", l.publish_burst_per_key)?;
        rate(
            "limits.publish_rate_per_connection",
            l.publish_rate_per_connection,
        )?;
        rate(
            "limits.publish_burst_per_connection",
            l.publish_burst_per_connection,
        )?;
        within("limits.max_subscriptions", l.max_subscriptions, 1..=1024)?;
        within(
            "limits.max_payload_bytes",
            l.max_payload_bytes,
            16..=16 << 20,
        )?;
        within("limits.max_batch_publish", l.max_batch_publish, 1..=10_000)?;
        within(
            "limits.max_answer_bytes",
            l.max_answer_bytes,
            1024..=256 << 20,
        )?;
        above_zero("limits.header_read_timeout", l.header_read_timeout)?;
        above_zero("limits.write_timeout", l.write_timeout)?;
        above_zero("limits.body_read_timeout", l.body_read_timeout)?;
        within("limits.listen_backlog", l.listen_backlog, 1..=65_535)?;
        within(
            "limits.max_new_patterns_per_client",
            l.max_new_patterns_per_client,
            1..=100_000,
        )?;
        if l.cold_topics_per_minute != 0 && l.cold_topics_per_minute < l.max_subscriptions {
            bail!(
                "limits.cold_topics_per_minute must be 0 (off) or at least limits.max_subscriptions ({}): a subscription to that many new topics could never be admitted",
                l.max_subscriptions
            );
        }
        within("limits.ipv6_prefix", l.ipv6_prefix, 1..=128)?;
        at_least("limits.admin_max_connections", l.admin_max_connections, 1)?;
        at_least(
            "limits.admin_max_connections_per_address",
            l.admin_max_connections_per_address,
            1,
        )?;
        within(
            "limits.max_header_bytes",
            l.max_header_bytes,
            1024..=1 << 20,
        )?;
        let c = &self.cluster;
        within("cluster.node_id length", c.node_id.len(), 1..=64)?;
        within("cluster.redis_shards", c.redis_shards, 1..=16384)?;
        ensure!(
            (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&c.interest_linger),
            "cluster.interest_linger must be within 1s..=1h"
        );
        ensure!(
            (Duration::from_millis(100)..=Duration::from_secs(60)).contains(&c.backfill_timeout),
            "cluster.backfill_timeout must be within 100ms..=1m"
        );
        at_least("cluster.redis_stream_maxlen", c.redis_stream_maxlen, 100)?;
        ensure!(
            (Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&c.idempotency_window),
            "cluster.idempotency_window must be within 1s..=24h"
        );
        within(
            "cluster.idempotency_max_keys",
            c.idempotency_max_keys,
            1..=10_000_000,
        )?;
        within("cluster.redis_wait_replicas", c.redis_wait_replicas, 0..=16)?;
        ensure!(
            c.redis_wait_replicas == 0 || c.redis_mode != crate::config::RedisMode::Cluster,
            "cluster.redis_wait_replicas is for the single and sentinel modes (a Redis Cluster \
             master's WAIT would not cover the other masters' streams)"
        );
        ensure!(
            c.kafka_upstream_topic.is_none() || c.kafka_brokers.is_some(),
            "cluster.kafka_upstream_topic needs cluster.kafka_brokers"
        );
        if c.kafka_brokers.is_some() {
            ensure!(
                !c.kafka_topics.is_empty(),
                "cluster.kafka_topics must name at least one topic"
            );
            for topic in &c.kafka_topics {
                within("cluster.kafka_topics entry length", topic.len(), 1..=249)?;
            }
        }
        ensure!(
            c.redis_url.is_none() || c.kafka_brokers.is_none() || !c.kafka_prefixes.is_empty(),
            "with both cluster.redis_url and cluster.kafka_brokers, cluster.kafka_prefixes must \
             name the topic prefixes Kafka carries (\"\" for all); Redis carries the rest"
        );
        if c.redis_url.is_some() {
            crate::bridge::redis_conn::RedisTarget::from_config(c)?;
        } else if c.redis_ca_file.is_some() || c.redis_cert_file.is_some() {
            bail!("cluster.redis_ca_file / redis_cert_file need cluster.redis_url");
        }
        crate::bridge::kafka_props::validate(&c.kafka_properties)?;
        if let Some(secret) = &self.auth.hs256_secret {
            at_least("auth.hs256_secret length", secret.len(), 32)?;
        }
        let tls = match self.tls.enabled() {
            true => Some(Arc::new(
                Tls::load(&self.tls).map_err(|e| anyhow::anyhow!("tls: {e:#}"))?,
            )),
            false => None,
        };
        self.admin.validate(self.admin_listen)?;
        self.hooks.validate()?;
        self.telemetry.validate()?;
        crate::config::namespaces::validate(&self.namespaces, self.topics.presence)?;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_filter) {
            bail!("log_filter {:?} is invalid: {e}", self.log_filter);
        }
        let access = Access::load(self)?;
        Ok(Loaded { access, tls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_names_its_key_and_range() {
        let mut config = Config::default();
        config.limits.max_subscriptions = 0;
        let e = config.validate().unwrap_err().to_string();
        assert_eq!(e, "limits.max_subscriptions must be within 1..=1024");
        config.limits.max_subscriptions = 1025;
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "limits.max_subscriptions must be within 1..=1024"
        );
        config.limits.max_subscriptions = 1024;
        config.validate().unwrap();
        config.sse.heartbeat = Duration::ZERO;
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "sse.heartbeat must be above zero"
        );
        config.sse.heartbeat = Duration::from_secs(1);
        config.sse.min_heartbeat = Duration::from_secs(400);
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "sse.min_heartbeat must be at most sse.max_heartbeat"
        );
        config.sse.min_heartbeat = Duration::from_secs(5);
        config.limits.publish_rate_per_key = f64::NAN;
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "limits.publish_rate_per_key must be a number of at least 0"
        );
        config.limits.publish_rate_per_key = 0.0;
        config.auth.hs256_secret = Some("short".into());
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "auth.hs256_secret length must be at least 32"
        );
    }

    #[test]
    fn validation_hands_over_what_it_loaded() {
        let mut config = Config::default();
        config.auth.hs256_secret = Some("0123456789abcdef0123456789abcdef".into());
        let loaded = config.validate().unwrap();
        assert!(loaded.access.auth.enabled());
        assert!(loaded.tls.is_none());
        config.tls.cert_file = Some("/nonexistent/cert.pem".into());
        config.tls.key_file = Some("/nonexistent/key.pem".into());
        let e = format!("{:#}", config.validate().unwrap_err());
        assert!(e.starts_with("tls: "), "{e}");
    }
}
