//! How Herald reaches Redis, in one place for everything that talks to it (the bridge's
//! readers and publisher, presence): the URL forms, TLS and ACL credentials, and the three
//! deployment modes.
//!
//! | `cluster.redis_mode` | `cluster.redis_url` |
//! | --- | --- |
//! | `single` | `redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS |
//! | `sentinel` | `redis+sentinel://[user:password@]host:port,host:port/<master-name>` |
//! | `cluster` | seed nodes, comma-separated: `rediss://user:password@h1:p1,h2:p2,h3:p3` |
//!
//! Credentials in a URL are the Redis ACL user and password (a password alone is
//! `redis://:password@…`). In cluster mode a seed without a scheme takes the first seed's
//! scheme and credentials. With TLS, `cluster.redis_ca_file` replaces the system's roots and
//! `cluster.redis_cert_file` / `cluster.redis_key_file` present a client certificate.
//!
//! Sentinel: each (re)connection asks the sentinels where the master is now, so a failover
//! costs one failed command and a reconnect. The URL's credentials are the master's; the
//! sentinels themselves are reached without credentials or TLS.
//!
//! Cluster: commands are routed by key slot by the `redis` crate, which follows `MOVED` and
//! reloads the slot map after a failover. Keys that must be used together carry a hash tag
//! (see [`RedisTarget::stream_key`]).

pub(crate) use crate::config::secrets::redact_url;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, ProtocolVersion,
    RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::config::{ClusterConfig, RedisMode};

/// Time to connect to one node of a Redis Cluster. Longer than for one server: each reader
/// connects to every master at once, and a node starting its readers makes many TLS
/// handshakes together.
const CLUSTER_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how to reach Redis, parsed and checked from the configuration (certificate files
/// read) before anything connects.
pub(crate) struct RedisTarget {
    kind: Kind,
    /// The same deployment spoken to in RESP3, for the live connection: pub/sub messages
    /// arrive as pushes beside the replies of ordinary commands on one connection
    /// ([`RedisTarget::connect_live`]).
    live: Kind,
    prefix: String,
}

enum Kind {
    Single(redis::Client),
    Sentinel(tokio::sync::Mutex<SentinelClient>),
    Cluster(redis::cluster::ClusterClient),
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.kind {
            Kind::Single(_) => "single",
            Kind::Sentinel(_) => "sentinel",
            Kind::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisTarget")
            .field("mode", &mode)
            .finish_non_exhaustive()
    }
}

/// What a connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Short commands answered at once (publish, presence): a reply slower than 2 s fails.
    Commands,
    /// Blocking reads (`XREAD BLOCK`): replies may take as long as the block.
    BlockingReads,
    /// The live connection: pushes, pings and bounded reads, answered within 10 s.
    Live,
}

impl RedisTarget {
    /// Parses `cluster.redis_url` in `cluster.redis_mode` and reads the TLS files. Every
    /// error names the setting at fault and never contains the password.
    pub(crate) fn from_config(config: &ClusterConfig) -> anyhow::Result<Self> {
        Ok(Self {
            kind: Self::kind(config, ProtocolVersion::RESP2)?,
            live: Self::kind(config, ProtocolVersion::RESP3)?,
            prefix: config.redis_prefix.clone(),
        })
    }

    fn kind(config: &ClusterConfig, protocol: ProtocolVersion) -> anyhow::Result<Kind> {
        let Some(url) = config.redis_url.as_deref() else {
            bail!("cluster.redis_url is not set");
        };
        let shown = redact_url(url);
        let certs = tls_files(config)?;
        let kind = match config.redis_mode {
            RedisMode::Single => {
                ensure!(
                    !url.contains(','),
                    "cluster.redis_url {shown:?} lists several hosts: set cluster.redis_mode to \"cluster\" (seed nodes) or \"sentinel\" (redis+sentinel://…)"
                );
                let info = parse_node(url, "cluster.redis_url")?;
                let settings = info.redis_settings().clone().set_protocol(protocol);
                let info = info.set_redis_settings(settings);
                let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
                let client = match certs {
                    Some(certs) => {
                        ensure!(
                            tls,
                            "cluster.redis_ca_file / redis_cert_file need a rediss:// URL (TLS), not {shown:?}"
                        );
                        redis::Client::build_with_tls(info, certs)
                    }
                    None => redis::Client::open(info),
                }
                .map_err(|e| anyhow::anyhow!("cluster.redis_url {shown:?}: {e}"))?;
                Kind::Single(client)
            }
            RedisMode::Sentinel => {
                let (sentinels, master, info) = parse_sentinel_url(url)?;
                ensure!(
                    certs.is_none(),
                    "cluster.redis_ca_file / redis_cert_file are not supported with redis_mode = \"sentinel\""
                );
                let mut builder =
                    SentinelClientBuilder::new(sentinels, &master, SentinelServerType::Master)
                        .map_err(|e| anyhow::anyhow!("cluster.redis_url {shown:?}: {e}"))?;
                let settings = info.redis_settings();
                if let Some(user) = settings.username() {
                    builder = builder.set_client_to_redis_username(user);
                }
                if let Some(password) = settings.password() {
                    builder = builder.set_client_to_redis_password(password);
                }
                builder = builder.set_client_to_redis_db(settings.db());
                builder = builder.set_client_to_redis_protocol(protocol);
                let client = builder
                    .build()
                    .map_err(|e| anyhow::anyhow!("cluster.redis_url {shown:?}: {e}"))?;
                Kind::Sentinel(tokio::sync::Mutex::new(client))
            }
            RedisMode::Cluster => {
                ensure!(
                    !config.redis_prefix.contains(['{', '}']),
                    "cluster.redis_prefix must not contain braces with redis_mode = \"cluster\" (Herald adds its own hash tags)"
                );
                let seeds = parse_cluster_seeds(url)?;
                let tls = seeds
                    .iter()
                    .all(|s| matches!(s.addr(), ConnectionAddr::TcpTls { .. }));
                ensure!(
                    tls || seeds
                        .iter()
                        .all(|s| matches!(s.addr(), ConnectionAddr::Tcp(..))),
                    "cluster.redis_url {shown:?}: seeds must all use redis:// or all rediss://"
                );
                let settings = seeds[0].redis_settings().clone();
                let mut builder = redis::cluster::ClusterClient::builder(seeds)
                    .connection_timeout(CLUSTER_CONNECT_TIMEOUT)
                    .retries(3)
                    .use_protocol(protocol)
                    .min_retry_wait(50)
                    .max_retry_wait(1_000);
                if let Some(user) = settings.username() {
                    builder = builder.username(user);
                }
                if let Some(password) = settings.password() {
                    builder = builder.password(password);
                }
                if let Some(certs) = certs {
                    ensure!(
                        tls,
                        "cluster.redis_ca_file / redis_cert_file need rediss:// seeds (TLS)"
                    );
                    builder = builder.certs(certs);
                }
                let client = builder
                    .build()
                    .map_err(|e| anyhow::anyhow!("cluster.redis_url {shown:?}: {e}"))?;
                Kind::Cluster(client)
            }
        };
        Ok(kind)
    }

    /// Whether Redis runs as a Redis Cluster (keys used together need one hash tag).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    /// The stream of shard `shard`. In a Redis Cluster, `{<prefix>:<shard>}:stream`: the hash
    /// tag keeps a stream and its epoch on one slot, and the shards spread over the masters.
    pub(crate) fn stream_key(&self, shard: u32) -> String {
        if self.is_cluster() {
            format!("{{{}:{shard}}}:stream", self.prefix)
        } else {
            format!("{}:stream:{shard}", self.prefix)
        }
    }

    /// The epoch key of shard `shard` (same slot as its stream).
    pub(crate) fn epoch_key(&self, shard: u32) -> String {
        if self.is_cluster() {
            format!("{{{}:{shard}}}:epoch", self.prefix)
        } else {
            format!("{}:epoch:{shard}", self.prefix)
        }
    }

    /// The pub/sub channel that carries shard `shard`'s new entries to the nodes following it
    /// (the live path): `<prefix>:live:<shard>`, or on a Redis Cluster the shard channel
    /// `{<prefix>:<shard>}:live`, in its stream's slot (the append script publishes to it).
    pub(crate) fn live_channel(&self, shard: u32) -> String {
        if self.is_cluster() {
            format!("{{{}:{shard}}}:live", self.prefix)
        } else {
            format!("{}:live:{shard}", self.prefix)
        }
    }

    /// The key that remembers, for `cluster.idempotency_window`, the entry a publish with
    /// idempotency key `key` to `topic` (of shard `shard`) appended (same slot as the stream).
    pub(crate) fn idempotency_key(&self, shard: u32, topic: &str, key: &str) -> String {
        if self.is_cluster() {
            format!(
                "{{{}:{shard}}}:idem:{}:{topic}:{key}",
                self.prefix,
                topic.len()
            )
        } else {
            format!("{}:idem:{shard}:{}:{topic}:{key}", self.prefix, topic.len())
        }
    }

    /// The prefix of the presence keys. In a Redis Cluster they share one hash tag,
    /// `{<prefix>}`, so that a flush is one pipeline to one master.
    pub(crate) fn presence_prefix(&self) -> String {
        if self.is_cluster() {
            format!("{{{}}}", self.prefix)
        } else {
            self.prefix.clone()
        }
    }

    /// Opens a connection (in sentinel mode, to the master the sentinels name now).
    pub(crate) async fn connect(&self, purpose: Purpose) -> RedisResult<RedisConn> {
        Self::open(&self.kind, purpose, None).await
    }

    /// Opens the live connection: RESP3, its pub/sub messages (and, when it closes, a
    /// `Disconnection`) handed to `push`, ordinary commands (pings, a backfill's reads)
    /// answered within 10 s beside them.
    /// On a Redis Cluster it is one connection per master (sharded pub/sub is served by the
    /// master of the channel's slot), whatever the number of channels.
    pub(crate) async fn connect_live(
        &self,
        push: impl redis::aio::AsyncPushSender,
    ) -> RedisResult<RedisConn> {
        let push: Arc<dyn redis::aio::AsyncPushSender> = Arc::new(push);
        Self::open(&self.live, Purpose::Live, Some(push)).await
    }

    async fn open(
        kind: &Kind,
        purpose: Purpose,
        push: Option<Arc<dyn redis::aio::AsyncPushSender>>,
    ) -> RedisResult<RedisConn> {
        let response_timeout = match purpose {
            Purpose::Commands => Some(Duration::from_secs(2)),
            Purpose::BlockingReads => None,
            Purpose::Live => Some(Duration::from_secs(10)),
        };
        let mut config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(response_timeout);
        if let Some(push) = push.clone() {
            config = config.set_push_sender(push);
        }
        match kind {
            Kind::Single(client) => Ok(RedisConn::Single(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            )),
            Kind::Sentinel(sentinel) => {
                let client = tokio::time::timeout(
                    Duration::from_secs(5),
                    sentinel.lock().await.async_get_client(),
                )
                .await
                .map_err(|_| {
                    redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "no sentinel answered within 5 s",
                    ))
                })??;
                Ok(RedisConn::Single(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            Kind::Cluster(client) => {
                // Blocking reads wait up to 2 s on the server; leave them room.
                let timeout = response_timeout.unwrap_or(Duration::from_secs(10));
                let mut config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(CLUSTER_CONNECT_TIMEOUT)
                    .set_response_timeout(timeout);
                if let Some(push) = push {
                    config = config.set_push_sender(push);
                }
                Ok(RedisConn::Cluster(
                    client.get_async_connection_with_config(config).await?,
                ))
            }
        }
    }
}

/// A connection to a single Redis (or the sentinels' master) or to a Redis Cluster.
#[derive(Clone)]
pub(crate) enum RedisConn {
    /// One server.
    Single(MultiplexedConnection),
    /// A Redis Cluster: commands routed by slot.
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// One command connection shared by its users and made again after it broke (Redis
/// restarted, a sentinel failover): what the publisher and presence use.
#[derive(Debug)]
pub(crate) struct SharedConn {
    target: Arc<RedisTarget>,
    cached: parking_lot::Mutex<Option<RedisConn>>,
    connecting: tokio::sync::Mutex<()>,
}

impl SharedConn {
    /// For commands on `target`; connects on first use.
    pub(crate) fn new(target: Arc<RedisTarget>) -> Self {
        Self {
            target,
            cached: parking_lot::Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// The connection, made now if there is none.
    pub(crate) async fn get(&self) -> RedisResult<RedisConn> {
        if let Some(conn) = self.cached.lock().clone() {
            return Ok(conn);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(conn) = self.cached.lock().clone() {
            return Ok(conn);
        }
        let conn = self.target.connect(Purpose::Commands).await?;
        *self.cached.lock() = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection: the next [`Self::get`] makes a new one.
    pub(crate) fn forget(&self) {
        self.cached.lock().take();
    }

    /// Runs `pipe`, forgetting the connection if the error says it broke (the next call makes
    /// a new one).
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> RedisResult<T> {
        let mut conn = self.get().await?;
        let result = pipe.query_async(&mut conn).await;
        if let Err(e) = &result {
            self.failed(e);
        }
        result
    }

    /// Forgets the connection after `error` if it says the connection is unusable, so the
    /// next [`Self::get`] makes a new one. Returns whether a retry may help.
    pub(crate) fn failed(&self, error: &redis::RedisError) -> bool {
        let broken = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_timeout()
            || error.is_unrecoverable_error()
            || matches!(
                error.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
            );
        if broken {
            self.cached.lock().take();
        }
        broken
    }
}

impl std::fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "RedisConn::Single",
            Self::Cluster(_) => "RedisConn::Cluster",
        })
    }
}

fn parse_node(url: &str, what: &str) -> anyhow::Result<ConnectionInfo> {
    let shown = redact_url(url);
    ensure!(
        url.starts_with("redis://") || url.starts_with("rediss://"),
        "{what} {shown:?} must start with redis:// or rediss:// (TLS)"
    );
    url.into_connection_info()
        .map_err(|e| anyhow::anyhow!("{what} {shown:?} is invalid: {e}"))
}

/// `redis+sentinel://[user:password@]h:p,h:p/<master>` → sentinel addresses, master name,
/// and the master's credentials and database.
fn parse_sentinel_url(url: &str) -> anyhow::Result<(Vec<ConnectionAddr>, String, ConnectionInfo)> {
    let shown = redact_url(url);
    let Some(rest) = url.strip_prefix("redis+sentinel://") else {
        bail!(
            "cluster.redis_url {shown:?}: with redis_mode = \"sentinel\" it must be redis+sentinel://[user:password@]host:port,host:port/<master-name>"
        );
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let master = path.trim_end_matches('/');
    ensure!(
        !master.is_empty() && !master.contains('/'),
        "cluster.redis_url {shown:?}: name the master after the hosts: redis+sentinel://host:port,host:port/<master-name>"
    );
    let mut sentinels = Vec::new();
    let mut first = None;
    for host in hosts.split(',') {
        ensure!(
            !host.is_empty(),
            "cluster.redis_url {shown:?}: empty sentinel address"
        );
        let info = format!("redis://{userinfo}{host}")
            .into_connection_info()
            .map_err(|e| anyhow::anyhow!("cluster.redis_url {shown:?}: sentinel {host:?}: {e}"))?;
        ensure!(
            host.contains(':'),
            "cluster.redis_url {shown:?}: sentinel {host:?} needs a port (sentinels listen on 26379 by default)"
        );
        sentinels.push(info.addr().clone());
        first.get_or_insert(info);
    }
    let first = first.context("no sentinel address")?;
    Ok((sentinels, master.to_string(), first))
}

/// Comma-separated seeds; one without a scheme takes the first seed's scheme and credentials.
fn parse_cluster_seeds(url: &str) -> anyhow::Result<Vec<ConnectionInfo>> {
    let shown = redact_url(url);
    let mut parts = url.split(',').map(str::trim);
    let first = parts.next().unwrap_or_default();
    let (scheme, rest) = first.split_once("://").with_context(|| {
        format!("cluster.redis_url {shown:?}: the first seed must be a URL, e.g. redis://host:port")
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    let userinfo = authority.rfind('@').map_or("", |at| &authority[..=at]);
    let mut seeds = vec![parse_node(first, "cluster.redis_url seed")?];
    for part in parts {
        ensure!(!part.is_empty(), "cluster.redis_url {shown:?}: empty seed");
        let full = if part.contains("://") {
            part.to_string()
        } else {
            format!("{scheme}://{userinfo}{part}")
        };
        seeds.push(parse_node(&full, "cluster.redis_url seed")?);
    }
    Ok(seeds)
}

fn tls_files(config: &ClusterConfig) -> anyhow::Result<Option<TlsCertificates>> {
    let read = |path: &Path, what: &str| {
        std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
    };
    let root_cert = match &config.redis_ca_file {
        Some(path) => Some(read(path, "cluster.redis_ca_file")?),
        None => None,
    };
    let client_tls = match (&config.redis_cert_file, &config.redis_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert, "cluster.redis_cert_file")?,
            client_key: read(key, "cluster.redis_key_file")?,
        }),
        (None, None) => None,
        _ => bail!("cluster.redis_cert_file and cluster.redis_key_file go together"),
    };
    if root_cert.is_none() && client_tls.is_none() {
        return Ok(None);
    }
    let certs = TlsCertificates {
        client_tls,
        root_cert,
    };
    // Parse now, so a bad file is a configuration error and not a failed connection later.
    redis::Client::build_with_tls("rediss://127.0.0.1:1", certs.clone())
        .map_err(|e| anyhow::anyhow!("cluster.redis TLS files: {e}"))?;
    Ok(Some(certs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: RedisMode, url: &str) -> ClusterConfig {
        ClusterConfig {
            redis_mode: mode,
            redis_url: Some(url.into()),
            ..ClusterConfig::default()
        }
    }

    fn error(mode: RedisMode, url: &str) -> String {
        format!(
            "{:#}",
            RedisTarget::from_config(&config(mode, url)).unwrap_err()
        )
    }

    #[test]
    fn passwords_are_redacted_in_every_seed() {
        assert_eq!(
            redact_url("rediss://app:p%40ss@h1:6380,redis://:x@h2:1/2,h3:7"),
            "rediss://app:***@h1:6380,redis://:***@h2:1/2,h3:7"
        );
        assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(
            redact_url("redis+sentinel://u:secret@s1:26379,s2:26379/mymaster"),
            "redis+sentinel://u:***@s1:26379,s2:26379/mymaster"
        );
    }

    #[test]
    fn the_pinned_url_forms_parse() {
        for (mode, url) in [
            (RedisMode::Single, "redis://127.0.0.1:6379"),
            (RedisMode::Single, "redis://app:pw@127.0.0.1:6379/2"),
            (RedisMode::Single, "rediss://app:pw@cache.example.com:6380"),
            (
                RedisMode::Sentinel,
                "redis+sentinel://app:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster",
            ),
            (
                RedisMode::Cluster,
                "rediss://app:pw@10.0.0.1:6379,10.0.0.2:6379,rediss://app:pw@10.0.0.3:6379",
            ),
        ] {
            RedisTarget::from_config(&config(mode, url)).unwrap();
        }
        let (sentinels, master, info) =
            parse_sentinel_url("redis+sentinel://app:p%40ss@h1:26379,h2:26380/mymaster").unwrap();
        assert_eq!(master, "mymaster");
        assert_eq!(sentinels.len(), 2);
        assert_eq!(info.redis_settings().username(), Some("app"));
        assert_eq!(info.redis_settings().password(), Some("p@ss"));
        let seeds = parse_cluster_seeds("rediss://app:pw@h1:1,h2:2").unwrap();
        assert!(
            matches!(seeds[1].addr(), ConnectionAddr::TcpTls { host, port: 2, .. } if host == "h2")
        );
        assert_eq!(seeds[1].redis_settings().password(), Some("pw"));
    }

    #[test]
    fn bad_forms_get_a_clear_error_without_the_password() {
        let e = error(RedisMode::Single, "http://u:topsecret@h:1");
        assert!(e.contains("must start with redis://"), "{e}");
        assert!(!e.contains("topsecret"), "{e}");
        let e = error(RedisMode::Single, "redis://h1:1,h2:2");
        assert!(e.contains("redis_mode"), "{e}");
        let e = error(RedisMode::Sentinel, "redis://u:topsecret@h:1");
        assert!(e.contains("redis+sentinel://"), "{e}");
        assert!(!e.contains("topsecret"), "{e}");
        let e = error(RedisMode::Sentinel, "redis+sentinel://h:26379");
        assert!(e.contains("master"), "{e}");
        let e = error(RedisMode::Cluster, "h1:1,h2:2");
        assert!(e.contains("first seed"), "{e}");
        let mut c = config(RedisMode::Single, "redis://h:1");
        c.redis_ca_file = Some("/nonexistent/ca.pem".into());
        let e = format!("{:#}", RedisTarget::from_config(&c).unwrap_err());
        assert!(e.contains("cluster.redis_ca_file"), "{e}");
        let mut c = config(RedisMode::Single, "rediss://h:1");
        c.redis_key_file = Some("/nonexistent/key.pem".into());
        let e = format!("{:#}", RedisTarget::from_config(&c).unwrap_err());
        assert!(e.contains("go together"), "{e}");
    }

    #[test]
    fn cluster_keys_share_a_slot_per_shard() {
        let mut c = config(RedisMode::Cluster, "redis://h1:1,h2:2");
        c.redis_prefix = "hp".into();
        let t = RedisTarget::from_config(&c).unwrap();
        assert_eq!(t.stream_key(3), "{hp:3}:stream");
        assert_eq!(t.epoch_key(3), "{hp:3}:epoch");
        assert_eq!(t.presence_prefix(), "{hp}");
        let t = RedisTarget::from_config(&config(RedisMode::Single, "redis://h:1")).unwrap();
        assert_eq!(t.stream_key(3), "herald:stream:3");
        assert_eq!(t.epoch_key(3), "herald:epoch:3");
    }
}
