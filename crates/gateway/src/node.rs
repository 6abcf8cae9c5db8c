//! A running node: [`run_validated`] serves the public and admin listeners with the state built once
//! from a validated configuration (the logs, the cluster's parts, the observers), runs the
//! chores beside them (TLS reload on SIGHUP, housekeeping), and drains on shutdown;
//! [`Gateway`] is the handle tests and embedders hold.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::AppState;
use crate::config::Config;
use crate::routes::{admin_router, public_router};
use crate::server::ServeOptions;
use crate::{bridge, cluster, fast_path, limits, server, telemetry, validate};

/// Serves the public and admin listeners with a configuration already validated, and what
/// validation loaded (the token keys, the TLS certificate, so that no file is read twice),
/// until `shutdown` is cancelled, then drains: readiness turns false, the public listener
/// stops accepting, open streams are told to reconnect (SSE `retry:` with jitter, WebSocket
/// close 1012), and the call returns once every connection is closed or `shutdown.grace` has
/// passed. The admin listener serves until then.
pub async fn run_validated(
    public: TcpListener,
    admin: TcpListener,
    config: Config,
    loaded: validate::Loaded,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let validate::Loaded { access, tls } = loaded;
    // The metrics recorder and, beside it, the tracer (a lone node traces its publishes).
    let telemetry = telemetry::Telemetry::start(&config)?;
    let metrics = telemetry.metrics.clone();
    let tracker = TaskTracker::new();
    let (logs, cluster) = cluster_parts(&config).await?;
    let state = AppState::clustered(
        config.clone(),
        access,
        shutdown.clone(),
        tracker.clone(),
        telemetry,
        logs,
        cluster,
    );
    let admin_stop = CancellationToken::new();
    let admin_tracker = TaskTracker::new();
    let public_addr = public.local_addr().ok();
    let admin_addr = admin.local_addr().ok();

    if let Some(tls) = &tls {
        tokio::spawn(reload_tls_on_sighup(tls.clone(), admin_stop.clone()));
    }
    let public_options = listener_options(&config, true, &shutdown, &tracker, tls);
    let admin_options = listener_options(&config, false, &admin_stop, &admin_tracker, None);
    let per_address = [&public_options, &admin_options].map(|o| o.per_address.clone());
    let public_task = tokio::spawn(server::serve(
        public,
        public_router(state.clone()),
        ServeOptions {
            fast_path: Some(Arc::new(fast_path::RawSocket(state.clone()))),
            ..public_options
        },
    ));
    let admin_task = tokio::spawn(server::serve(
        admin,
        admin_router(state.clone()),
        admin_options,
    ));
    let housekeeping = tokio::spawn(housekeeping(
        state.clone(),
        admin_stop.clone(),
        metrics,
        per_address.into_iter().flatten().collect(),
    ));
    // The logs, the leases and presence stop last, after the connections have drained.
    let cluster_tasks = spawn_cluster(&state, &admin_stop);
    let shown =
        |addr: Option<std::net::SocketAddr>| addr.map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(
        public = %shown(public_addr),
        admin = %shown(admin_addr),
        dev = config.dev,
        "herald listening"
    );
    if config.dev {
        tracing::warn!("dev mode: anyone who reaches the public listener can publish");
    }

    shutdown.cancelled().await;
    state.set_ready(false);
    let _ = public_task.await;
    tracker.close();
    tracing::info!(connections = tracker.len(), grace = ?config.shutdown.grace, "draining");
    if tokio::time::timeout(config.shutdown.grace, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = tracker.len(),
            "grace period over; closing the remaining connections"
        );
    }
    admin_stop.cancel();
    admin_tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), admin_tracker.wait()).await;
    let _ = admin_task.await;
    let _ = housekeeping.await;
    for task in cluster_tasks {
        let _ = task.await;
    }
    if let Some(upstream) = state.upstream().cloned() {
        let _ = tokio::task::spawn_blocking(move || upstream.flush(Duration::from_secs(2))).await;
    }
    // The spans still held go out (a few seconds at most).
    state.tracing().shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// How a listener serves, from the configuration: the public one (`public`) or the admin one,
/// which has its own connection caps and no connect rate (its clients are the operator's own
/// services). The fast path is added by the caller.
fn listener_options(
    config: &Config,
    public: bool,
    stop: &CancellationToken,
    tracker: &TaskTracker,
    tls: Option<Arc<server::tls::Tls>>,
) -> ServeOptions {
    let l = &config.limits;
    let (max, per_address) = if public {
        let limits = limits::AddressLimits::new(
            l.max_connections_per_address,
            l.connect_rate_per_address,
            l.connect_burst_per_address,
            l.max_connections.saturating_mul(2).max(1024),
            l.ipv6_prefix,
        );
        (l.max_connections, limits)
    } else {
        let limits = limits::AddressLimits::new(
            l.admin_max_connections_per_address,
            0.0,
            0.0,
            l.admin_max_connections.saturating_mul(2).max(64),
            l.ipv6_prefix,
        );
        (l.admin_max_connections, limits)
    };
    ServeOptions {
        stop: stop.clone(),
        tracker: tracker.clone(),
        header_read_timeout: l.header_read_timeout,
        write_timeout: l.write_timeout,
        max_connections: Some(max),
        fast_path: None,
        max_header_bytes: l.max_header_bytes,
        per_address: Some(per_address),
        tls,
    }
}

/// Runs the node's cluster loops until `stop`: each log's follower, the id and number leases,
/// and the presence flusher.
fn spawn_cluster(state: &AppState, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
    let mut tasks = state.logs().spawn(state.registry(), state.tracing(), stop);
    if let Some(lease) = state.cluster().lease() {
        tasks.push(tokio::spawn(lease.clone().run(stop.clone())));
    }
    if let Some(p) = state.presence() {
        let members = state.cluster().members().clone();
        tasks.push(tokio::spawn(p.clone().run(
            state.registry().clone(),
            members,
            stop.clone(),
        )));
    }
    if let Some(relay) = state.cluster().relay() {
        let connections = state.cluster().connections().clone();
        let members = state.cluster().members().clone();
        tasks.push(tokio::spawn(relay.clone().run(
            connections,
            members,
            stop.clone(),
        )));
        tasks.push(tokio::spawn(relay.clone().forward(stop.clone())));
    }
    tasks
}

/// The node's logs (Redis, Kafka; which topics each carries), its connection ids and their
/// leases, and its connection observers (Redis presence, Kafka upstream events), as
/// configured. Fails when another running node holds this node's id.
async fn cluster_parts(config: &Config) -> anyhow::Result<(Arc<bridge::Logs>, cluster::Cluster)> {
    let c = &config.cluster;
    // The longest history any topic keeps: how far back a node reads a log it starts
    // following, and (interest routing) how much a Redis stream keeps.
    let history = (config.namespaces.values())
        .filter_map(|ns| ns.history_ttl)
        .fold(config.topics.history_ttl, Duration::max);
    let redis = match &c.redis_url {
        Some(_) => Some(bridge::redis::RedisBridge::new(c, history)?),
        None => None,
    };
    let mut logs = bridge::Logs::none();
    if let Some(b) = &redis {
        logs = logs.with(b.clone(), bridge::Share::Rest);
    }
    if let Some(brokers) = &c.kafka_brokers {
        // Alone, Kafka carries every topic; beside Redis, the prefixes configured for it.
        let claim = match redis {
            Some(_) => bridge::Share::Prefixes(c.kafka_prefixes.clone()),
            None => bridge::Share::Rest,
        };
        logs = logs.with(bridge::kafka::KafkaBridge::new(c, brokers, history)?, claim);
    }
    let logs = Arc::new(logs);
    let ids = Arc::new(cluster::ids::ConnectionIds::new(
        cluster::ids::ConnectionIds::hashed(&c.node_id),
    ));
    let (presence, lease) = match &redis {
        Some(b) => {
            let lease = cluster::lease::Lease::new(
                b.target(),
                &c.node_id,
                c.presence_interval,
                ids.clone(),
            );
            lease.acquire().await?;
            (
                Some(cluster::presence::Presence::new(
                    c,
                    b.target(),
                    logs.clone(),
                )?),
                Some(lease),
            )
        }
        None => (None, None),
    };
    let upstream = match (&c.kafka_brokers, &c.kafka_upstream_topic) {
        (Some(brokers), Some(topic)) => Some(Arc::new(cluster::upstream::Upstream::new(
            brokers,
            topic,
            &c.node_id,
            &c.kafka_properties,
        )?)),
        _ => None,
    };
    let observers = cluster::Observers {
        presence,
        upstream,
        others: Vec::new(),
    };
    let relay = redis
        .as_ref()
        .map(|b| Arc::new(cluster::control::Relay::new(b.target(), &c.node_id)));
    let kept = cluster::members::Kept::from_config(config);
    let rules = cluster::join_leave::Rules::from_config(config);
    let cluster = cluster::Cluster::new(ids, lease, observers, relay, kept, rules);
    Ok((logs, cluster))
}

/// Reads the TLS certificate and key again on every `SIGHUP` (certificate rotation without a
/// restart); a failed reload is logged and the certificate in use stays.
async fn reload_tls_on_sighup(tls: Arc<server::tls::Tls>, stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; TLS reload disabled");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        match tls.reload() {
            Ok(()) => {
                telemetry::metrics::tls_reload("ok");
                tracing::info!("TLS certificate reloaded");
            }
            Err(e) => {
                telemetry::metrics::tls_reload("error");
                tracing::error!(error = %format!("{e:#}"), "TLS reload failed; keeping the certificate in use");
            }
        }
    }
}

/// Reclaims idle topics and drains the metrics histograms periodically.
async fn housekeeping(
    state: AppState,
    stop: CancellationToken,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    per_address: Vec<Arc<limits::AddressLimits>>,
) {
    let mut reclaim = tokio::time::interval(state.config().topics.reclaim_interval);
    let mut upkeep = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = reclaim.tick() => {
                let removed = state.registry().reclaim();
                telemetry::metrics::topics(state.registry().len());
                telemetry::metrics::patterns(state.registry().patterns().len());
                if removed > 0 {
                    tracing::debug!(removed, left = state.registry().len(), "reclaimed idle topics");
                }
            }
            _ = upkeep.tick() => {
                metrics.run_upkeep();
                per_address.iter().for_each(|limits| limits.sweep());
                state.publish_limits().sweep();
                state.cold_topics().sweep();
            }
        }
    }
}

/// A gateway running on a runtime of its own: what tests and embedders start. Its threads
/// record metrics into a recorder of its own (`telemetry::metrics::Scope`), so several
/// gateways in one process each count only their own (a `herald` process has one, global).
#[derive(Debug)]
pub struct Gateway {
    /// Where the public listener is bound.
    pub public_addr: SocketAddr,
    /// Where the admin listener is bound.
    pub admin_addr: SocketAddr,
    shutdown: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// Binds the public and admin listeners of `config` with its `limits.listen_backlog`;
/// serve them with [`run_validated`] after `TcpListener::from_std` on its runtime.
pub fn bind_listeners(
    config: &Config,
) -> anyhow::Result<(std::net::TcpListener, std::net::TcpListener)> {
    let backlog = config.limits.listen_backlog;
    let public = server::bind(config.listen, backlog)
        .map_err(|e| bind_error(e, config.listen, "public", "listen"))?;
    let admin = server::bind(config.admin_listen, backlog)
        .map_err(|e| bind_error(e, config.admin_listen, "admin", "admin-listen"))?;
    Ok((public, admin))
}

/// Why a listener could not be bound, naming the setting that chose its address (the flag,
/// its environment twin, the file's key) and, for the usual causes, what to do.
fn bind_error(e: std::io::Error, addr: SocketAddr, which: &str, flag: &str) -> anyhow::Error {
    let setting = format!(
        "--{flag}, HERALD_{}, `{}` in the file",
        flag.replace('-', "_").to_uppercase(),
        flag.replace('-', "_")
    );
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            format!(
                "; another process holds {addr}: stop it, or give another port with --{flag} HOST:PORT"
            )
        }
        std::io::ErrorKind::AddrNotAvailable => {
            format!("; {} is not an address of this machine", addr.ip())
        }
        std::io::ErrorKind::PermissionDenied if addr.port() < 1024 => {
            format!(
                "; port {} needs privileges: use a port from 1024 up",
                addr.port()
            )
        }
        _ => String::new(),
    };
    anyhow::anyhow!("cannot listen on {addr}, the {which} listener ({setting}): {e}{hint}")
}

impl Gateway {
    /// Binds `config.listen` and `config.admin_listen` (port 0 picks a free port) and runs
    /// on two threads of its own.
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        let loaded = config.validate()?;
        let (public, admin) = bind_listeners(&config)?;
        let public_addr = public.local_addr()?;
        let admin_addr = admin.local_addr()?;
        let scope = telemetry::metrics::Scope::new();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("herald-gateway")
            .on_thread_start(move || scope.enter())
            .enable_all()
            .build()
            .context("cannot start the gateway's runtime")?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let task = runtime.spawn(async move {
            let public = TcpListener::from_std(public)?;
            let admin = TcpListener::from_std(admin)?;
            run_validated(public, admin, config, loaded, stop).await
        });
        Ok(Self {
            public_addr,
            admin_addr,
            shutdown,
            task: Some(task),
            runtime: Some(runtime),
        })
    }

    /// The gateway's runtime, to run something beside it (its metrics are the gateway's).
    pub fn runtime(&self) -> tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as the gateway")
            .handle()
            .clone()
    }

    /// Starts draining without waiting.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Drains and waits until the gateway has stopped.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.finished().await
    }

    /// Waits until the gateway stops (after [`Self::begin_shutdown`]).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        self.finished().await
    }

    async fn finished(&mut self) -> anyhow::Result<()> {
        match self.task.take() {
            Some(task) => task.await.context("gateway task panicked")?,
            None => Ok(()),
        }
    }
}

impl Drop for Gateway {
    /// Ends the gateway's runtime without waiting (dropping it in async code would block).
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
