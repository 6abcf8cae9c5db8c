//! The node's logs: what a log does ([`Bridge`]), which log carries which topic ([`Logs`]),
//! and where a log's records go on this node ([`Ingest`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_core::{Cursor, EventName, Payload, Registry, TopicName};
use tokio_util::sync::CancellationToken;

use super::together::Together;
use crate::telemetry::metrics;
use crate::telemetry::trace::{Carried, Tracing};

/// A boxed future, for the object-safe [`Bridge`] trait.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a bridge could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BridgeError {
    /// The engine cannot be reached (yet); the caller may retry.
    #[error("{bridge} is unavailable: {reason}")]
    Unavailable {
        /// Which bridge.
        bridge: &'static str,
        /// What failed.
        reason: String,
    },
}

/// A cluster bridge: a shared log that positions messages and delivers them to every node.
pub(crate) trait Bridge: Send + Sync + std::fmt::Debug {
    /// Short name for logs, metrics and `/readyz`.
    fn name(&self) -> &'static str;

    /// Appends a message to the shared log and returns its position. The message reaches the
    /// subscribers of every node, this one included, through the log. A traced message's
    /// record carries `trace` (its append span's context), so that every node that reads it
    /// continues the trace. With an `idempotency` key, a publish of the same key to the same
    /// topic within `cluster.idempotency_window` is not appended again: the first one's
    /// position is returned, on whichever node it was published.
    fn append<'a>(
        &'a self,
        topic: &'a TopicName,
        event: Option<&'a EventName>,
        data: &'a Payload,
        trace: Carried<'a>,
        idempotency: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Cursor, BridgeError>>;

    /// Follows the log until `stop`, handing every record to `ingest` (reconnecting with
    /// backoff through [`reconnect_loop`](super::reconnect::reconnect_loop)).
    fn run(self: Arc<Self>, ingest: Ingest, stop: CancellationToken) -> BoxFuture<'static, ()>;

    /// Makes this node read what subscriptions to `topics` (and, with `patterns`, to any
    /// topic this log carries) need, and waits until it has read their history from the log,
    /// for at most `cluster.backfill_timeout` (then `Err`). Immediate when the node reads the
    /// whole log (`cluster.routing = "broadcast"`) or follows their partitions already.
    fn backfill<'a>(
        &'a self,
        topics: &'a [&'a str],
        patterns: bool,
    ) -> BoxFuture<'a, Result<(), BridgeError>> {
        let _ = (topics, patterns);
        Box::pin(async { Ok(()) })
    }

    /// How many of the log's partitions (Redis streams, Kafka partitions) this node reads, and
    /// how many there are (`herald_bridge_groups_followed`, the console's node view).
    fn partitions_followed(&self) -> (usize, usize) {
        (0, 0)
    }

    /// Whether the engine is reachable and the node is following the log.
    fn is_ready(&self) -> bool;

    /// Why the bridge is not ready (the engine's last error, say a refused login), for
    /// `/readyz`; `None` when ready or when there is nothing more to say.
    fn not_ready_reason(&self) -> Option<String> {
        None
    }
}

/// Which topics a log carries: its share of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    /// Topics whose name starts with one of these prefixes (`""` matches every topic).
    Prefixes(Vec<String>),
    /// Every topic no other log's prefixes take.
    Rest,
}

/// The node's logs and which topics each one carries: the one place that decides where a
/// publish goes and whether a record read from a log is accepted.
#[derive(Debug, Default)]
pub(crate) struct Logs {
    logs: Vec<(Arc<dyn Bridge>, Share)>,
}

impl Logs {
    /// No log: the node runs alone and positions messages itself.
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Adds `bridge`, carrying the topics of `share`.
    pub(crate) fn with(mut self, bridge: Arc<dyn Bridge>, share: Share) -> Self {
        self.logs.push((bridge, share));
        self
    }

    /// Whether no log is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.logs.is_empty()
    }

    /// Every log, in the order configured.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<dyn Bridge>> {
        self.logs.iter().map(|(b, _)| b)
    }

    /// The log that carries `topic`: the one whose prefixes match, else the one taking the
    /// rest. `None` when no log carries it (no log configured, or prefixes only).
    pub(crate) fn carrier(&self, topic: &str) -> Option<&Arc<dyn Bridge>> {
        let carrier = self.logs.iter().find(|(_, share)| match share {
            Share::Prefixes(prefixes) => prefixes.iter().any(|p| topic.starts_with(p.as_str())),
            Share::Rest => false,
        });
        carrier
            .or_else(|| self.logs.iter().find(|(_, c)| *c == Share::Rest))
            .map(|(b, _)| b)
    }

    /// Appends a message to the log that carries `topic`, its record carrying `trace`.
    pub(crate) async fn append(
        &self,
        topic: &TopicName,
        event: Option<&EventName>,
        data: &Payload,
        trace: Carried<'_>,
        idempotency: Option<&str>,
    ) -> Result<Cursor, BridgeError> {
        match self.carrier(topic.as_str()) {
            Some(log) => log.append(topic, event, data, trace, idempotency).await,
            None => Err(BridgeError::Unavailable {
                bridge: "none",
                reason: format!("no configured log carries topic {topic}"),
            }),
        }
    }

    /// Makes this node read what subscriptions to `topics` (and, with `patterns`, to any
    /// topic) need from every log that carries them, waiting until it has ([`Bridge::backfill`]):
    /// the first step of every subscription, so that it resumes, replays and answers history
    /// on a node that did not follow these topics until now as on one that did.
    pub(crate) async fn backfill(
        &self,
        topics: &[&str],
        patterns: bool,
    ) -> Result<(), BridgeError> {
        if self.logs.is_empty() {
            return Ok(());
        }
        for (log, _) in &self.logs {
            let own: Vec<&str> = (topics.iter().copied())
                .filter(|t| self.carrier(t).is_some_and(|c| Arc::ptr_eq(c, log)))
                .collect();
            if own.is_empty() && !patterns {
                continue;
            }
            log.backfill(&own, patterns).await?;
        }
        Ok(())
    }

    /// Whether every log is connected and caught up.
    pub(crate) fn is_ready(&self) -> bool {
        self.iter().all(|b| b.is_ready())
    }

    /// Each log that is not ready, with why.
    pub(crate) fn not_ready(&self) -> Vec<(&'static str, String)> {
        self.iter()
            .filter(|b| !b.is_ready())
            .map(|b| {
                let why = b.not_ready_reason();
                (b.name(), why.unwrap_or_else(|| "not connected".into()))
            })
            .collect()
    }

    /// Runs every log's loop until `stop`, delivering into `registry`, each record traced with
    /// `tracing` (its ingest and fan-out).
    pub(crate) fn spawn(
        self: &Arc<Self>,
        registry: &Arc<Registry>,
        tracing: &Tracing,
        stop: &CancellationToken,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        self.iter()
            .map(|bridge| {
                let ingest = Ingest {
                    bridge: bridge.name(),
                    registry: registry.clone(),
                    logs: self.clone(),
                    tracing: tracing.clone(),
                    refused: Arc::new(parking_lot::Mutex::new(Refusals::default())),
                };
                tokio::spawn(bridge.clone().run(ingest, stop.clone()))
            })
            .collect()
    }
}

/// Where one log's records go: this node's registry, for the topics the log carries.
#[derive(Clone, Debug)]
pub(crate) struct Ingest {
    bridge: &'static str,
    registry: Arc<Registry>,
    logs: Arc<Logs>,
    /// The node's tracer ([`crate::telemetry::Telemetry`]).
    tracing: Tracing,
    refused: Arc<parking_lot::Mutex<Refusals>>,
}

/// Refused records since the last log line (one line a second at most).
#[derive(Debug, Default)]
struct Refusals {
    since_logged: u64,
    logged_at: Option<Instant>,
}

impl Ingest {
    /// Whether records' trace contexts are read: tracing is on (else a bridge does not look
    /// for them, and passes [`Carried::NONE`]).
    pub(crate) fn traces(&self) -> bool {
        self.tracing.is_on()
    }

    /// Delivers a message read from the log to this node's subscribers, at the position the
    /// log gave it; `age_ms` is how long ago it was written (for the lag metric). A position
    /// already delivered (an at-least-once replay) is dropped here, and so is a record for a
    /// topic another log carries (counted and logged: a producer writes to the wrong log).
    /// A record whose `trace` context is sampled gets this node's ingest and fan-out spans.
    pub(crate) fn deliver(
        &self,
        topic: TopicName,
        position: Cursor,
        event: Option<EventName>,
        payload: Payload,
        age_ms: u64,
        trace: Carried<'_>,
    ) {
        if !self.carries(topic.as_str()) {
            self.refuse(&topic);
            return;
        }
        let mut traced = self
            .tracing
            .ingest(trace, self.bridge, &topic, position, age_ms);
        let _log = traced.as_ref().map(|t| t.log_span().entered());
        match self.registry.get_or_create(&topic) {
            Ok(t) => {
                let fan_out = traced.as_ref().and_then(|span| span.fan_out(&t));
                // Traced: the span times the fan-out, now.
                let together = fan_out.is_none() && Together::open();
                let ingested = match together {
                    true => t.ingest_unsent(position, event, payload),
                    false => t.ingest(position, event, payload),
                }
                .is_some();
                if together && ingested {
                    Together::add(&t);
                }
                if let Some(fan_out) = fan_out {
                    fan_out.end(&t);
                }
                if let Some(span) = traced.as_mut().filter(|_| !ingested) {
                    span.duplicate();
                }
                if ingested {
                    metrics::bridge_message(self.bridge, "in");
                    metrics::bridge_lag(self.bridge, age_ms);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, %topic, bridge = self.bridge, "message from the log dropped")
            }
        }
    }

    /// Whether `topic` is one this log carries.
    fn carries(&self, topic: &str) -> bool {
        self.logs.carrier(topic).map(|b| b.name()) == Some(self.bridge)
    }

    /// Calls `f` with every topic this log carries that has a subscriber on this node.
    pub(crate) fn each_subscribed(&self, mut f: impl FnMut(&str)) {
        self.registry.each_subscribed(|t| {
            if self.carries(t.as_str()) {
                f(t.as_str())
            }
        });
    }

    /// Tells this node's registry where `epoch_of` starts a topic this log carries before any
    /// message of it was read (see [`herald_core::Registry::set_epoch_source`]).
    pub(crate) fn set_epoch_source(
        &self,
        epoch_of: impl Fn(&str) -> Option<herald_core::LogStart> + Send + Sync + 'static,
    ) {
        let (logs, bridge) = (self.logs.clone(), self.bridge);
        self.registry.set_epoch_source(Box::new(move |topic| {
            match logs.carrier(topic).map(|b| b.name()) == Some(bridge) {
                true => epoch_of(topic),
                false => None,
            }
        }));
    }

    /// Whether a prefix pattern is subscribed on this node (it may match any topic).
    pub(crate) fn has_patterns(&self) -> bool {
        !self.registry.patterns().is_empty()
    }

    /// Forgets the topics this log carries that `pick` chooses and no subscriber holds (the
    /// node stopped reading them: see [`herald_core::Registry::forget`]).
    pub(crate) fn forget(&self, pick: impl Fn(&str) -> bool) -> usize {
        self.registry
            .forget(|t| self.carries(t.as_str()) && pick(t.as_str()))
    }

    fn refuse(&self, topic: &TopicName) {
        metrics::bridge_message(self.bridge, "refused");
        let mut refused = self.refused.lock();
        refused.since_logged += 1;
        if refused
            .logged_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        {
            let owner = self
                .logs
                .carrier(topic.as_str())
                .map_or("none", |b| b.name());
            tracing::warn!(
                bridge = self.bridge,
                %topic,
                carried_by = owner,
                refused = refused.since_logged,
                "record refused: the topic is carried by another log (see cluster.kafka_prefixes)"
            );
            refused.since_logged = 0;
            refused.logged_at = Some(Instant::now());
        }
    }
}

/// Milliseconds since the Unix epoch (log timestamps, ages, presence entries).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Named(&'static str);

    impl Bridge for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn append<'a>(
            &'a self,
            _: &'a TopicName,
            _: Option<&'a EventName>,
            _: &'a Payload,
            _: Carried<'a>,
            _: Option<&'a str>,
        ) -> BoxFuture<'a, Result<Cursor, BridgeError>> {
            Box::pin(async { Ok(Cursor::new(1, 1)) })
        }
        fn run(self: Arc<Self>, _: Ingest, _: CancellationToken) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
        fn is_ready(&self) -> bool {
            true
        }
    }

    fn logs() -> Logs {
        Logs::none()
            .with(Arc::new(Named("redis")), Share::Rest)
            .with(
                Arc::new(Named("kafka")),
                Share::Prefixes(vec!["orders.".into(), "prices".into()]),
            )
    }

    #[test]
    fn each_topic_has_exactly_one_carrying_log() {
        let logs = logs();
        let carrier = |t: &str| logs.carrier(t).map(|b| b.name());
        assert_eq!(carrier("orders.1"), Some("kafka"));
        assert_eq!(carrier("prices"), Some("kafka"));
        assert_eq!(carrier("orders"), Some("redis"));
        assert_eq!(carrier("chat"), Some("redis"));
        assert_eq!(Logs::none().carrier("chat").map(|b| b.name()), None);
        let only = Logs::none().with(Arc::new(Named("kafka")), Share::Prefixes(vec!["a".into()]));
        assert_eq!(only.carrier("b").map(|b| b.name()), None);
    }

    #[test]
    fn a_record_from_another_log_is_refused_not_an_epoch_flip() {
        let registry = Arc::new(Registry::new(herald_core::RegistryConfig::default()));
        let logs = Arc::new(logs());
        let ingest = |bridge| Ingest {
            bridge,
            registry: registry.clone(),
            logs: logs.clone(),
            tracing: Tracing::off(),
            refused: Arc::default(),
        };
        let topic = TopicName::new("orders.1").unwrap();
        let payload = || Payload::from_json(b"1").unwrap();
        ingest("kafka").deliver(
            topic.clone(),
            Cursor::new(7, 1),
            None,
            payload(),
            0,
            Carried::NONE,
        );
        ingest("redis").deliver(
            topic.clone(),
            Cursor::new(9, 5),
            None,
            payload(),
            0,
            Carried::NONE,
        );
        ingest("kafka").deliver(
            topic.clone(),
            Cursor::new(7, 2),
            None,
            payload(),
            0,
            Carried::NONE,
        );
        let t = registry.get("orders.1").unwrap();
        assert_eq!(
            t.stats().head,
            Cursor::new(7, 2),
            "the other log's record must not move the topic to its epoch"
        );
        assert_eq!(t.stats().messages, 2);
    }
}
