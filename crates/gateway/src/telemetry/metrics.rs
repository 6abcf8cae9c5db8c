//! Metric names, descriptions and handles, in one place.
//!
//! Labels are bounded: `transport`, `source`, `outcome`, `reason`. Never a topic or a client.
//! Per-delivery handles are resolved once per process and transport ([`transport`]), so the
//! hot path touches no registry and each connection holds no handle of its own.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Open client connections (gauge), by `transport`.
pub(crate) const CONNECTIONS: &str = "herald_connections";
/// Client connections opened, by `transport`.
pub(crate) const CONNECTIONS_OPENED: &str = "herald_connections_opened_total";
/// Client connections closed, by `transport` and `reason`.
pub(crate) const CONNECTIONS_CLOSED: &str = "herald_connections_closed_total";
/// Connections refused because the gateway held `limits.max_connections`.
pub(crate) const CONNECTIONS_REFUSED: &str = "herald_connections_refused_total";
/// Messages published, by `source` (`http`, `ws`).
pub(crate) const MESSAGES_PUBLISHED: &str = "herald_messages_published_total";
/// Messages handed to a client connection, by `transport`.
pub(crate) const MESSAGES_DELIVERED: &str = "herald_messages_delivered_total";
/// Bytes of frames handed to client connections, by `transport`.
pub(crate) const BYTES_SENT: &str = "herald_bytes_sent_total";
/// Slow-consumer events, by `outcome` (`recovered`, `lost`, `disconnected`, `coalesced`)
/// and `namespace` (a configured namespace, `default` for other topics, `none` when a write
/// timed out, which is no one topic's).
pub(crate) const SLOW_CONSUMERS: &str = "herald_slow_consumer_events_total";
/// Join and leave events this node announced (`namespaces.<name>.join_leave`), by `event`
/// (`join`, `leave`) and `namespace`.
pub(crate) const PRESENCE_EVENTS: &str = "herald_presence_events_total";
/// Join and leave events this node dropped, by `namespace` and `reason` (`rate`: past
/// `join_leave_rate` for the topic; `relay`: the queue to the other nodes was full).
pub(crate) const PRESENCE_EVENTS_DROPPED: &str = "herald_presence_events_dropped_total";
/// Time from publish to the frame being handed to the connection, by `transport`.
pub(crate) const DELIVERY_LATENCY: &str = "herald_delivery_latency_seconds";
/// Topics held by the registry (gauge).
pub(crate) const TOPICS: &str = "herald_topics";
/// Distinct prefix patterns subscribed to on this node (gauge), against
/// `topics.max_patterns`.
pub(crate) const PATTERNS: &str = "herald_patterns";
/// Whether a bridge is connected and following its log (gauge, 1 or 0), by `bridge`.
pub(crate) const BRIDGE_UP: &str = "herald_bridge_up";
/// Partitions of a bridge's log (Redis streams, Kafka partitions) this node reads (gauge), by
/// `bridge`: all of them under `cluster.routing = "broadcast"`, those holding a subscribed
/// topic under `"interest"`. The name keeps the word they had before (dashboards use it).
pub(crate) const BRIDGE_PARTITIONS_FOLLOWED: &str = "herald_bridge_groups_followed";
/// Bridge reconnection attempts, by `bridge`.
pub(crate) const BRIDGE_RECONNECTS: &str = "herald_bridge_reconnects_total";
/// Gaps the live path found, by `bridge`: a stream whose notices skipped an entry (a notice
/// lost with a connection, or to a full queue), read again from the stream so that nothing
/// is delivered out of order.
pub(crate) const BRIDGE_LIVE_GAPS: &str = "herald_bridge_live_gaps_total";
/// Age of the last message read from a bridge's log when it was read (gauge, seconds), by
/// `bridge`: how far behind the log this node is.
pub(crate) const BRIDGE_LAG: &str = "herald_bridge_lag_seconds";
/// Messages through a bridge, by `bridge` and `direction` (`in`: from the log, `out`: to it).
pub(crate) const BRIDGE_MESSAGES: &str = "herald_bridge_messages_total";
/// Client errors answered (bad request, bad frame), by `transport` and `reason`.
pub(crate) const CLIENT_ERRORS: &str = "herald_client_errors_total";
/// TLS certificate reloads (SIGHUP), by `result` (`ok`, `error`).
pub(crate) const TLS_RELOADS: &str = "herald_tls_reloads_total";
/// Connection tasks that panicked (caught, logged, the connection closed), by `task`.
pub(crate) const TASK_PANICS: &str = "herald_task_panics_total";
/// Always 1, labelled with the running `version` (gauge).
pub(crate) const BUILD_INFO: &str = "herald_build_info";
/// Whether `/readyz` answers 200 (gauge, 1 or 0), as of the last scrape.
pub(crate) const READY: &str = "herald_ready";
/// Whether the node is draining after SIGTERM (gauge, 1 or 0), as of the last scrape.
pub(crate) const DRAINING: &str = "herald_draining";
/// `limits.max_connections`: open connections the public listener takes (gauge).
pub(crate) const CONNECTIONS_MAX: &str = "herald_connections_max";

/// Batches of spans the OTLP exporter failed to send (collector down, refused, timed out):
/// their spans are dropped, publishing goes on.
pub(crate) const TRACE_EXPORT_ERRORS: &str = "herald_trace_export_errors_total";

/// Hook requests to the application's backend, by `hook` (`connect`, `subscribe`,
/// `publish`, `refresh`) and `result` (`allow`, `deny`, `unavailable`, `timeout`,
/// `overloaded`: not called, `hooks.max_in_flight` reached).
pub(crate) const HOOK_REQUESTS: &str = "herald_hook_requests_total";
/// Time a hook took to answer (or fail), by `hook`.
pub(crate) const HOOK_DURATION: &str = "herald_hook_duration_seconds";
/// Hook requests waiting for an answer (gauge).
pub(crate) const HOOKS_IN_FLIGHT: &str = "herald_hooks_in_flight";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

fn recorder() -> metrics_exporter_prometheus::PrometheusRecorder {
    let buckets = [
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    ];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(DELIVERY_LATENCY.into()), &buckets)
        .expect("bucket list is not empty")
        .set_buckets_for_metric(
            Matcher::Full(HOOK_DURATION.into()),
            &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ],
        )
        .expect("bucket list is not empty")
        .build_recorder()
}

/// Installs the process-wide Prometheus recorder once (later calls return the same handle):
/// what a `herald` process uses.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

/// A recorder of one gateway's own, for processes that run several (tests, embedders):
/// every thread of that gateway's runtime records into it ([`Scope::enter`]), so each
/// gateway's `/metrics` counts its own connections and messages only. Made once per gateway
/// and kept for the life of the process (a few kilobytes).
#[derive(Debug)]
pub(crate) struct Scope {
    recorder: metrics_exporter_prometheus::PrometheusRecorder,
    handle: PrometheusHandle,
    transports: OnceLock<[TransportMetrics; 3]>,
}

thread_local! {
    static SCOPE: std::cell::Cell<Option<&'static Scope>> = const { std::cell::Cell::new(None) };
}

impl Scope {
    /// A fresh recorder, described.
    pub(crate) fn new() -> &'static Self {
        let recorder = recorder();
        let scope: &'static Self = Box::leak(Box::new(Self {
            handle: recorder.handle(),
            recorder,
            transports: OnceLock::new(),
        }));
        metrics::with_local_recorder(&scope.recorder, describe);
        scope
    }

    /// Makes this the recorder of the calling thread for the rest of its life (a runtime's
    /// `on_thread_start`).
    pub(crate) fn enter(&'static self) {
        std::mem::forget(metrics::set_default_local_recorder(&self.recorder));
        SCOPE.with(|s| s.set(Some(self)));
    }
}

/// The handle that renders the recorder this thread records into: its gateway's
/// [`Scope`], else the process-wide one ([`install`]).
pub(crate) fn current() -> PrometheusHandle {
    match SCOPE.with(std::cell::Cell::get) {
        Some(scope) => scope.handle.clone(),
        None => install(),
    }
}

fn describe() {
    describe_gauge!(CONNECTIONS, "Open client connections.");
    describe_counter!(CONNECTIONS_OPENED, "Client connections opened.");
    describe_counter!(CONNECTIONS_CLOSED, "Client connections closed, by reason.");
    describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections refused at the connection limit."
    );
    describe_counter!(MESSAGES_PUBLISHED, "Messages published.");
    describe_counter!(MESSAGES_DELIVERED, "Messages handed to client connections.");
    describe_counter!(BYTES_SENT, "Bytes of frames handed to client connections.");
    describe_counter!(
        SLOW_CONSUMERS,
        "Slow-consumer events by outcome and namespace."
    );
    describe_counter!(
        PRESENCE_EVENTS,
        "Join and leave events announced, by event and namespace."
    );
    describe_counter!(
        PRESENCE_EVENTS_DROPPED,
        "Join and leave events dropped (past the rate, or the relay queue full), by namespace and reason."
    );
    describe_histogram!(
        DELIVERY_LATENCY,
        metrics::Unit::Seconds,
        "Time from publish to the frame being handed to the connection."
    );
    describe_gauge!(TOPICS, "Topics held by the registry.");
    describe_gauge!(
        PATTERNS,
        "Distinct prefix patterns subscribed to on this node."
    );
    describe_gauge!(BRIDGE_UP, "Whether a bridge is connected (1) or not (0).");
    describe_gauge!(
        BRIDGE_PARTITIONS_FOLLOWED,
        "Partitions of a bridge's log (Redis streams, Kafka partitions) this node reads."
    );
    describe_counter!(BRIDGE_RECONNECTS, "Bridge reconnection attempts.");
    describe_counter!(
        BRIDGE_LIVE_GAPS,
        "Gaps in a bridge's live notices, filled from the log."
    );
    describe_gauge!(
        BRIDGE_LAG,
        "Age of the last message read from a bridge's log, in seconds."
    );
    describe_counter!(BRIDGE_MESSAGES, "Messages through a bridge, by direction.");
    describe_counter!(CLIENT_ERRORS, "Client errors answered, by reason.");
    describe_counter!(TLS_RELOADS, "TLS certificate reloads (SIGHUP), by result.");
    describe_counter!(
        TASK_PANICS,
        "Connection tasks that panicked (caught and logged), by task."
    );
    describe_gauge!(BUILD_INFO, "Always 1, labelled with the running version.");
    describe_gauge!(READY, "Whether /readyz answers 200 (1) or not (0).");
    describe_gauge!(
        DRAINING,
        "Whether the node is draining after SIGTERM (1) or not (0)."
    );
    describe_gauge!(
        CONNECTIONS_MAX,
        "Open connections the public listener takes (limits.max_connections)."
    );
    describe_counter!(
        HOOK_REQUESTS,
        "Hook requests to the application's backend, by hook and result."
    );
    describe_histogram!(
        HOOK_DURATION,
        metrics::Unit::Seconds,
        "Time a hook took to answer or fail, by hook."
    );
    describe_gauge!(HOOKS_IN_FLIGHT, "Hook requests waiting for an answer.");
    describe_counter!(
        TRACE_EXPORT_ERRORS,
        "Span batches the OTLP exporter failed to send (their spans dropped)."
    );
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    super::process::describe();
}

/// A client transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Server-Sent Events.
    Sse,
    /// WebSocket.
    Ws,
    /// Long-polling.
    Poll,
}

impl Transport {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Sse => "sse",
            Self::Ws => "ws",
            Self::Poll => "poll",
        }
    }
}

/// The per-delivery handles of one transport.
#[derive(Debug)]
pub(crate) struct TransportMetrics {
    transport: Transport,
    connections: Gauge,
    opened: Counter,
    delivered: Counter,
    bytes: Counter,
    latency: Histogram,
}

/// The handles of `transport`, resolved once per recorder: the thread's [`Scope`]'s, else
/// the process-wide one's (after [`install`]).
pub(crate) fn transport(transport: Transport) -> &'static TransportMetrics {
    static CELLS: OnceLock<[TransportMetrics; 3]> = OnceLock::new();
    let cells = match SCOPE.with(std::cell::Cell::get) {
        Some(scope) => scope.transports.get_or_init(transport_handles),
        None => CELLS.get_or_init(transport_handles),
    };
    &cells[transport as usize]
}

fn transport_handles() -> [TransportMetrics; 3] {
    [Transport::Sse, Transport::Ws, Transport::Poll].map(|transport| {
        let t = transport.as_str();
        TransportMetrics {
            transport,
            connections: gauge!(CONNECTIONS, "transport" => t),
            opened: counter!(CONNECTIONS_OPENED, "transport" => t),
            delivered: counter!(MESSAGES_DELIVERED, "transport" => t),
            bytes: counter!(BYTES_SENT, "transport" => t),
            latency: histogram!(DELIVERY_LATENCY, "transport" => t),
        }
    })
}

impl TransportMetrics {
    /// Counts one delivered message of `bytes` bytes, published `since_publish` ago.
    pub(crate) fn delivered(&self, bytes: usize, since_publish: Duration) {
        self.delivered.increment(1);
        self.bytes.increment(bytes as u64);
        self.latency.record(since_publish.as_secs_f64());
    }

    /// Counts bytes that are not a message (heartbeats, control frames).
    pub(crate) fn sent(&self, bytes: usize) {
        self.bytes.increment(bytes as u64);
    }

    /// Opens a connection; the guard counts it closed with its reason when dropped.
    pub(crate) fn open(&'static self) -> ConnectionGuard {
        self.connections.increment(1.0);
        self.opened.increment(1);
        ConnectionGuard {
            metrics: self,
            reason: CloseReason::Client,
        }
    }
}

impl herald_core::DeliveryCounter for TransportMetrics {
    /// A batch from a topic's direct fan-out: one update of each counter and one of the
    /// histogram for `n` deliveries of a message.
    fn delivered(&self, n: u64, bytes: u64, latency: Duration) {
        self.delivered.increment(n);
        self.bytes.increment(bytes);
        self.latency.record_many(
            latency.as_secs_f64(),
            usize::try_from(n).unwrap_or(usize::MAX),
        );
    }
}

/// Why a connection closed (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// The client went away or closed.
    Client,
    /// The gateway is shutting down.
    Shutdown,
    /// Slow consumer.
    Slow,
    /// Nothing heard from the client for too long.
    Idle,
    /// The client broke the protocol (oversized or invalid frame).
    Protocol,
    /// The request is done (long-poll).
    Done,
    /// The client's token expired.
    Expired,
    /// The server ended it on a command (a user or connection disconnected by the admin API).
    Disconnected,
}

impl CloseReason {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Shutdown => "shutdown",
            Self::Slow => "slow",
            Self::Idle => "idle",
            Self::Protocol => "protocol",
            Self::Done => "done",
            Self::Expired => "expired",
            Self::Disconnected => "disconnected",
        }
    }
}

/// Keeps a connection counted as open; counts it closed on drop.
#[derive(Debug)]
pub(crate) struct ConnectionGuard {
    metrics: &'static TransportMetrics,
    reason: CloseReason,
}

impl ConnectionGuard {
    /// Sets the reason reported when the connection closes.
    pub(crate) fn closing(&mut self, reason: CloseReason) {
        self.reason = reason;
    }

    /// The reason it will be counted closed for.
    pub(crate) fn reason(&self) -> CloseReason {
        self.reason
    }

    /// The connection's transport.
    pub(crate) fn transport(&self) -> Transport {
        self.metrics.transport
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics.connections.decrement(1.0);
        counter!(CONNECTIONS_CLOSED, "transport" => self.metrics.transport.as_str(), "reason" => self.reason.as_str())
            .increment(1);
    }
}

/// Counts a slow-consumer event that is no one topic's (a write that timed out).
pub(crate) fn slow_consumer(outcome: &'static str) {
    slow_consumer_in(outcome, "none");
}

/// Counts a slow-consumer event on a topic of `namespace` (a configured namespace's name, or
/// `default`: the label's values are bounded by the configuration).
pub(crate) fn slow_consumer_in(outcome: &'static str, namespace: &str) {
    counter!(SLOW_CONSUMERS, "outcome" => outcome, "namespace" => namespace.to_owned())
        .increment(1);
}

/// Counts a join or leave event (`event`) announced on a topic of `namespace` (a configured
/// one).
pub(crate) fn presence_event(event: &'static str, namespace: &str) {
    counter!(PRESENCE_EVENTS, "event" => event, "namespace" => namespace.to_owned()).increment(1);
}

/// Counts a join or leave event dropped on a topic of `namespace` (a configured one) for
/// `reason` (`rate`, `relay`).
pub(crate) fn presence_event_dropped(reason: &'static str, namespace: &str) {
    counter!(PRESENCE_EVENTS_DROPPED, "reason" => reason, "namespace" => namespace.to_owned())
        .increment(1);
}

/// Counts a connection refused at the connection limit.
pub(crate) fn connection_refused(reason: &'static str) {
    counter!(CONNECTIONS_REFUSED, "reason" => reason).increment(1);
}

/// Sets the topic gauge.
pub(crate) fn topics(count: usize) {
    gauge!(TOPICS).set(count as f64);
}

/// Sets the pattern gauge.
pub(crate) fn patterns(count: usize) {
    gauge!(PATTERNS).set(count as f64);
}

/// Counts a published message.
pub(crate) fn published(source: &'static str) {
    counter!(MESSAGES_PUBLISHED, "source" => source).increment(1);
}

/// Counts a batch of spans that could not be exported.
pub(crate) fn trace_export_error() {
    counter!(TRACE_EXPORT_ERRORS).increment(1);
}

/// Shows the export error count at 0 from the start (tracing on).
pub(crate) fn trace_export_errors_shown() {
    counter!(TRACE_EXPORT_ERRORS).absolute(0);
}

/// Counts a connection task that panicked.
pub(crate) fn task_panic(task: &'static str) {
    counter!(TASK_PANICS, "task" => task).increment(1);
}

/// Counts a TLS certificate reload.
pub(crate) fn tls_reload(result: &'static str) {
    counter!(TLS_RELOADS, "result" => result).increment(1);
}

/// Sets the node's readiness, drain and connection-limit gauges (on each scrape).
pub(crate) fn node_state(ready: bool, draining: bool, max_connections: usize) {
    gauge!(READY).set(f64::from(u8::from(ready)));
    gauge!(DRAINING).set(f64::from(u8::from(draining)));
    gauge!(CONNECTIONS_MAX).set(max_connections as f64);
}

/// Counts a client error answered.
pub(crate) fn client_error(transport: &'static str, reason: &'static str) {
    counter!(CLIENT_ERRORS, "transport" => transport, "reason" => reason).increment(1);
}

/// Sets whether `bridge` is up.
pub(crate) fn bridge_up(bridge: &'static str, up: bool) {
    gauge!(BRIDGE_UP, "bridge" => bridge).set(if up { 1.0 } else { 0.0 });
}

/// Sets how many partitions of `bridge`'s log this node reads.
pub(crate) fn bridge_partitions_followed(bridge: &'static str, partitions: usize) {
    gauge!(BRIDGE_PARTITIONS_FOLLOWED, "bridge" => bridge).set(partitions as f64);
}

/// Counts a reconnection attempt of `bridge`.
pub(crate) fn bridge_reconnect(bridge: &'static str) {
    counter!(BRIDGE_RECONNECTS, "bridge" => bridge).increment(1);
}

/// Counts a message through `bridge` (`direction`: `in` or `out`).
pub(crate) fn bridge_message(bridge: &'static str, direction: &'static str) {
    counter!(BRIDGE_MESSAGES, "bridge" => bridge, "direction" => direction).increment(1);
}

/// Records how old (`age_ms`) the message just read from `bridge`'s log was.
/// `n` streams whose live notices showed a gap (a lost notice), read again from the stream.
pub(crate) fn bridge_live_gaps(bridge: &'static str, n: usize) {
    counter!(BRIDGE_LIVE_GAPS, "bridge" => bridge).increment(n as u64);
}

pub(crate) fn bridge_lag(bridge: &'static str, age_ms: u64) {
    gauge!(BRIDGE_LAG, "bridge" => bridge).set(age_ms as f64 / 1000.0);
}

/// Counts a hook request's `result`.
pub(crate) fn hook_request(hook: &'static str, result: &'static str) {
    counter!(HOOK_REQUESTS, "hook" => hook, "result" => result).increment(1);
}

/// Records how long a hook took.
pub(crate) fn hook_duration(hook: &'static str, took: Duration) {
    histogram!(HOOK_DURATION, "hook" => hook).record(took.as_secs_f64());
}

/// The gauge of hook requests in flight.
pub(crate) fn hooks_in_flight() -> Gauge {
    gauge!(HOOKS_IN_FLIGHT)
}
