//! The state of one gateway, shared by every connection and request: configuration, registry,
//! logs and cluster observers, access rules, limits, shutdown. The routers are in
//! [`crate::routes`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use herald_core::Registry;
use metrics_exporter_prometheus::PrometheusHandle;
use opentelemetry::trace::SpanKind;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bridge::Logs;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::error::ApiError;
use crate::telemetry::trace::{self, Carried, Traced};

/// Shared state of one gateway, built once and complete; cloning is a reference-count bump.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    config: Config,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
    drain: crate::shutdown::Drain,
    tracker: TaskTracker,
    ready: AtomicBool,
    metrics: PrometheusHandle,
    /// The tracer of every publish (and of the records the logs' [`crate::bridge::logs::Ingest`]s
    /// read), built beside the metrics recorder.
    tracing: trace::Tracing,
    logs: Arc<Logs>,
    cluster: Cluster,
    auth: crate::auth::Auth,
    publish_limits: crate::limits::PublishLimits,
    topic_quota: Arc<crate::limits::TopicQuota>,
    pattern_quota: Arc<crate::limits::TopicQuota>,
    /// A lone node's idempotency keys (a log keeps its own).
    retries: crate::bridge::idempotency::Retries,
    cold_topics: crate::limits::ColdTopics,
    hooks: crate::hooks::Hooks,
}

impl AppState {
    /// State for a lone gateway (no log, no cluster observer) with `config`, stopping on
    /// `shutdown`; connection tasks are tracked by `tracker`. Reads the token key files
    /// `config.auth` names and the hooks' CA file (fails as [`Config::validate`] would on an
    /// unreadable one).
    pub fn new(
        config: Config,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        metrics: PrometheusHandle,
    ) -> anyhow::Result<Self> {
        let access = crate::validate::Access::load(&config)?;
        let kept = crate::cluster::members::Kept::from_config(&config);
        let rules = crate::cluster::join_leave::Rules::from_config(&config);
        Ok(Self::clustered(
            config,
            access,
            shutdown,
            tracker,
            crate::telemetry::Telemetry::untraced(metrics),
            Arc::new(Logs::none()),
            Cluster::alone_announcing(kept, rules),
        ))
    }

    /// A lone node's state for unit tests, with the shutdown token that drains it.
    #[cfg(test)]
    pub(crate) fn for_test(config: Config) -> (Self, CancellationToken) {
        let shutdown = CancellationToken::new();
        let state = Self::new(
            config,
            shutdown.clone(),
            TaskTracker::new(),
            crate::telemetry::metrics::install(),
        )
        .expect("a valid test configuration");
        (state, shutdown)
    }

    /// Like [`Self::new`], with the token rules and hooks (`access`) as validation loaded
    /// them (`crate::validate::Loaded`), in a cluster: `logs` carry and position every publish
    /// (each topic through the one log that carries it), and must all be connected for the node
    /// to be ready; `cluster` observes the client connections; `telemetry` is the metrics
    /// recorder's handle and the tracer.
    pub(crate) fn clustered(
        config: Config,
        access: crate::validate::Access,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        telemetry: crate::telemetry::Telemetry,
        logs: Arc<Logs>,
        cluster: Cluster,
    ) -> Self {
        let registry = Arc::new(Registry::new(config.registry()));
        let publish_limits = crate::limits::PublishLimits::new(
            crate::limits::Rate::new(
                config.limits.publish_rate_per_key,
                config.limits.publish_burst_per_key,
            ),
            100_000,
        );
        let topic_quota = crate::limits::TopicQuota::new(config.limits.max_new_topics_per_client);
        let pattern_quota =
            crate::limits::TopicQuota::for_patterns(config.limits.max_new_patterns_per_client);
        let cold_topics =
            crate::limits::ColdTopics::new(config.limits.cold_topics_per_minute, 100_000);
        let retries = crate::bridge::idempotency::Retries::new(
            config.cluster.idempotency_window,
            config.cluster.idempotency_max_keys,
        );
        let crate::validate::Access { auth, hooks } = access;
        let crate::telemetry::Telemetry { metrics, tracing } = telemetry;
        Self(Arc::new(Inner {
            config,
            registry,
            drain: crate::shutdown::Drain::following(shutdown.clone()),
            shutdown,
            tracker,
            ready: AtomicBool::new(true),
            metrics,
            tracing,
            logs,
            cluster,
            auth,
            publish_limits,
            topic_quota,
            pattern_quota,
            retries,
            cold_topics,
            hooks,
        }))
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.0.config
    }

    /// The topic registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.0.registry
    }

    /// Publish rate limits per publisher on the public listener.
    pub(crate) fn publish_limits(&self) -> &crate::limits::PublishLimits {
        &self.0.publish_limits
    }

    /// Topics each client's subscriptions created, per client.
    pub(crate) fn topic_quota(&self) -> &Arc<crate::limits::TopicQuota> {
        &self.0.topic_quota
    }

    /// New prefix patterns per client (`limits.max_new_patterns_per_client`).
    pub(crate) fn pattern_quota(&self) -> &Arc<crate::limits::TopicQuota> {
        &self.0.pattern_quota
    }

    /// The key of a client without an API key for the per-client limits: its token's
    /// subject, else its address, IPv6 cut to `limits.ipv6_prefix`
    /// ([`crate::limits::publisher_key`]).
    pub(crate) fn client_key(&self, sub: Option<&str>, peer: std::net::IpAddr) -> String {
        crate::limits::publisher_key(sub, peer, self.config().limits.ipv6_prefix)
    }

    /// Topics per minute per client that the node held no topic for
    /// (`limits.cold_topics_per_minute`).
    pub(crate) fn cold_topics(&self) -> &crate::limits::ColdTopics {
        &self.0.cold_topics
    }

    /// Charges `client` for those of `topics` this node holds no topic for, when asking for
    /// them may make the node read more of the cluster's logs (a node in a cluster under
    /// interest routing; elsewhere [`Self::backfill`] reads nothing): `429 cold_topics` past
    /// `limits.cold_topics_per_minute`. Every path a client asks topics through calls this
    /// after its other refusals and before [`Self::backfill`].
    pub(crate) fn charge_cold(&self, client: &str, topics: &[&str]) -> Result<(), ApiError> {
        if self.0.logs.is_empty()
            || self.config().cluster.routing == crate::config::Routing::Broadcast
        {
            return Ok(());
        }
        let registry = self.registry();
        let cold = topics.iter().filter(|t| registry.get(t).is_none()).count();
        self.0.cold_topics.admit(client, cold)
    }

    /// Cancelled when the gateway starts draining.
    pub(crate) fn shutdown(&self) -> &CancellationToken {
        &self.0.shutdown
    }

    /// The drain as client connections wait for it (started when [`Self::shutdown`] is
    /// cancelled).
    pub(crate) fn drain(&self) -> &crate::shutdown::Drain {
        &self.0.drain
    }

    /// Tracks every connection task, so that shutdown can wait for them.
    pub(crate) fn tracker(&self) -> &TaskTracker {
        &self.0.tracker
    }

    /// Whether `/readyz` answers 200: serving, not draining, every log followed, and the
    /// node's id its own.
    pub(crate) fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::Relaxed)
            && !self.0.shutdown.is_cancelled()
            && self.0.logs.is_ready()
            && self.0.cluster.not_ready_reason().is_none()
    }

    /// What keeps the node from being ready besides draining: each log not followed, and the
    /// node id held by another process; with why.
    pub(crate) fn not_ready(&self) -> Vec<(&'static str, String)> {
        let mut why = self.0.logs.not_ready();
        if let Some(reason) = self.0.cluster.not_ready_reason() {
            why.push(("cluster", reason));
        }
        why
    }

    /// The logs that carry messages between nodes, and which topics each carries.
    pub(crate) fn logs(&self) -> &Arc<Logs> {
        &self.0.logs
    }

    /// This node's connection observers (presence, upstream events).
    pub(crate) fn cluster(&self) -> &Cluster {
        &self.0.cluster
    }

    /// The access rules.
    pub(crate) fn auth(&self) -> &crate::auth::Auth {
        &self.0.auth
    }

    /// The application's HTTP hooks.
    pub(crate) fn hooks(&self) -> &crate::hooks::Hooks {
        &self.0.hooks
    }

    /// The cluster presence, when Redis is configured.
    pub(crate) fn presence(&self) -> Option<&Arc<crate::cluster::presence::Presence>> {
        self.0.cluster.presence()
    }

    /// The upstream event producer, if configured.
    pub(crate) fn upstream(&self) -> Option<&Arc<crate::cluster::upstream::Upstream>> {
        self.0.cluster.upstream()
    }

    /// Opens a client connection of `transport` for `who` (counted, and reported to the
    /// cluster's observers with an id unique in the cluster; its subscriptions listed as
    /// presence members with the token's user and `info`).
    pub(crate) fn open_connection(
        &self,
        transport: crate::telemetry::metrics::Transport,
        who: &crate::auth::Identity,
    ) -> crate::cluster::Connection {
        self.0
            .cluster
            .open(transport, who.sub.as_deref(), who.info.clone())
    }

    /// Like [`Self::open_connection`], with an id taken before the connection opened
    /// (`crate::cluster::Cluster::next_id`, named to the hooks).
    pub(crate) fn open_connection_as(
        &self,
        id: u64,
        transport: crate::telemetry::metrics::Transport,
        who: &crate::auth::Identity,
    ) -> crate::cluster::Connection {
        self.0
            .cluster
            .open_as(id, transport, who.sub.as_deref(), who.info.clone())
    }

    /// Appends a prepared message to its topic: to the log that carries the topic when the node
    /// is in a cluster ([`crate::bridge::Logs::append`]; the message then reaches this node's
    /// subscribers through the log, like every other node's), else to the local registry
    /// ([`herald_core::Registry::publish`]). Returns the message's position. A traced publish
    /// (`publish`, its span) gets a span for the append (in a cluster: the record carries its
    /// context) or for the fan-out (alone). With an `idempotency` key, a publish of the same
    /// key to the same topic within `cluster.idempotency_window` is not appended again: the
    /// first one's position is returned (alone: from this node's bounded record of keys; in
    /// a cluster: as the log decides, [`crate::bridge::Bridge::append`]).
    pub(crate) async fn append(
        &self,
        topic: &herald_core::TopicName,
        event: Option<herald_core::EventName>,
        data: herald_core::Payload,
        publish: Option<&Traced>,
        idempotency: Option<&crate::bridge::idempotency::IdempotencyKey>,
    ) -> Result<herald_core::Cursor, ApiError> {
        if self.0.logs.is_empty() {
            let topic = self.registry().get_or_create(topic)?;
            let publish = || {
                let fan_out = publish.and_then(|span| span.fan_out(&topic));
                let message = match fan_out {
                    // Traced: the span times the fan-out, now.
                    Some(_) => topic.publish(event, data),
                    None => publish_local(&topic, event, data),
                };
                if let Some(fan_out) = fan_out {
                    fan_out.end(&topic);
                }
                Ok::<_, ApiError>(message.cursor())
            };
            return match idempotency {
                None => publish(),
                Some(key) => (self.0.retries)
                    .once(topic.name().as_str(), key.as_str(), publish)
                    .map(|(position, _)| position),
            };
        }
        let mut span = publish.and_then(|publish| {
            let log = self
                .0
                .logs
                .carrier(topic.as_str())
                .map_or("none", |l| l.name());
            let log = opentelemetry::KeyValue::new("herald.log", log);
            publish.child(trace::APPEND, SpanKind::Producer, vec![log])
        });
        let (traceparent, tracestate) = match &span {
            Some(span) => (Some(span.traceparent()), span.tracestate()),
            None => (None, None),
        };
        let carried = Carried {
            traceparent: traceparent.as_deref(),
            tracestate: tracestate.as_deref(),
        };
        let appended = (self.0.logs)
            .append(
                topic,
                event.as_ref(),
                &data,
                carried,
                idempotency.map(|k| k.as_str()),
            )
            .await;
        if let Some(span) = &mut span {
            match &appended {
                Ok(id) => span.set_id(*id),
                Err(e) => span.fail(e),
            }
        }
        appended.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "bridge_unavailable",
                e.to_string(),
            )
        })
    }

    /// The node's tracing (off unless `telemetry.otlp_endpoint` is set).
    pub(crate) fn tracing(&self) -> &crate::telemetry::trace::Tracing {
        &self.0.tracing
    }

    /// Makes this node read what subscriptions to `topics` (and, with `patterns`, to any
    /// topic) need from the cluster's logs, waiting until it has
    /// (`crate::bridge::Logs::backfill`; immediate on a node alone or under broadcast
    /// routing): `503 bridge_unavailable` when it could not within `cluster.backfill_timeout`.
    pub(crate) async fn backfill(&self, topics: &[&str], patterns: bool) -> Result<(), ApiError> {
        self.0.logs.backfill(topics, patterns).await.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "bridge_unavailable",
                e.to_string(),
            )
        })
    }

    /// Whether the public listener serves the publish API: in dev mode, or to API keys,
    /// tokens allowed to publish, or clients the publish hook allows.
    pub(crate) fn publishes_publicly(&self) -> bool {
        self.config().dev
            || self.auth().has_api_keys()
            || self.auth().enabled()
            || self.hooks().has(crate::hooks::Hook::Publish)
            || self.config().clients_publish_somewhere()
    }

    /// Sets readiness.
    pub(crate) fn set_ready(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::Relaxed);
    }

    /// Renders the Prometheus text exposition.
    pub(crate) fn render_metrics(&self) -> String {
        self.0.metrics.render()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use herald_core::{Cursor, EventName, Payload, TopicName};

    use super::*;
    use crate::bridge::logs::{BoxFuture, Bridge, BridgeError, Ingest, Share};

    /// A log that answers publishes with a fixed position, up or down at will.
    #[derive(Debug, Default)]
    struct FakeLog {
        up: AtomicBool,
        appended: parking_lot::Mutex<Vec<String>>,
    }

    impl Bridge for FakeLog {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn append<'a>(
            &'a self,
            topic: &'a TopicName,
            _: Option<&'a EventName>,
            _: &'a Payload,
            _: Carried<'a>,
            _: Option<&'a str>,
        ) -> BoxFuture<'a, Result<Cursor, BridgeError>> {
            Box::pin(async move {
                if !self.up.load(Ordering::Relaxed) {
                    return Err(BridgeError::Unavailable {
                        bridge: "fake",
                        reason: "down".into(),
                    });
                }
                self.appended.lock().push(topic.to_string());
                Ok(Cursor::new(5, 9))
            })
        }
        fn run(self: Arc<Self>, _: Ingest, _: CancellationToken) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
        fn is_ready(&self) -> bool {
            self.up.load(Ordering::Relaxed)
        }
        fn not_ready_reason(&self) -> Option<String> {
            (!self.is_ready()).then(|| "down".into())
        }
    }

    fn state(logs: Logs) -> (AppState, CancellationToken) {
        let shutdown = CancellationToken::new();
        let config = Config::default();
        let access = crate::validate::Access::load(&config).unwrap();
        let state = AppState::clustered(
            config,
            access,
            shutdown.clone(),
            TaskTracker::new(),
            crate::telemetry::Telemetry::untraced(crate::telemetry::metrics::install()),
            Arc::new(logs),
            Cluster::alone(crate::cluster::members::Kept::all()),
        );
        (state, shutdown)
    }

    fn payload() -> Payload {
        Payload::from_json(b"1").unwrap()
    }

    #[tokio::test]
    async fn a_lone_node_positions_publishes_itself_and_is_ready_until_it_drains() {
        let (state, shutdown) = state(Logs::none());
        let topic = TopicName::new("t").unwrap();
        let first = state
            .append(&topic, None, payload(), None, None)
            .await
            .unwrap();
        let second = state
            .append(&topic, None, payload(), None, None)
            .await
            .unwrap();
        assert_eq!((first.epoch, second.seq), (second.epoch, first.seq + 1));
        assert_eq!(state.registry().get("t").unwrap().head(), second);
        assert!(state.is_ready() && state.not_ready().is_empty());
        assert!(
            !state.publishes_publicly(),
            "no dev mode, no keys: admin listener only"
        );
        shutdown.cancel();
        assert!(!state.is_ready());
    }

    #[tokio::test]
    async fn in_a_cluster_publishes_go_to_the_log_and_readiness_follows_it() {
        let log = Arc::new(FakeLog::default());
        let (state, _shutdown) = state(Logs::none().with(log.clone(), Share::Rest));
        let topic = TopicName::new("t").unwrap();
        let refused = state
            .append(&topic, None, payload(), None, None)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), "bridge_unavailable");
        assert!(!state.is_ready());
        assert_eq!(state.not_ready(), [("fake", "down".to_string())]);
        log.up.store(true, Ordering::Relaxed);
        assert_eq!(
            state
                .append(&topic, None, payload(), None, None)
                .await
                .unwrap(),
            Cursor::new(5, 9)
        );
        assert_eq!(*log.appended.lock(), ["t"]);
        assert!(
            state.registry().get("t").is_none(),
            "the message reaches this node through the log, not directly"
        );
        assert!(state.is_ready());
    }
}

tokio::task_local! {
    /// The topics a batch published to on a lone node whose direct fan-out waits for the
    /// batch to pause or end ([`publish_local`]); fanned out when dropped too, so a batch
    /// whose request is dropped half-way (the publisher went away) leaves nothing waiting.
    static UNSENT: std::cell::RefCell<herald_core::Unsent>;
}

/// Publishes to `topic` on a lone node. Inside a batch the fan-out to the subscribers the
/// publisher writes to itself ([`herald_core::direct`]) waits until the batch pauses or ends
/// ([`fan_out_unsent`]), or the topic's fan-out queue is full ([`herald_core::Unsent`]), so
/// that each takes the batch's messages in one write (one batch frame when it asked,
/// `batch=1`) rather than one write per message; elsewhere it is now.
fn publish_local(
    topic: &std::sync::Arc<herald_core::Topic>,
    event: Option<herald_core::EventName>,
    data: herald_core::Payload,
) -> std::sync::Arc<herald_core::Message> {
    let deferred = UNSENT.try_with(|_| ()).is_ok();
    if !deferred {
        return topic.publish(event, data);
    }
    let message = topic.publish_unsent(event, data);
    let _ = UNSENT.try_with(|unsent| unsent.borrow_mut().add(topic));
    message
}

/// Runs `batch` (a batch publish's routing) with [`publish_local`] leaving the fan-out to
/// [`fan_out_unsent`] or the end.
pub(crate) async fn unsent_until_done<F: std::future::Future>(batch: F) -> F::Output {
    UNSENT.scope(std::cell::RefCell::default(), batch).await
}

/// Fans out what the batch published so far ([`publish_local`]).
pub(crate) fn fan_out_unsent() {
    // Dropped: fanned out.
    let _ = UNSENT.try_with(|unsent| std::mem::take(&mut *unsent.borrow_mut()));
}
