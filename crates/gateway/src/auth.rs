//! Who may subscribe and publish: JWTs for clients, API keys for services, an Origin
//! allow-list for browsers.
//!
//! Tokens (`Authorization: Bearer`, the `token` query parameter for clients that cannot set
//! headers, or a WebSocket `auth` frame) are JWTs signed with HS256 (shared secret), RS256 or
//! ES256 (PEM public keys, or a JWKS file). Claims: `sub` (the user), `exp` (required), `topics`
//! (what the token may subscribe to) and `publish` (what it may publish to); each a list of
//! exact names or prefix patterns ending in `*` (`orders.*`, or `*` for everything). An
//! optional `info` claim, a JSON object of at most [`MAX_INFO_BYTES`] (compact), describes the
//! client to the admin API's presence members; a token whose `info` is anything else is
//! refused.
//!
//! Rules, in order:
//! - `user:<sub>` topics are readable only with a token whose `sub` is `<sub>`.
//! - With no key configured (the default), anyone may subscribe to everything else.
//! - With keys configured, topics under `auth.public_prefixes` need no token; others need a
//!   token whose `topics` matches.
//! - Publishing on the public listener needs an API key (`x-api-key` header) or a token whose
//!   `publish` matches. (The admin listener is trusted: keep it private.)

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::http::{HeaderMap, StatusCode};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::config::AuthConfig;
use crate::error::ApiError;

/// Seconds of clock skew allowed on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 5;

/// The latest `exp` accepted: the year 9999. Later values are refused rather than turned
/// into timers that overflow.
const MAX_EXP: u64 = 253_402_300_799;

/// Largest `info` claim accepted, in bytes of compact JSON: it is kept with each of the
/// connection's subscriptions while it lives (shared) and written to Redis with them.
pub(crate) const MAX_INFO_BYTES: usize = 1024;

/// The claims Herald reads (`nbf` is checked by the validation, with the same leeway as
/// `exp`).
#[derive(Debug, Deserialize)]
struct Claims {
    #[serde(default)]
    sub: Option<String>,
    exp: u64,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
    #[serde(default)]
    info: Option<serde_json::Value>,
}

/// Who a client is.
#[derive(Clone, Debug, Default)]
pub(crate) struct Identity {
    /// The user (`sub`), when the client presented a token.
    pub sub: Option<String>,
    subscribe: Vec<String>,
    publish: Vec<String>,
    /// When the token expires (or the lifetime a hook gave ends).
    pub expires: Option<SystemTime>,
    /// The token's `info` claim (a JSON object, compact, at most [`MAX_INFO_BYTES`]), or what
    /// the application's connect hook said about the client instead; sent with its later
    /// hook requests and listed with its presence members.
    /// (JSON text; one word per connection, shared by its clones.)
    pub info: Option<std::sync::Arc<String>>,
    /// Whether a token was presented (its claims are sent to the hooks).
    token: bool,
    /// The connect hook could not vouch for the client (unavailable, let in by
    /// `hooks.on_unavailable = "allow"`): it gets only what its token and the public
    /// prefixes allow ([`Auth::may_subscribe`]).
    pub unvouched: bool,
}

impl Identity {
    /// Whether the client presented no token and no hook named it.
    pub(crate) fn is_anonymous(&self) -> bool {
        !self.token && self.sub.is_none()
    }

    /// The token's claims Herald reads besides `sub` (`exp`, `topics`, `publish`), as the
    /// hooks send them (the user goes as a field of its own: a hook may have replaced it);
    /// `null` without a token.
    pub(crate) fn token_claims(&self) -> serde_json::Value {
        if !self.token {
            return serde_json::Value::Null;
        }
        let exp = self
            .expires
            .and_then(|e| e.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        serde_json::json!({ "exp": exp, "topics": self.subscribe, "publish": self.publish })
    }

    /// Time left before the token expires (`None`: no token, never).
    pub(crate) fn time_left(&self) -> Option<Duration> {
        self.expires.map(|e| {
            e.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        })
    }
}

struct Key {
    key: DecodingKey,
    algorithm: Algorithm,
    kid: Option<String>,
}

/// The access rules of a gateway.
pub(crate) struct Auth {
    keys: Vec<Key>,
    public_prefixes: Vec<String>,
    api_keys: HashSet<String>,
    allowed_origins: Vec<String>,
    /// Whether requests carry credentials a browser attaches by itself (a hook is told the
    /// client's cookies): then, with no `allowed_origins`, only the site's own pages pass.
    ambient_credentials: bool,
    /// What each namespace says of anonymous clients and client publishing.
    namespaces: HashMap<String, Access>,
}

/// Whether `topic` is a personal topic (`user:<sub>`, `conn:<id>`), whose rule is Herald's
/// own: no hook or namespace opens it to others.
pub(crate) fn is_personal(topic: &str) -> bool {
    topic.starts_with("user:") || topic.starts_with("conn:")
}

/// A namespace's `anonymous` and `publish` ([`crate::config::NamespaceConfig`]).
#[derive(Clone, Copy, Debug)]
struct Access {
    anonymous: Option<bool>,
    publish: Option<bool>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secrets.
        f.debug_struct("Auth")
            .field("keys", &self.keys.len())
            .field("public_prefixes", &self.public_prefixes)
            .field("api_keys", &self.api_keys.len())
            .field("allowed_origins", &self.allowed_origins)
            .field("namespaces", &self.namespaces)
            .finish()
    }
}

impl Auth {
    /// Loads keys from the configuration (files are read here, at start-up).
    pub(crate) fn from_config(config: &AuthConfig) -> anyhow::Result<Self> {
        let mut keys = Vec::new();
        if let Some(secret) = &config.hs256_secret {
            keys.push(Key {
                key: DecodingKey::from_secret(secret.as_bytes()),
                algorithm: Algorithm::HS256,
                kid: None,
            });
        }
        for path in &config.rs256_public_keys {
            let pem =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let key = DecodingKey::from_rsa_pem(&pem)
                .with_context(|| format!("{} is not an RSA public key", path.display()))?;
            keys.push(Key {
                key,
                algorithm: Algorithm::RS256,
                kid: None,
            });
        }
        for path in &config.es256_public_keys {
            let pem =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let key = DecodingKey::from_ec_pem(&pem)
                .with_context(|| format!("{} is not an EC public key", path.display()))?;
            keys.push(Key {
                key,
                algorithm: Algorithm::ES256,
                kid: None,
            });
        }
        if let Some(path) = &config.jwks_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let set: JwkSet = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a JWKS", path.display()))?;
            for jwk in &set.keys {
                let key = DecodingKey::from_jwk(jwk)
                    .with_context(|| format!("unusable key in {}", path.display()))?;
                let algorithm = match jwk.common.key_algorithm.map(|a| a.to_string()).as_deref() {
                    Some("HS256") => Algorithm::HS256,
                    Some("ES256") => Algorithm::ES256,
                    _ if matches!(
                        jwk.algorithm,
                        jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_)
                    ) =>
                    {
                        Algorithm::ES256
                    }
                    _ => Algorithm::RS256,
                };
                keys.push(Key {
                    key,
                    algorithm,
                    kid: jwk.common.key_id.clone(),
                });
            }
        }
        Ok(Self {
            keys,
            public_prefixes: config.public_prefixes.clone(),
            api_keys: config.api_keys.iter().cloned().collect(),
            allowed_origins: config.allowed_origins.clone(),
            ambient_credentials: false,
            namespaces: HashMap::new(),
        })
    }

    /// Whether tokens are required for non-public topics.
    pub(crate) fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether API keys are configured (public publishing is served).
    pub(crate) fn has_api_keys(&self) -> bool {
        !self.api_keys.is_empty()
    }

    /// Verifies `token`: signature by a configured key, `exp` in the future, no `alg: none`.
    pub(crate) fn verify(&self, token: &str) -> Result<Identity, ApiError> {
        let invalid =
            |reason: String| ApiError::new(StatusCode::UNAUTHORIZED, "invalid_token", reason);
        if self.keys.is_empty() {
            return Err(invalid("this gateway has no token keys configured".into()));
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| invalid(format!("malformed token: {e}")))?;
        let mut last = None;
        for key in &self.keys {
            if key.algorithm != header.alg
                || (header.kid.is_some() && key.kid.is_some() && header.kid != key.kid)
            {
                continue;
            }
            let mut validation = Validation::new(key.algorithm);
            validation.leeway = LEEWAY_SECS;
            validation.validate_nbf = true;
            validation.validate_aud = false;
            validation.set_required_spec_claims(&["exp"]);
            match jsonwebtoken::decode::<Claims>(token, &key.key, &validation) {
                Ok(data) => {
                    let c = data.claims;
                    // A validly signed `exp` past what the clock can hold (≥ 2^63 s) must not
                    // overflow: such a token is refused like any other unusable one.
                    let expires = UNIX_EPOCH
                        .checked_add(Duration::from_secs(c.exp))
                        .filter(|_| c.exp <= MAX_EXP)
                        .ok_or_else(|| invalid(format!("exp {} is out of range", c.exp)))?;
                    let info = c.info.map(info_of).transpose().map_err(invalid)?;
                    return Ok(Identity {
                        sub: c.sub,
                        subscribe: c.topics,
                        publish: c.publish,
                        expires: Some(expires),
                        info,
                        token: true,
                        unvouched: false,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(invalid(match last {
            Some(e) => format!("token rejected: {e}"),
            None => format!("no key for algorithm {:?}", header.alg),
        }))
    }

    /// The identity of an HTTP request: its bearer token (header, or `token` query value),
    /// else anonymous.
    pub(crate) fn identify(
        &self,
        headers: &HeaderMap,
        query_token: Option<&str>,
    ) -> Result<Identity, ApiError> {
        let bearer = match headers.get("authorization") {
            None => None,
            Some(v) => {
                let v = v.to_str().unwrap_or("");
                match v.get(..7) {
                    Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => Some(&v[7..]),
                    _ => {
                        return Err(ApiError::new(
                            StatusCode::UNAUTHORIZED,
                            "invalid_token",
                            "the Authorization header must be `Bearer <token>`",
                        ));
                    }
                }
            }
        };
        match bearer.or(query_token) {
            Some(token) => self.verify(token.trim()),
            None => Ok(Identity::default()),
        }
    }

    /// Whether `who` may subscribe to `topic`, or to the prefix pattern `topic` (`orders.*`):
    /// a pattern only when the rules allow every topic it can match (a claim `orders.*`
    /// allows `orders.*` and `orders.eu.*`; `orders.eu.*` does not allow `orders.*`).
    pub(crate) fn may_subscribe(&self, who: &Identity, topic: &str) -> bool {
        self.allows(who, topic, !who.unvouched)
    }

    /// Whether `who` may subscribe to `topic` by what its token, the public prefixes and the
    /// namespaces allow, without the open default of a gateway that has no token keys: the
    /// rule when a hook that decides `topic` was unavailable under `hooks.on_unavailable =
    /// "allow"` (unavailability never opens more than tokens and public prefixes do).
    pub(crate) fn may_subscribe_unvouched(&self, who: &Identity, topic: &str) -> bool {
        self.allows(who, topic, false)
    }

    /// [`Self::may_subscribe`], with the open default of a gateway without token keys when
    /// `open_default`.
    fn allows(&self, who: &Identity, topic: &str, open_default: bool) -> bool {
        let pattern = topic.strip_suffix('*');
        if pattern.is_some_and(is_personal) || topic == "*" {
            return false;
        }
        if let Some(user) = topic.strip_prefix("user:") {
            return who.sub.as_deref() == Some(user);
        }
        if topic.starts_with("conn:") {
            // Only the server subscribes a connection to its own topic (a message sent to it).
            return false;
        }
        match self.access(topic).and_then(|a| a.anonymous) {
            // Open to every client, as a public prefix is.
            Some(true) => return true,
            // Closed to clients without a token, whatever a public prefix says.
            Some(false) if who.is_anonymous() => return false,
            _ => {}
        }
        // A pattern's prefix starts every topic it matches: a public prefix or a claim that
        // covers the prefix covers them all.
        let name = pattern.unwrap_or(topic);
        (open_default && !self.enabled())
            || self
                .public_prefixes
                .iter()
                .any(|p| name.starts_with(p.as_str()))
            || match pattern {
                Some(prefix) => covers_all(&who.subscribe, prefix),
                None => matches_any(&who.subscribe, topic),
            }
    }

    /// Whether `who` may publish to `topic` (on the public listener).
    pub(crate) fn may_publish(&self, who: &Identity, topic: &str) -> bool {
        match self.access(topic).and_then(|a| a.publish) {
            Some(true) => self.may_subscribe(who, topic),
            Some(false) => false,
            None => matches_any(&who.publish, topic),
        }
    }

    /// Whether the namespace of `topic` closes it to client publishing (`publish = false`):
    /// not even a publish hook opens it (dev mode and API keys are trusted, as the admin
    /// listener is).
    pub(crate) fn publish_closed(&self, topic: &str) -> bool {
        self.access(topic).and_then(|a| a.publish) == Some(false)
    }

    /// Whether `topic`'s namespace is closed to `who` because it has no token
    /// (`anonymous = false`): no hook opens it.
    pub(crate) fn closed_to(&self, who: &Identity, topic: &str) -> bool {
        who.is_anonymous() && self.access(topic).and_then(|a| a.anonymous) == Some(false)
    }

    /// Tells the rules whether a browser's ambient credentials reach a decision: when the
    /// hooks are told the client's cookies ([`crate::config::HooksConfig::forwards_cookies`]),
    /// a page of another site must not get a connection in the user's name, so an empty
    /// `allowed_origins` then means "this site's own pages", not "any".
    pub(crate) fn with_ambient_credentials(mut self, ambient: bool) -> Self {
        self.ambient_credentials = ambient;
        self
    }

    /// Takes each namespace's `anonymous` and `publish` rules.
    pub(crate) fn with_namespaces(
        mut self,
        namespaces: &std::collections::BTreeMap<String, crate::config::NamespaceConfig>,
    ) -> Self {
        self.namespaces = namespaces
            .iter()
            .filter(|(_, ns)| ns.anonymous.is_some() || ns.publish.is_some())
            .map(|(name, ns)| {
                let access = Access {
                    anonymous: ns.anonymous,
                    publish: ns.publish,
                };
                (name.clone(), access)
            })
            .collect();
        self
    }

    fn access(&self, topic: &str) -> Option<&Access> {
        if self.namespaces.is_empty() {
            return None;
        }
        crate::config::namespaces::namespace_of(topic).and_then(|ns| self.namespaces.get(ns))
    }

    /// Whether the request carries a configured API key (`x-api-key`).
    pub(crate) fn api_key_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|k| self.api_keys.contains(k))
    }

    /// Checks a browser's `Origin` against `auth.allowed_origins` (a request without
    /// `Origin` is not from a browser page and passes). An empty list allows any origin,
    /// unless the hooks are told the client's cookies: then only the site's own pages
    /// (`Origin` naming the request's `Host`) pass, so that another site's page cannot
    /// connect in the user's name. Returns the origin to echo in CORS headers.
    pub(crate) fn check_origin<'h>(
        &self,
        headers: &'h HeaderMap,
    ) -> Result<Option<&'h str>, ApiError> {
        let Some(origin) = headers.get("origin").and_then(|v| v.to_str().ok()) else {
            return Ok(None);
        };
        if self.allowed_origins.is_empty() {
            let host = headers.get("host").and_then(|v| v.to_str().ok());
            if self.ambient_credentials && !same_origin(origin, host) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "origin_not_allowed",
                    format!(
                        "origin {origin:?} is another site, and the hooks are told the client's cookies; list the pages allowed in auth.allowed_origins"
                    ),
                ));
            }
            return Ok(Some(origin));
        }
        if self
            .allowed_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
        {
            Ok(Some(origin))
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                format!("origin {origin:?} is not in auth.allowed_origins"),
            ))
        }
    }
}

/// The authority (`host[:port]`) of a browser `Origin` (`scheme://host[:port]`), with the
/// scheme's default port made explicit; `None` for `null` and anything that is not an
/// origin.
fn origin_authority(origin: &str) -> Option<(String, &'static str)> {
    let (scheme, rest) = origin.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ws" => "80",
        "https" | "wss" => "443",
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    Some((rest.to_ascii_lowercase(), default))
}

/// `host` with its port, `default` when it names none (`[::1]` and `[::1]:80` alike).
fn with_port(host: &str, default: &str) -> String {
    let host = host.to_ascii_lowercase();
    let has_port = match host.rfind(']') {
        Some(end) => host[end..].contains(':'),
        None => host.contains(':'),
    };
    if has_port {
        host
    } else {
        format!("{host}:{default}")
    }
}

/// Whether a page of `origin` is the site serving the request addressed to `host` (the
/// request's `Host`, or its HTTP/2 authority): same host and port, by the origin's scheme
/// for a port left out.
pub(crate) fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let (Some((authority, default)), Some(host)) = (origin_authority(origin), host) else {
        return false;
    };
    with_port(&authority, default) == with_port(host, default)
}

/// Whether `host` (a `Host` header: name or address, with a port or not) names this machine
/// the way only a local client would: an IP address, `localhost` or a `*.localhost` name.
/// A DNS name that resolves here (a rebinding page's) is not one.
pub(crate) fn is_address_or_localhost(host: &str) -> bool {
    let is_port = |port: &str| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    let name = match host.strip_prefix('[') {
        // `[::1]` or `[::1]:9090`, and nothing else after the `]` (`[::1]evil.example` is
        // not an address).
        Some(rest) => {
            return rest.split_once(']').is_some_and(|(address, after)| {
                address.parse::<std::net::Ipv6Addr>().is_ok()
                    && (after.is_empty() || after.strip_prefix(':').is_some_and(is_port))
            });
        }
        None => host.rsplit_once(':').map_or(
            host,
            |(name, port)| {
                if is_port(port) { name } else { host }
            },
        ),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
}

/// A token's `info` claim as kept: a JSON object, compact, at most [`MAX_INFO_BYTES`].
fn info_of(info: serde_json::Value) -> Result<Arc<String>, String> {
    if !info.is_object() {
        return Err("the info claim must be a JSON object".into());
    }
    let text = info.to_string();
    if text.len() > MAX_INFO_BYTES {
        return Err(format!(
            "the info claim is {} bytes of JSON; at most {MAX_INFO_BYTES} are accepted",
            text.len()
        ));
    }
    Ok(Arc::new(text))
}

/// Exact names, `prefix*` patterns, or `*`.
fn matches_any(patterns: &[String], topic: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => topic.starts_with(prefix),
        None => p == topic,
    })
}

/// Whether `patterns` match every topic that starts with `prefix`: one of them is a
/// `claim*` whose `claim` starts `prefix` (an exact name never covers a pattern).
fn covers_all(patterns: &[String], prefix: &str) -> bool {
    patterns
        .iter()
        .any(|p| p.strip_suffix('*').is_some_and(|c| prefix.starts_with(c)))
}

/// A refusal for `topic`.
pub(crate) fn forbidden(topic: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!("not allowed on topic {topic:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_the_same_site_only_by_host_and_port() {
        assert!(same_origin("http://127.0.0.1:9090", Some("127.0.0.1:9090")));
        assert!(same_origin("HTTP://LocalHost:8080", Some("localhost:8080")));
        assert!(same_origin("https://app.example", Some("app.example")));
        assert!(same_origin("https://app.example", Some("app.example:443")));
        assert!(same_origin("http://[::1]:8080", Some("[::1]:8080")));
        assert!(!same_origin("http://app.example", Some("app.example:8080")));
        assert!(!same_origin("https://app.example", Some("app.example:80")));
        assert!(!same_origin("https://evil.example", Some("app.example")));
        assert!(!same_origin(
            "http://app.example.evil.example",
            Some("app.example")
        ));
        assert!(!same_origin("null", Some("app.example")));
        assert!(!same_origin("http://app.example", None));
        assert!(!same_origin("http://user@app.example", Some("app.example")));
        assert!(!same_origin("file:///etc", Some("app.example")));
    }

    #[test]
    fn only_addresses_and_localhost_are_local_host_names() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:9090",
            "[::1]:9090",
            "[::1]",
            "localhost",
            "LOCALHOST:9090",
            "console.localhost:1",
            "10.0.0.5:9090",
            "localhost.",
        ] {
            assert!(is_address_or_localhost(host), "{host}");
        }
        for host in [
            "rebind.evil.example",
            "rebind.evil.example:9090",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "",
            "[zz]:1",
            "evil:localhost",
            "[::1]evil.example",
            "[::1]evil.example:9090",
            "[::1]:evil.example",
            "[::1]:",
            "[::1]]",
            "[::1",
            "127.0.0.1:",
        ] {
            assert!(!is_address_or_localhost(host), "{host}");
        }
    }

    #[test]
    fn a_claim_covers_the_patterns_inside_it() {
        let claims = vec!["orders.*".to_string(), "news".to_string()];
        assert!(covers_all(&claims, "orders."));
        assert!(covers_all(&claims, "orders.eu."));
        assert!(
            !covers_all(&claims, "news."),
            "an exact name covers no pattern"
        );
        assert!(!covers_all(&["orders.eu.*".to_string()], "orders."));
        assert!(covers_all(&["*".to_string()], "anything."));
    }

    #[test]
    fn patterns() {
        let p = vec!["orders.*".to_string(), "news".to_string()];
        assert!(matches_any(&p, "orders.eu"));
        assert!(matches_any(&p, "news"));
        assert!(!matches_any(&p, "newsroom"));
        assert!(!matches_any(&p, "order"));
        assert!(matches_any(&["*".to_string()], "anything"));
    }

    #[test]
    fn info_is_a_bounded_json_object() {
        let ok = info_of(serde_json::json!({"device": "phone", "v": [1, 2]})).unwrap();
        assert_eq!(&*ok, r#"{"device":"phone","v":[1,2]}"#);
        assert!(
            info_of(serde_json::json!("text"))
                .unwrap_err()
                .contains("object")
        );
        let big = serde_json::json!({ "x": "y".repeat(MAX_INFO_BYTES) });
        assert!(info_of(big).unwrap_err().contains("at most 1024"));
        let fits = serde_json::json!({ "x": "y".repeat(MAX_INFO_BYTES - 8) });
        assert_eq!(info_of(fits).unwrap().len(), MAX_INFO_BYTES);
    }
}
